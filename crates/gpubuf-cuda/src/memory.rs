//! [`CudaMemory`], streams and events as owned raw driver handles.

use crate::error::driver;
use cudarc::driver::sys::{CUdeviceptr, CUevent, CUevent_flags, CUevent_wait_flags, CUstream};
use cudarc::driver::{result, CudaContext};
use gpubuf_core::DeviceMemory;
use std::any::Any;
use std::sync::Arc;

/// One device allocation. gpubuf's own are allocated stream-ordered (`cuMemAllocAsync` on
/// the legacy default stream) where the device supports memory pools, and freed the same
/// way, which orders the free after all work queued before it on gpubuf's (blocking)
/// streams. Adopted memory (see [`crate::CudaBackend::adopt_slice`]) is released by its
/// owner instead, after the same point.
pub struct CudaMemory {
    pub(crate) ptr: CUdeviceptr,
    pub(crate) len: usize,
    pub(crate) owner: Owner,
    pub(crate) ctx: Arc<CudaContext>,
}

/// Who releases a [`CudaMemory`]'s device memory.
pub(crate) enum Owner {
    /// gpubuf allocated it (`cuMemAllocAsync` when `stream_ordered`, else `cuMemAlloc`) and
    /// frees it the same way.
    Gpubuf { stream_ordered: bool },
    /// A cudarc `CudaSlice` handed over: dropped (cudarc frees it on `stream`) once `stream`
    /// waits for the work queued on gpubuf's streams.
    Slice { slice: Box<dyn Any + Send + Sync>, stream: Arc<cudarc::driver::CudaStream> },
    /// Foreign memory: gpubuf never frees the pointer; the guard is dropped once the work
    /// queued on gpubuf's streams has completed.
    Guard(Box<dyn Any + Send + Sync>),
    /// Nothing to release (an empty allocation).
    Nothing,
}

impl CudaMemory {
    /// gpubuf's own allocation.
    pub(crate) fn allocated(
        ptr: CUdeviceptr,
        len: usize,
        stream_ordered: bool,
        ctx: Arc<CudaContext>,
    ) -> Self {
        let owner = if len == 0 { Owner::Nothing } else { Owner::Gpubuf { stream_ordered } };
        CudaMemory { ptr, len, owner, ctx }
    }

    /// Whether gpubuf allocated this memory stream-ordered (its use must wait for the
    /// allocation on the legacy default stream).
    pub(crate) fn stream_ordered(&self) -> bool {
        matches!(self.owner, Owner::Gpubuf { stream_ordered: true })
    }

    /// Whether the memory was adopted (gpubuf did not allocate it).
    pub fn is_adopted(&self) -> bool {
        matches!(self.owner, Owner::Slice { .. } | Owner::Guard(_))
    }
}

/// An event recorded on the legacy default stream of the current context: it completes
/// after all work queued before it on every blocking stream (gpubuf's streams) and on the
/// legacy stream itself (gpubuf's stream-ordered allocations and frees).
pub(crate) fn legacy_event() -> Result<CUevent, cudarc::driver::DriverError> {
    let ev = result::event::create(CUevent_flags::CU_EVENT_DISABLE_TIMING)?;
    // SAFETY: a live event of the current context and the legacy default stream.
    match unsafe { result::event::record(ev, result::stream::null()) } {
        Ok(()) => Ok(ev),
        Err(e) => {
            // SAFETY: created above, destroyed once.
            let _ = unsafe { result::event::destroy(ev) };
            Err(e)
        }
    }
}

// SAFETY: a device pointer is an integer address valid in any thread once the owning
// context is bound; gpubuf binds the context before every driver call.
unsafe impl Send for CudaMemory {}
// SAFETY: as above; the handle is never mutated after creation.
unsafe impl Sync for CudaMemory {}

impl std::fmt::Debug for CudaMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaMemory")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .finish()
    }
}

impl DeviceMemory for CudaMemory {
    fn len(&self) -> usize {
        self.len
    }

    fn id(&self) -> usize {
        self.ptr as usize
    }
}

