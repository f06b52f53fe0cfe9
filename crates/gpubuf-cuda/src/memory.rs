//! [`CudaMemory`], streams and events as owned raw driver handles.

use crate::error::driver;
use crate::order::{Ready, StreamSet};
use crate::CudaBackend;
use cudarc::driver::sys::{CUdeviceptr, CUevent, CUstream};
use cudarc::driver::{result, CudaContext};
use gpubuf_core::{DeviceMemory, Error, Result};
use std::any::Any;
use std::sync::Arc;

/// One device allocation, owned by one CUDA context (device).
///
/// gpubuf's own are allocated stream-ordered (`cuMemAllocAsync`) where the device supports
/// memory pools, on the stream that asked for them: the backend's default stream for
/// [`gpubuf_core::Allocator::allocate`], the given one for
/// [`crate::CudaBackend::allocate_on`]. gpubuf's operations on another stream first wait
/// for the allocation. The free is stream-ordered on the same stream, after it waited for
/// the work queued so far on every gpubuf stream of the context (see [`crate::interop`] for
/// work queued elsewhere). Adopted memory (see [`crate::CudaBackend::adopt_slice`]) is
/// released by its owner instead, after the same point.
///
/// Handing memory of one device to a backend of another is refused with
/// [`gpubuf_core::Error::DeviceMismatch`] by every operation.
pub struct CudaMemory {
    pub(crate) ptr: CUdeviceptr,
    pub(crate) len: usize,
    pub(crate) owner: Owner,
    /// The owning context; two backends of one device share its primary context.
    pub(crate) ctx: Arc<CudaContext>,
    /// The device's ordinal (for messages).
    pub(crate) ordinal: usize,
    /// Where a stream-ordered allocation becomes usable on other streams.
    pub(crate) ready: Option<Ready>,
    /// The context's gpubuf streams, which the free waits for.
    pub(crate) streams: Arc<StreamSet>,
}

/// Who releases a [`CudaMemory`]'s device memory.
pub(crate) enum Owner {
    /// gpubuf allocated it: stream-ordered on `home` (`cuMemAllocAsync`, freed with
    /// `cuMemFreeAsync` there), or with `cuMemAlloc` when `home` is `None`.
    Gpubuf { home: Option<CudaStream> },
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
    /// Memory of `ctx` released by `owner`.
    pub(crate) fn new(
        ptr: CUdeviceptr,
        len: usize,
        owner: Owner,
        ctx: Arc<CudaContext>,
        streams: Arc<StreamSet>,
        ready: Option<Ready>,
    ) -> Self {
        let owner = if len == 0 && matches!(owner, Owner::Gpubuf { .. }) { Owner::Nothing } else { owner };
        if matches!(owner, Owner::Gpubuf { .. }) {
            // Fresh from the driver: no live gpubuf range can overlap it. (Adopted slices
            // are claimed by `adopt_slice` itself, which refuses overlaps.)
            crate::owned::claim(ptr, len);
        }
        CudaMemory { ptr, len, owner, ordinal: ctx.ordinal(), ctx, ready, streams }
    }

    /// Whether the memory was adopted (gpubuf did not allocate it).
    pub fn is_adopted(&self) -> bool {
        matches!(self.owner, Owner::Slice { .. } | Owner::Guard(_))
    }

    /// The ordinal of the device the memory belongs to.
    pub fn device_ordinal(&self) -> usize {
        self.ordinal
    }
}

impl CudaBackend {
    /// Refuses memory of another context (another device): CUDA would copy across
    /// devices or run kernels over addresses the device cannot reach.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`].
    pub(crate) fn own_memory(&self, memory: &CudaMemory) -> Result<()> {
        if memory.ctx.cu_ctx() == self.inner.ctx.cu_ctx() {
            return Ok(());
        }
        Err(Error::DeviceMismatch(format!(
            "memory of CUDA device {} (another context) given to the backend of device {}",
            memory.ordinal,
            self.inner.ctx.ordinal()
        )))
    }

    /// Refuses a stream of another context.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`].
    pub(crate) fn own_stream(&self, stream: &CudaStream) -> Result<()> {
        if stream.owner.ctx.cu_ctx() == self.inner.ctx.cu_ctx() {
            return Ok(());
        }
        Err(Error::DeviceMismatch(format!(
            "a stream of CUDA device {} (another context) given to the backend of device {}",
            stream.owner.ctx.ordinal(),
            self.inner.ctx.ordinal()
        )))
    }

