//! [`Gated`]: a backend whose events stay pending until the test completes them.
//!
//! The CPU backend's events are complete when recorded, and a device's finish in
//! microseconds, so a test of "a block freed on a stream is not handed elsewhere while the
//! stream's work is pending" passes on them whether or not the rule holds. `Gated` wraps
//! any backend: memory, data movement and copy plans ([`Kernels`], so bufferizers and halo
//! transformers run on it) go to the inner backend, but an event of a gated
//! stream completes only when the test calls [`Gated::complete`] (or [`Gated::complete_all`],
//! or waits on it with [`Backend::synchronize`] / [`Backend::wait_event`]). As on a device,
//! [`Backend::stream_wait`] orders streams: an event recorded on a stream after it was made
//! to wait for another stream's event completes only once that event has completed too.
//!
//! ```
//! use gpubuf::{Backend, MemoryPool};
//! use gpubuf_testkit::gated::Gated;
//!
//! let g = Gated::new(gpubuf_testkit::cpu());
//! let pool = MemoryPool::new(g.clone());
//! let s = g.new_stream()?;
//! let a = pool.allocate_on(4096, &g, &s)?;
//! let at = a.offset();
//! drop(a); // waits on an event of `s`
//! let other = pool.allocate(4096)?;
//! assert_ne!(other.offset(), at, "the host may not take it yet");
//! g.complete(&s)?;
//! assert_eq!(pool.allocate(4096)?.offset(), at);
//! # Ok::<(), gpubuf::Error>(())
//! ```

use gpubuf::{
    Allocator, Backend, BackendKind, CopyPlan, DType, DeviceInfo, Error, Kernels, MemRef, MemoryInfo, Result,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Identities of gated streams, process-wide and never reused.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A backend whose events complete only when the test says so (see the module docs).
pub struct Gated<B: Backend> {
    inner: B,
    shared: Arc<Shared<B>>,
}

struct Shared<B: Backend> {
    default_stream: GatedStream<B>,
    /// Every event not yet completed, with its stream's identity.
    outstanding: Mutex<Vec<(u64, Arc<Mark<B>>)>>,
    /// The events each stream was made to wait for ([`Backend::stream_wait`]).
    waits: Mutex<Vec<(u64, Arc<Mark<B>>)>>,
    /// Whether `record_event` fails (a driver error on demand).
    fail_records: AtomicBool,
}

/// An event's state: the inner backend's event, and whether the test completed it.
struct Mark<B: Backend> {
    inner: B::Event,
    done: AtomicBool,
    /// Events of other streams that the stream waited for before this one was recorded.
    after: Vec<Arc<Mark<B>>>,
}

impl<B: Backend> Mark<B> {
    /// Completed by the test, and so is everything it waits for.
    fn complete(&self) -> bool {
        self.done.load(Ordering::SeqCst) && self.after.iter().all(|m| m.complete())
    }

    /// Marks it and everything it waits for complete (a host wait has waited for all of it).
    fn finish(&self) {
        self.done.store(true, Ordering::SeqCst);
        for m in &self.after {
            m.finish();
        }
    }
}

impl<B: Backend> Clone for Gated<B> {
    fn clone(&self) -> Self {
        Gated { inner: self.inner.clone(), shared: self.shared.clone() }
    }
}

impl<B: Backend> std::fmt::Debug for Gated<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gated").field("inner", &self.inner).finish()
    }
}

/// A stream of a [`Gated`] backend: an inner stream and an identity of its own.
pub struct GatedStream<B: Backend> {
    inner: B::Stream,
    id: u64,
}

impl<B: Backend> Clone for GatedStream<B> {
    fn clone(&self) -> Self {
        GatedStream { inner: self.inner.clone(), id: self.id }
    }
}

impl<B: Backend> std::fmt::Debug for GatedStream<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatedStream").field("id", &self.id).finish()
    }
}

impl<B: Backend> GatedStream<B> {
    /// The stream's identity ([`Backend::stream_id`]).
    pub fn id(&self) -> u64 {
        self.id
    }
}

