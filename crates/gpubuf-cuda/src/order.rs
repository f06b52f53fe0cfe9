//! Stream ordering of device memory without the legacy default stream.
//!
//! gpubuf allocates stream-ordered on the stream that asks for the memory (its *home*,
//! the backend's default stream for [`gpubuf_core::Allocator::allocate`]). Two things
//! follow:
//!
//! * **Use on another stream** waits for the allocation: an event recorded on the home
//!   stream right after `cuMemAllocAsync` ([`Ready`]) is joined (`cuStreamWaitEvent`) by
//!   the first uses on other streams, until a query finds it complete.
//! * **The free** waits for every stream that may have used the memory: each gpubuf
//!   stream of the context is registered here ([`StreamSet`]); before `cuMemFreeAsync` on
//!   the home stream, an event is recorded on every registered stream and the home stream
//!   waits for it, and for the last event of every stream destroyed with work still queued.
//!
//! Only the stream that frees waits: other streams never wait for each other's work, as
//! they would for anything queued on the legacy default stream.

use crate::error::driver;
use cudarc::driver::result;
use cudarc::driver::sys::{CUevent, CUevent_flags, CUevent_wait_flags, CUresult, CUstream};
use cudarc::driver::{CudaContext, DriverError};
use gpubuf_core::Result;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

/// The gpubuf streams of one context, and the last events of destroyed ones.
pub(crate) struct StreamSet {
    state: Mutex<State>,
    ctx: Arc<CudaContext>,
}

#[derive(Default)]
struct State {
    /// Live streams: identity, handle, and an event re-recorded at each free.
    live: Vec<(u64, CUstream, CUevent)>,
    /// Last events of destroyed streams whose work was not known complete.
    retired: Vec<CUevent>,
}

// SAFETY: the handles are plain driver handles, used only under the lock with the
// context bound, and valid from any thread.
unsafe impl Send for StreamSet {}
// SAFETY: as above.
unsafe impl Sync for StreamSet {}

impl State {
    /// Destroys the retired events that have completed (with the context bound).
    fn prune(&mut self) {
        self.retired.retain(|&ev| {
            // SAFETY: a live event of this context, owned by the set.
            let done = unsafe { result::event::query(ev) }.is_ok();
            if done {
                // SAFETY: complete and leaving the set: destroyed once.
                let _ = unsafe { result::event::destroy(ev) };
            }
            !done
        });
    }
}

/// One set per context, shared by every backend handle of it.
static SETS: Mutex<Vec<(usize, Weak<StreamSet>)>> = Mutex::new(Vec::new());

fn new_event() -> std::result::Result<CUevent, DriverError> {
    result::event::create(CUevent_flags::CU_EVENT_DISABLE_TIMING)
}

impl StreamSet {
    /// The set of `ctx`'s streams (made on first use).
    pub(crate) fn of(ctx: &Arc<CudaContext>) -> Arc<StreamSet> {
        let key = ctx.cu_ctx() as usize;
        let mut sets = SETS.lock();
        sets.retain(|(_, w)| w.strong_count() > 0);
        if let Some(set) = sets.iter().find(|(k, _)| *k == key).and_then(|(_, w)| w.upgrade()) {
            return set;
        }
        let set = Arc::new(StreamSet { state: Mutex::new(State::default()), ctx: ctx.clone() });
        sets.push((key, Arc::downgrade(&set)));
        set
    }

    /// Registers a stream (with the context bound).
    ///
    /// # Errors
    /// Driver errors creating its event.
    pub(crate) fn register(&self, id: u64, raw: CUstream) -> Result<()> {
        let ev = new_event().map_err(|e| driver(e, "cuEventCreate"))?;
        self.state.lock().live.push((id, raw, ev));
        Ok(())
    }

    /// Removes a stream about to be destroyed (with the context bound), keeping an event
    /// after its queued work while that work runs.
    pub(crate) fn retire(&self, id: u64) {
        let mut st = self.state.lock();
        let Some(i) = st.live.iter().position(|e| e.0 == id) else { return };
        let (_, raw, ev) = st.live.swap_remove(i);
        st.prune();
        // SAFETY: a live stream and event of this context (the stream is destroyed only
        // after this returns); the event is destroyed once, here or once it completed.
        if unsafe { result::event::record(ev, raw) }.is_ok() {
            st.retired.push(ev);
        } else {
            // SAFETY: as above.
            let _ = unsafe { result::event::destroy(ev) };
        }
    }