    /// Checks that `memory` belongs to this backend's context and makes `stream` wait for
    /// its allocation when that was queued on another stream. Every operation that uses
    /// memory on a stream calls it first, with the context bound.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] for memory of another context; driver errors of the join.
    pub(crate) fn use_on(&self, stream: &CudaStream, memory: &CudaMemory) -> Result<()> {
        self.own_memory(memory)?;
        memory.join_allocation(stream)
    }
}

impl CudaMemory {
    /// Makes `stream` wait for this memory's allocation when that was queued on another
    /// stream and is not known done (with the context bound). Kernel launches call it for
    /// every memory argument, after checking the memory's context.
    ///
    /// # Errors
    /// Driver errors of the join.
    pub(crate) fn join_allocation(&self, stream: &CudaStream) -> Result<()> {
        match &self.ready {
            Some(r) => r.join(stream.id, stream.raw).map_err(|e| driver(e, "cuStreamWaitEvent")),
            None => Ok(()),
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
            .field("device", &self.ordinal)
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
        if matches!(owner, Owner::Gpubuf { .. } | Owner::Slice { .. }) {
            // Before the free: the range may come back from the driver right after it.
            crate::owned::forget(self.ptr, self.len);
        }
        let _ = self.ctx.bind_to_thread();
        match owner {
            Owner::Nothing => {}
            Owner::Gpubuf { home: Some(home) } => {
                // The home stream waits for the work queued so far on every gpubuf stream
                // of the context (each may have used the memory); if that fails, the host
                // waits for the whole context instead.
                if let Err(e) = self.streams.order_before(home.raw, Some(home.id)) {
                    tracing::warn!(
                        "ordering a free failed, synchronising: {}",
                        driver(e, "cuStreamWaitEvent")
                    );
                    let _ = self.ctx.synchronize();
                }
                // SAFETY: `ptr` came from `cuMemAllocAsync` on `home` and is freed once, on
                // `home` (kept alive by this clone), after the allocation (same stream) and
                // after every gpubuf operation queued on any stream of the context before
                // this drop (the waits above, or the synchronisation). No gpubuf operation
                // can be queued later: this was the last reference.
                if let Err(e) = unsafe { result::free_async(self.ptr, home.raw) } {
                    tracing::warn!("freeing CUDA memory failed: {}", driver(e, "cuMemFreeAsync"));
                }
            }
            Owner::Gpubuf { home: None } => {
                // The host waits for the work queued so far on every gpubuf stream of the
                // context (each may have used the memory), so the free is ordered after it
                // whatever `cuMemFree` itself waits for.
                if let Err(e) = self.streams.wait_host() {
                    tracing::warn!(
                        "waiting before a free failed, synchronising: {}",
                        driver(e, "cuEventSynchronize")
                    );
                    let _ = self.ctx.synchronize();
                }
                // SAFETY: `ptr` came from `cuMemAlloc` and is freed once, after every gpubuf
                // operation queued on any stream of the context before this drop completed
                // (the wait above, or the synchronisation). No gpubuf operation can be
                // queued later: this was the last reference.
                if let Err(e) = unsafe { result::free_sync(self.ptr) } {
                    tracing::warn!("freeing CUDA memory failed: {}", driver(e, "cuMemFree"));
                }
            }
            Owner::Slice { slice, stream } => {
                // The slice's stream (often non-blocking) waits for gpubuf's streams; then
                // cudarc frees the slice on it, after that wait.
                if let Err(e) = self.streams.order_before(stream.cu_stream(), None) {
                    tracing::warn!(
                        "ordering an adopted slice's free failed, synchronising: {}",
                        driver(e, "cuStreamWaitEvent")
                    );
                    let _ = self.ctx.synchronize();
                }
                drop(slice);
            }
            Owner::Guard(guard) => {
                if let Err(e) = self.streams.wait_host() {
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
    /// The stream's identity (as [`CudaStream::id`]).
    pub(crate) id: u64,
    pub(crate) ctx: Arc<CudaContext>,
    /// The context's gpubuf streams: this one leaves the set when destroyed.
    pub(crate) streams: Arc<StreamSet>,
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
        let _ = self.ctx.bind_to_thread();
        // Frees queued later still wait for the work queued here so far.
        self.streams.retire(self.id);
        if self.cudarc.is_some() {
            return; // cudarc's wrapper destroys the stream if it owns it
        }
        crate::owned::forget_stream(self.raw);
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