/// An event of a [`Gated`] backend: complete once the test completed it.
pub struct GatedEvent<B: Backend> {
    stream: u64,
    mark: Arc<Mark<B>>,
}

impl<B: Backend> std::fmt::Debug for GatedEvent<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatedEvent")
            .field("stream", &self.stream)
            .field("done", &self.mark.done.load(Ordering::SeqCst))
            .finish()
    }
}

impl<B: Backend> GatedEvent<B> {
    /// The identity of the stream the event was recorded on.
    pub fn stream(&self) -> u64 {
        self.stream
    }
}

impl<B: Backend> Gated<B> {
    /// Wraps `inner`; its default stream is gated too.
    pub fn new(inner: B) -> Self {
        let default_stream = GatedStream { inner: inner.default_stream().clone(), id: next_id() };
        let shared = Shared {
            default_stream,
            outstanding: Mutex::new(Vec::new()),
            waits: Mutex::new(Vec::new()),
            fail_records: AtomicBool::new(false),
        };
        Gated { inner, shared: Arc::new(shared) }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// Makes [`Backend::record_event`] fail with a driver error (`true`) or work again.
    pub fn fail_records(&self, fail: bool) {
        self.shared.fail_records.store(fail, Ordering::SeqCst);
    }

    /// Events recorded and not yet completed.
    pub fn pending(&self) -> usize {
        self.outstanding().len()
    }

    /// Finishes the work queued on `stream` (on the inner backend) and completes every
    /// event recorded on it so far.
    ///
    /// # Errors
    /// What the inner backend's `synchronize` returns.
    /// An event recorded after the stream was made to wait for another stream's event
    /// ([`Backend::stream_wait`]) stays pending until that event is completed too
    /// ([`Backend::synchronize`] completes those as well, as the host has waited for them).
    pub fn complete(&self, stream: &GatedStream<B>) -> Result<()> {
        self.complete_stream(stream, false)
    }

    fn complete_stream(&self, stream: &GatedStream<B>, with_waits: bool) -> Result<()> {
        self.inner.synchronize(&stream.inner)?;
        let mut out = self.outstanding();
        for (s, mark) in out.iter() {
            if *s == stream.id {
                if with_waits {
                    mark.finish();
                } else {
                    mark.done.store(true, Ordering::SeqCst);
                }
            }
        }
        out.retain(|(s, mark)| *s != stream.id && !mark.complete());
        Ok(())
    }

    /// Completes every event recorded so far, on every stream (each once the inner
    /// backend's work before it has finished).
    ///
    /// # Errors
    /// What the inner backend's `wait_event` returns.
    pub fn complete_all(&self) -> Result<()> {
        let marks: Vec<(u64, Arc<Mark<B>>)> = self.outstanding().drain(..).collect();
        for (_, mark) in marks {
            self.inner.wait_event(&mark.inner)?;
            mark.done.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    #[allow(clippy::type_complexity)]
    fn outstanding(&self) -> std::sync::MutexGuard<'_, Vec<(u64, Arc<Mark<B>>)>> {
        // A panicking test thread leaves a plain Vec behind: still consistent.
        self.shared.outstanding.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

impl<B: Backend> Allocator for Gated<B> {
    type Memory = B::Memory;

    fn allocate(&self, bytes: usize) -> Result<B::Memory> {
        self.inner.allocate(bytes)
    }

    fn allocate_immediate(&self, bytes: usize) -> Result<B::Memory> {
        self.inner.allocate_immediate(bytes)
    }

    fn memory_info(&self) -> Option<MemoryInfo> {
        self.inner.memory_info()
    }
}

impl<B: Backend> Backend for Gated<B> {
    type Stream = GatedStream<B>;
    type Event = GatedEvent<B>;
    const KIND: BackendKind = B::KIND;

    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }

    fn same_device(&self, other: &Self) -> bool {
        self.inner.same_device(&other.inner)
    }

    fn default_stream(&self) -> &GatedStream<B> {
        &self.shared.default_stream
    }

    fn stream_id(&self, stream: &GatedStream<B>) -> u64 {
        stream.id
    }

    fn new_stream(&self) -> Result<GatedStream<B>> {
        Ok(GatedStream { inner: self.inner.new_stream()?, id: next_id() })
    }

    fn write(&self, stream: &GatedStream<B>, dst: &B::Memory, offset: usize, src: &[u8]) -> Result<()> {
        self.inner.write(&stream.inner, dst, offset, src)
    }

    fn read(&self, stream: &GatedStream<B>, src: &B::Memory, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.inner.read(&stream.inner, src, offset, dst)
    }

    fn copy(
        &self,
        stream: &GatedStream<B>,
        src: MemRef<'_, B::Memory>,
        dst: &B::Memory,
        dst_offset: usize,
    ) -> Result<()> {
        self.inner.copy(&stream.inner, src, dst, dst_offset)
    }

    fn fill(&self, stream: &GatedStream<B>, dst: MemRef<'_, B::Memory>, pattern: &[u8]) -> Result<()> {
        self.inner.fill(&stream.inner, dst, pattern)
    }

    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }

    fn record_event(&self, stream: &GatedStream<B>) -> Result<GatedEvent<B>> {
        if self.shared.fail_records.load(Ordering::SeqCst) {
            return Err(Error::Driver {
                backend: self.inner.kind(),
                code: -1,
                message: "record_event failed on demand (gpubuf_testkit::gated)".into(),
            });
        }
        let after: Vec<Arc<Mark<B>>> = {
            let mut waits = self.shared.waits.lock().unwrap_or_else(PoisonError::into_inner);
            waits.retain(|(_, m)| !m.complete());
            waits.iter().filter(|(s, _)| *s == stream.id).map(|(_, m)| m.clone()).collect()
        };
        let inner = self.inner.record_event(&stream.inner)?;
        let mark = Arc::new(Mark { inner, done: AtomicBool::new(false), after });
        self.outstanding().push((stream.id, mark.clone()));
        Ok(GatedEvent { stream: stream.id, mark })
    }

    fn event_complete(&self, event: &GatedEvent<B>) -> Result<bool> {
        Ok(event.mark.complete())
    }

    /// Waiting completes the event and the events it waits for: the host blocks until the
    /// inner work is done.
    fn wait_event(&self, event: &GatedEvent<B>) -> Result<()> {
        self.inner.wait_event(&event.mark.inner)?;
        event.mark.finish();
        self.outstanding().retain(|(_, m)| !m.complete());
        Ok(())
    }

    /// Later events of `stream` complete only once `event` has completed too.
    fn stream_wait(&self, stream: &GatedStream<B>, event: &GatedEvent<B>) -> Result<()> {
        self.inner.stream_wait(&stream.inner, &event.mark.inner)?;
        if !event.mark.complete() {
            let mut waits = self.shared.waits.lock().unwrap_or_else(PoisonError::into_inner);
            waits.push((stream.id, event.mark.clone()));
        }
        Ok(())
    }

    fn synchronize(&self, stream: &GatedStream<B>) -> Result<()> {
        self.complete_stream(stream, true)
    }
}

impl<B: Kernels> Kernels for Gated<B> {
    type Plan = B::Plan;

    fn prepare(&self, plan: &CopyPlan, dtype: DType) -> Result<B::Plan> {
        self.inner.prepare(plan, dtype)
    }

    fn gather(
        &self,
        stream: &GatedStream<B>,
        plan: &B::Plan,
        sources: &[MemRef<'_, B::Memory>],
        dst: MemRef<'_, B::Memory>,
    ) -> Result<()> {
        self.inner.gather(&stream.inner, plan, sources, dst)
    }

    fn scatter(
        &self,
        stream: &GatedStream<B>,
        plan: &B::Plan,
        src: MemRef<'_, B::Memory>,
        targets: &[MemRef<'_, B::Memory>],
    ) -> Result<()> {
        self.inner.scatter(&stream.inner, plan, src, targets)
    }
}
