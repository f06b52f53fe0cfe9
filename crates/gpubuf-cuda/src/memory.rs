//! [`CudaMemory`], streams and events as owned raw driver handles.

use crate::error::driver;
use cudarc::driver::sys::{CUdeviceptr, CUevent, CUstream};
use cudarc::driver::{result, CudaContext};
use gpubuf_core::DeviceMemory;
use std::sync::Arc;

/// One device allocation. Allocated stream-ordered (`cuMemAllocAsync` on the legacy
/// default stream) where the device supports memory pools, and freed the same way, which
/// orders the free after all work queued before it on gpubuf's (blocking) streams.
pub struct CudaMemory {
    pub(crate) ptr: CUdeviceptr,
    pub(crate) len: usize,
    pub(crate) stream_ordered: bool,
    pub(crate) ctx: Arc<CudaContext>,
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
        if self.len == 0 {
            return;
        }
        let _ = self.ctx.bind_to_thread();
        // SAFETY: `ptr` came from the matching allocation call and is freed once.
        let r = unsafe {
            if self.stream_ordered {
                result::free_async(self.ptr, result::stream::null())
            } else {
                result::free_sync(self.ptr)
            }
        };
        if let Err(e) = r {
            tracing::warn!("freeing CUDA memory failed: {}", driver(e, "cuMemFree"));
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
    pub(crate) _owner: Arc<OwnedStream>,
}

/// The owning handle of a stream.
pub(crate) struct OwnedStream {
    pub(crate) raw: CUstream,
    pub(crate) ctx: Arc<CudaContext>,
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
        // SAFETY: created by `stream::create`, destroyed once; queued work still completes.
        let _ = unsafe { result::stream::destroy(self.raw) };
    }
}

/// A CUDA event (timing disabled).
pub struct CudaEvent {
    pub(crate) raw: CUevent,
    pub(crate) ctx: Arc<CudaContext>,
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
        let _ = self.ctx.bind_to_thread();
        // SAFETY: created by `event::create`, destroyed once.
        let _ = unsafe { result::event::destroy(self.raw) };
    }
}