    /// Makes `target` wait for the work queued so far on every registered stream but the
    /// one with identity `skip` (the target itself, in order already), and for destroyed
    /// streams' work still running. With the context bound.
    pub(crate) fn order_before(
        &self,
        target: CUstream,
        skip: Option<u64>,
    ) -> std::result::Result<(), DriverError> {
        let mut st = self.state.lock();
        for &(id, raw, ev) in &st.live {
            if Some(id) == skip {
                continue;
            }
            // SAFETY: live streams and events of this context (a stream leaves the set
            // under this lock before it is destroyed); the wait takes the event's state at
            // this call, so re-recording it later changes nothing queued here.
            unsafe {
                result::event::record(ev, raw)?;
                result::stream::wait_event(target, ev, CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)?;
            }
        }
        st.prune();
        for &ev in &st.retired {
            // SAFETY: a live stream and event of this context.
            unsafe { result::stream::wait_event(target, ev, CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)? };
        }
        Ok(())
    }

    /// Blocks the host until the work queued so far on every registered stream (and on
    /// destroyed streams) has completed. With the context bound.
    pub(crate) fn wait_host(&self) -> std::result::Result<(), DriverError> {
        let st = self.state.lock();
        for &(_, raw, ev) in &st.live {
            // SAFETY: a live stream and event of this context, used under the lock.
            unsafe {
                result::event::record(ev, raw)?;
                result::event::synchronize(ev)?;
            }
        }
        for &ev in &st.retired {
            // SAFETY: a live event of this context.
            unsafe { result::event::synchronize(ev)? };
        }
        Ok(())
    }
}

impl Drop for StreamSet {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        let st = self.state.get_mut();
        for ev in st.live.drain(..).map(|e| e.2).chain(st.retired.drain(..)) {
            // SAFETY: created by the set, destroyed once; a queued wait keeps what it needs.
            let _ = unsafe { result::event::destroy(ev) };
        }
    }
}

/// Where a stream-ordered allocation becomes usable: an event recorded on its home stream
/// right after the allocation.
pub(crate) struct Ready {
    /// The identity of the home stream.
    pub(crate) home: u64,
    event: CUevent,
    /// Set once the event was found complete: no stream needs to wait any more.
    done: AtomicBool,
    ctx: Arc<CudaContext>,
}

impl Ready {
    /// Records the point after the work queued so far on `home` (with the context bound).
    pub(crate) fn record(
        ctx: &Arc<CudaContext>,
        home: u64,
        raw: CUstream,
    ) -> std::result::Result<Self, DriverError> {
        let event = new_event()?;
        // SAFETY: a live event and stream of this context.
        if let Err(e) = unsafe { result::event::record(event, raw) } {
            // SAFETY: created above, destroyed once.
            let _ = unsafe { result::event::destroy(event) };
            return Err(e);
        }
        Ok(Ready { home, event, done: AtomicBool::new(false), ctx: ctx.clone() })
    }

    /// Makes `stream` (identity `id`) wait for the allocation unless it is the home stream
    /// or the allocation is known done. With the context bound.
    pub(crate) fn join(&self, id: u64, stream: CUstream) -> std::result::Result<(), DriverError> {
        if id == self.home || self.done.load(Ordering::Acquire) {
            return Ok(());
        }
        // SAFETY: a live event of this context.
        match unsafe { result::event::query(self.event) } {
            Ok(()) => {
                self.done.store(true, Ordering::Release);
                Ok(())
            }
            // SAFETY: a live stream and event of this context.
            Err(e) if e.0 == CUresult::CUDA_ERROR_NOT_READY => unsafe {
                result::stream::wait_event(stream, self.event, CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
            },
            Err(e) => Err(e),
        }
    }

    /// Blocks the host until the allocation is done. With the context bound.
    pub(crate) fn wait(&self) -> std::result::Result<(), DriverError> {
        if !self.done.load(Ordering::Acquire) {
            // SAFETY: a live event of this context.
            unsafe { result::event::synchronize(self.event)? };
            self.done.store(true, Ordering::Release);
        }
        Ok(())
    }
}

// SAFETY: an event handle, valid from any thread with the context bound; the flag is atomic.
unsafe impl Send for Ready {}
// SAFETY: as above.
unsafe impl Sync for Ready {}

impl Drop for Ready {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: created by `record`, destroyed once; a queued wait keeps what it needs.
        let _ = unsafe { result::event::destroy(self.event) };
    }
}