impl Drop for CudaMemory {
    fn drop(&mut self) {
        let owner = std::mem::replace(&mut self.owner, Owner::Nothing);
        if matches!(owner, Owner::Nothing) {
            return;
        }
        let _ = self.ctx.bind_to_thread();
        match owner {
            Owner::Nothing => {}
            Owner::Gpubuf { stream_ordered } => {
                // SAFETY: `ptr` came from the matching allocation call and is freed once.
                let r = unsafe {
                    if stream_ordered {
                        result::free_async(self.ptr, result::stream::null())
                    } else {
                        result::free_sync(self.ptr)
                    }
                };
                if let Err(e) = r {
                    tracing::warn!("freeing CUDA memory failed: {}", driver(e, "cuMemFree"));
                }
            }
            Owner::Slice { slice, stream } => {
                // The slice's stream (often non-blocking) waits for gpubuf's streams; then
                // cudarc frees the slice on it, after that wait.
                let joined = legacy_event().and_then(|ev| {
                    // SAFETY: a live stream and event of this context; the event is
                    // destroyed after the wait was queued (the driver keeps it until then).
                    unsafe {
                        let r = result::stream::wait_event(
                            stream.cu_stream(),
                            ev,
                            CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                        );
                        let _ = result::event::destroy(ev);
                        r
                    }
                });
                if let Err(e) = joined {
                    tracing::warn!(
                        "ordering an adopted slice's free failed, synchronising: {}",
                        driver(e, "cuStreamWaitEvent")
                    );
                    let _ = self.ctx.synchronize();
                }
                drop(slice);
            }
            Owner::Guard(guard) => {
                let done = legacy_event().and_then(|ev| {
                    // SAFETY: a live event of this context, destroyed once after the wait.
                    unsafe {
                        let r = result::event::synchronize(ev);
                        let _ = result::event::destroy(ev);
                        r
                    }
                });
                if let Err(e) = done {
                    tracing::warn!(
                        "waiting before releasing adopted memory failed, synchronising: {}",
                        driver(e, "cuEventSynchronize")
                    );
                    let _ = self.ctx.synchronize();
                }
                drop(guard);
            }
        }
    }
}

/// A CUDA stream created blocking with respect to the legacy default stream; clones share
/// it, and it is destroyed when the last clone drops.
#[derive(Clone)]
pub struct CudaStream {
    pub(crate) raw: CUstream,
    /// The stream's identity, never reused in the process (a destroyed stream's handle
    /// may come back for a new stream, so the handle cannot serve).
    pub(crate) id: u64,
    /// Keeps the stream alive while any clone exists.
    pub(crate) owner: Arc<OwnedStream>,
}

/// The owning handle of a stream.
pub(crate) struct OwnedStream {
    pub(crate) raw: CUstream,
    pub(crate) ctx: Arc<CudaContext>,
    /// A cudarc stream wrapped by gpubuf: it owns the handle (gpubuf destroys nothing).
    pub(crate) cudarc: Option<Arc<cudarc::driver::CudaStream>>,
}

// SAFETY: CUDA streams may be used from any thread with the context bound.
unsafe impl Send for CudaStream {}
// SAFETY: as above; the handle is not mutated after creation.
unsafe impl Sync for CudaStream {}
// SAFETY: as above.
unsafe impl Send for OwnedStream {}
// SAFETY: as above.
unsafe impl Sync for OwnedStream {}

impl std::fmt::Debug for CudaStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaStream").field("id", &self.id).field("raw", &self.raw).finish()
    }
}

impl Drop for OwnedStream {
    fn drop(&mut self) {
        if self.cudarc.is_some() {
            return; // cudarc's wrapper destroys the stream if it owns it
        }
        let _ = self.ctx.bind_to_thread();
        // SAFETY: created by `stream::create`, destroyed once; queued work still completes.
        let _ = unsafe { result::stream::destroy(self.raw) };
    }
}

/// A CUDA event (timing disabled).
pub struct CudaEvent {
    pub(crate) raw: CUevent,
    pub(crate) ctx: Arc<CudaContext>,
    /// Whether gpubuf destroys the event with this value (false for a borrowed one).
    pub(crate) owned: bool,
    /// A cudarc event taken over: it destroys the handle.
    pub(crate) _cudarc: Option<cudarc::driver::CudaEvent>,
}

impl CudaEvent {
    /// An event gpubuf created and destroys.
    pub(crate) fn created(raw: CUevent, ctx: Arc<CudaContext>) -> Self {
        CudaEvent { raw, ctx, owned: true, _cudarc: None }
    }
}

// SAFETY: events may be queried and waited on from any thread with the context bound.
unsafe impl Send for CudaEvent {}
// SAFETY: as above.
unsafe impl Sync for CudaEvent {}

impl std::fmt::Debug for CudaEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaEvent").field("raw", &self.raw).finish()
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let _ = self.ctx.bind_to_thread();
        // SAFETY: created by `event::create`, destroyed once.
        let _ = unsafe { result::event::destroy(self.raw) };
    }
}
