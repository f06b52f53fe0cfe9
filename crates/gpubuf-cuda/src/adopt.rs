//! Foreign device memory adopted by gpubuf without a copy: cudarc slices, and raw device
//! pointers kept alive by an owner guard.

use crate::error::driver;
use crate::memory::Owner;
use crate::{CudaBackend, CudaMemory};
use cudarc::driver::sys::{CUdeviceptr, CUevent_wait_flags, CUpointer_attribute, CUresult};
use cudarc::driver::{result, CudaSlice, DevicePtr};
use gpubuf_buffer::Buffer;
use gpubuf_core::{Backend, Error, Result};
use std::any::Any;
use std::ffi::c_int;

impl CudaBackend {
    /// Adopts a cudarc slice without a copy: the returned buffer is its memory, and the slice
    /// is dropped (cudarc frees it) exactly once, when the last gpubuf view of the buffer
    /// drops.
    ///
    /// **Ordering.** The work queued on the slice's stream before this call is joined to
    /// gpubuf's default stream (an event, `cuStreamWaitEvent`): gpubuf's later work on the
    /// default stream sees the slice's contents. At the end, the slice's stream first waits
    /// for the work queued on gpubuf's streams, then cudarc frees the slice on it: the free
    /// never overtakes a gpubuf copy or kernel. Work the caller queues on other streams
    /// against the buffer is the caller's to order (see [`crate::interop`]).
    ///
    /// A slice over memory gpubuf frees already (its own allocations, slices adopted
    /// before: a `CudaSlice` made with cudarc's `upgrade_device_ptr` over a gpubuf pointer)
    /// is refused, and leaked rather than dropped: dropping it would free gpubuf's memory.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the slice overlaps memory gpubuf owns (the slice is
    /// then leaked with `CudaSlice::leak`, never freed) or its byte length overflows;
    /// [`Error::DeviceMismatch`] when the slice belongs to another context; driver errors
    /// of the join. Except for memory gpubuf owns, the slice is dropped (freed by cudarc)
    /// on an error.
    pub fn adopt_slice<T: 'static>(&self, slice: CudaSlice<T>) -> Result<Buffer<CudaBackend>> {
        let bytes = slice
            .len()
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| Error::invalid("the slice's byte length overflows"))?;
        let stream = slice.stream().clone();
        let ptr = {
            let (ptr, _record) = slice.device_ptr(&stream);
            ptr
        };
        // First, whatever the context: a slice over gpubuf's memory must never be dropped.
        if !crate::owned::claim(ptr, bytes) {
            slice.leak(); // the memory is gpubuf's to free, not this slice's
            return Err(crate::owned::already_owned("device memory"));
        }
        let joined = if slice.context().cu_ctx() != self.inner.ctx.cu_ctx() {
            Err(Error::DeviceMismatch("the slice belongs to another CUDA context".into()))
        } else {
            self.join_slice(&stream)
        };
        if let Err(e) = joined {
            crate::owned::forget(ptr, bytes); // the caller's memory again: the slice frees it
            return Err(e);
        }
        let owner = Owner::Slice { slice: Box::new(slice), stream };
        let memory =
            CudaMemory::new(ptr, bytes, owner, self.inner.ctx.clone(), self.inner.streams.clone(), None);
        Ok(Buffer::from_memory(self, memory))
    }

    /// Makes gpubuf's default stream wait for the work queued so far on an adopted slice's
    /// stream.
    fn join_slice(&self, stream: &cudarc::driver::CudaStream) -> Result<()> {
        let written = stream.record_event(None).map_err(|e| driver(e, "cuEventRecord"))?;
        self.bind()?;
        // SAFETY: a live gpubuf stream and a live event of this context.
        unsafe {
            result::stream::wait_event(
                self.default_stream().raw,
                written.cu_event(),
                CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
        .map_err(|e| driver(e, "cuStreamWaitEvent"))
    }

    /// Adopts `bytes` bytes of device memory at `ptr` that something else owns: the
    /// returned buffer uses it in place; gpubuf never frees the pointer. `guard` is what
    /// keeps the memory alive (the foreign array, an `Arc` of it, a closure's captures): it
    /// is dropped exactly once, when the last gpubuf view of the buffer drops, after the
    /// work queued on gpubuf's streams has completed (that drop waits for it).
    ///
    /// # Safety
    /// * `ptr .. ptr + bytes` is device memory of this backend's device, readable and
    ///   writable from its context, and stays so until `guard` is dropped.
    /// * Nothing frees, reallocates or reuses the memory while `guard` is alive. The memory
    ///   may be gpubuf's own (a DLPack or `__cuda_array_interface__` export of a gpubuf
    ///   array coming back): then `guard` keeps that gpubuf buffer alive. gpubuf never frees
    ///   an adopted pointer, so this is the one adoption that takes gpubuf memory.
    /// * Foreign work that writes the memory before gpubuf reads it, or reads it while gpubuf
    ///   may write it, is ordered with gpubuf's streams by events (wrap the foreign event
    ///   with [`crate::CudaEvent::from_raw`] and join it with
    ///   [`gpubuf_core::Backend::stream_wait`]); gpubuf joins nothing by itself.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a null pointer with a non-zero length, a range that
    /// overflows, or a range the driver does not know as one allocation
    /// (`cuMemGetAddressRange`); [`Error::DeviceMismatch`] for memory the driver places on
    /// another device (`CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`); driver errors. The guard is
    /// dropped on an error.
    pub unsafe fn adopt_ptr(
        &self,
        ptr: CUdeviceptr,
        bytes: usize,
        guard: Box<dyn Any + Send + Sync>,
    ) -> Result<Buffer<CudaBackend>> {
        let end = u64::try_from(bytes).ok().and_then(|b| ptr.checked_add(b));
        let Some(end) = end else {
            return Err(Error::invalid(format!("device range {ptr:#x} + {bytes} overflows")));
        };
        if bytes > 0 {
            if ptr == 0 {
                return Err(Error::invalid("a null device pointer cannot be adopted"));
            }
            self.bind()?;
            let mut ordinal: c_int = -1;
            // The device first: with unified addressing another device's allocation is
            // found by the range query too.
            // SAFETY: only queries the driver's record of `ptr`; the out-pointer is a live
            // `int`, the type this attribute writes.
            let r = unsafe {
                cudarc::driver::sys::cuPointerGetAttribute(
                    (&mut ordinal as *mut c_int).cast(),
                    CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                    ptr,
                )
            };
            let own = self.inner.ctx.ordinal();
            if r == CUresult::CUDA_SUCCESS && usize::try_from(ordinal) != Ok(own) {
                return Err(Error::DeviceMismatch(format!(
                    "{ptr:#x} is memory of CUDA device {ordinal}, not of this backend's device {own}"
                )));
            }
            let (mut base, mut size) = (0 as CUdeviceptr, 0usize);
            // SAFETY: only queries the driver's record of the allocation holding `ptr`;
            // both out-pointers are live locals.
            let r = unsafe { cudarc::driver::sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) };
            if r != CUresult::CUDA_SUCCESS {
                return Err(Error::invalid(format!(
                    "{ptr:#x} is not device memory of this CUDA context ({r:?})"
                )));
            }
            let alloc_end = base.saturating_add(size as u64);
            if end > alloc_end {
                return Err(Error::invalid(format!(
                    "{bytes} bytes at {ptr:#x} run past the allocation ({size} bytes at {base:#x})"
                )));
            }
        }
        let owner = Owner::Guard(guard);
        let memory =
            CudaMemory::new(ptr, bytes, owner, self.inner.ctx.clone(), self.inner.streams.clone(), None);
        Ok(Buffer::from_memory(self, memory))
    }
}
