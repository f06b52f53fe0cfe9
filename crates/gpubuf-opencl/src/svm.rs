//! Shared virtual memory (OpenCL 2.0 SVM) as a gpubuf [`Allocator`], so a memory pool can
//! serve SVM blocks on devices that support them.

use crate::backend::OpenClBackend;
use crate::error::{driver, unavailable};
use gpubuf_core::{Allocator, DeviceMemory, Error, MemRef, MemoryInfo, Result};
use opencl3::command_queue::enqueue_svm_mem_cpy;
use opencl3::device::{CL_DEVICE_SVM_COARSE_GRAIN_BUFFER, CL_DEVICE_SVM_FINE_GRAIN_BUFFER};
use opencl3::event::Event;
use opencl3::memory::{svm_alloc, svm_free, CL_MEM_READ_WRITE, CL_MEM_SVM_FINE_GRAIN_BUFFER};
use opencl3::types::CL_BLOCKING;
use std::ffi::c_void;
use std::ptr::{self, NonNull};

/// Allocates SVM buffers (fine-grained where the device offers it, else coarse-grained).
#[derive(Debug, Clone)]
pub struct SvmAllocator {
    backend: OpenClBackend,
    fine_grain: bool,
}

/// One SVM allocation: a pointer valid on the host and the device.
pub struct SvmMemory {
    ptr: NonNull<c_void>,
    len: usize,
    fine_grain: bool,
    backend: OpenClBackend,
}

// SAFETY: SVM pointers are plain addresses shared by host and device; access goes through
// OpenCL calls (memcpy on a queue), which are thread-safe.
unsafe impl Send for SvmMemory {}
// SAFETY: as above.
unsafe impl Sync for SvmMemory {}

impl std::fmt::Debug for SvmMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SvmMemory").field("ptr", &self.ptr).field("len", &self.len).finish()
    }
}

impl DeviceMemory for SvmMemory {
    fn len(&self) -> usize {
        self.len
    }

    fn id(&self) -> usize {
        self.ptr.as_ptr() as usize
    }
}

impl SvmAllocator {
    /// An SVM allocator on `backend`'s device.
    ///
    /// # Errors
    /// [`Error::BackendUnavailable`] when the device reports no SVM support.
    pub fn new(backend: &OpenClBackend) -> Result<Self> {
        let caps = backend.entry().device.svm_mem_capability();
        if caps & CL_DEVICE_SVM_COARSE_GRAIN_BUFFER == 0 {
            return Err(unavailable(format!("device {} reports no SVM support", backend.entry().info.name)));
        }
        Ok(SvmAllocator { backend: backend.clone(), fine_grain: caps & CL_DEVICE_SVM_FINE_GRAIN_BUFFER != 0 })
    }

    /// Whether allocations are fine-grained (host and device see writes without mapping).
    pub fn fine_grain(&self) -> bool {
        self.fine_grain
    }
}

impl Allocator for SvmAllocator {
    type Memory = SvmMemory;

    fn allocate(&self, bytes: usize) -> Result<SvmMemory> {
        if bytes as u64 > self.backend.max_alloc() {
            return Err(Error::OutOfMemory {
                requested: bytes,
                available: Some(self.backend.max_alloc() as usize),
                pool: None,
            });
        }
        let flags = CL_MEM_READ_WRITE | if self.fine_grain { CL_MEM_SVM_FINE_GRAIN_BUFFER } else { 0 };
        // SAFETY: a valid context; a non-zero size; 0 asks for the default alignment.
        let raw = unsafe { svm_alloc(self.backend.inner.context.get(), flags, bytes.max(1), 0) };
        let ptr = raw.ok().and_then(NonNull::new).ok_or(Error::OutOfMemory {
            requested: bytes,
            available: None,
            pool: None,
        })?;
        Ok(SvmMemory { ptr, len: bytes, fine_grain: self.fine_grain, backend: self.backend.clone() })
    }

    fn memory_info(&self) -> Option<MemoryInfo> {
        self.backend.memory_info()
    }
}

impl SvmMemory {
    /// The shared pointer (borrowed: valid while this value lives, never to be freed by
    /// the caller). The drop frees it with `clSVMFree` once gpubuf's default queue has
    /// finished; `clSVMFree` does not wait for other queues, so work the caller enqueued
    /// with the pointer elsewhere must be finished before the value drops.
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr.as_ptr()
    }

    /// Whether the allocation is fine-grained.
    pub fn fine_grain(&self) -> bool {
        self.fine_grain
    }

    fn memcpy(&self, dst: *mut c_void, src: *const c_void, len: usize) -> Result<()> {
        let q = &self.backend.inner_default_queue();
        // SAFETY: both ranges were checked by the callers; the copy is blocking.
        let ev = unsafe { enqueue_svm_mem_cpy(q.get(), CL_BLOCKING, dst, src, len, 0, ptr::null()) }
            .map_err(|c| driver(c, "clEnqueueSVMMemcpy"))?;
        drop(Event::new(ev));
        Ok(())
    }

    /// Copies `src` into the allocation at byte `offset` (blocking).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`]; driver errors.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        MemRef::new(self, offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        // SAFETY: `offset + len` lies inside the allocation (checked above).
        let dst = unsafe { (self.ptr.as_ptr() as *mut u8).add(offset) } as *mut c_void;
        self.memcpy(dst, src.as_ptr() as *const c_void, src.len())
    }

    /// Copies bytes from `offset` into `dst` (blocking).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`]; driver errors.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        MemRef::new(self, offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        // SAFETY: as in `write`.
        let src = unsafe { (self.ptr.as_ptr() as *const u8).add(offset) } as *const c_void;
        self.memcpy(dst.as_mut_ptr() as *mut c_void, src, dst.len())
    }
}

impl Drop for SvmMemory {
    fn drop(&mut self) {
        // clSVMFree does not wait for queued work: finish the queue first.
        let _ = self.backend.inner_default_queue().finish();
        // SAFETY: allocated by `svm_alloc` in this context; freed once, after the queue drained.
        let _ = unsafe { svm_free(self.backend.inner.context.get(), self.ptr.as_ptr()) };
    }
}
