//! [`ClMemory`]: one OpenCL buffer object.

use crate::error::{cl, INVALID_BUFFER_SIZE, OOM_CODES};
use crate::owned::{self, Kind};
use gpubuf_core::{DeviceMemory, Error, Result};
use opencl3::context::Context;
use opencl3::memory::{Buffer, ClMem, CL_MEM_COPY_HOST_PTR, CL_MEM_READ_ONLY, CL_MEM_READ_WRITE};
use std::ptr;

/// One OpenCL buffer. OpenCL has no zero-sized buffers, so a zero-length allocation holds
/// one byte and reports length 0.
///
/// A `cl_mem` is the memory of at most one live `ClMemory` (see
/// [`crate::OpenClBackend::adopt_buffer`]); its reference is released once, when the
/// `ClMemory` drops. OpenCL deletes the buffer only after the commands queued with it have
/// finished, on any queue, so dropping it right after a launch or copy is safe.
pub struct ClMemory {
    pub(crate) buffer: std::mem::ManuallyDrop<Buffer<u8>>,
    pub(crate) len: usize,
    /// The context the buffer belongs to (its raw handle, which the buffer keeps alive), so
    /// a backend can refuse memory of another context without asking the driver.
    pub(crate) context: usize,
    /// The fork generation it was made in: a forked child leaves the parent's buffer
    /// unreleased rather than call the driver (`gpubuf_core::process`).
    forks: u64,
}

impl std::fmt::Debug for ClMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClMemory").field("mem", &self.raw()).field("len", &self.len).finish()
    }
}

impl DeviceMemory for ClMemory {
    fn len(&self) -> usize {
        self.len
    }

    fn id(&self) -> usize {
        self.raw() as usize
    }
}

impl ClMemory {
    /// The raw `cl_mem` handle (gpubuf's reference: never release it, nor wrap it in an
    /// opencl3 `Buffer`, which would release it when dropped; [`ClMemory::retained`] gives
    /// an owned wrapper).
    pub fn raw(&self) -> opencl3::types::cl_mem {
        self.buffer.get()
    }

    /// The raw handle of the context the memory belongs to, as a number (to compare with
    /// a backend's `context().get()`).
    pub fn context_handle(&self) -> usize {
        self.context
    }

    /// Creates a read-write buffer of `len` bytes (lazily backed on some implementations).
    pub(crate) fn new(context: &Context, len: usize, max_alloc: u64) -> Result<Self> {
        if len as u64 > max_alloc {
            return Err(Error::OutOfMemory {
                requested: len,
                available: Some(max_alloc as usize),
                pool: None,
            });
        }
        // SAFETY: a valid context, no host pointer, a non-zero size.
        let buffer = unsafe { Buffer::<u8>::create(context, CL_MEM_READ_WRITE, len.max(1), ptr::null_mut()) };
        match buffer {
            Ok(buffer) => Ok(ClMemory::created(buffer, len, context)),
            Err(e) if OOM_CODES.contains(&e.0) || e.0 == INVALID_BUFFER_SIZE => {
                Err(Error::OutOfMemory { requested: len, available: None, pool: None })
            }
            Err(e) => Err(cl(e, "clCreateBuffer")),
        }
    }

    /// Creates a read-only buffer holding a copy of `words` (copied at creation, so no
    /// queue is involved and the host slice may be dropped at once).
    pub(crate) fn from_words(context: &Context, words: &[i64]) -> Result<Self> {
        let len = std::mem::size_of_val(words);
        if len == 0 {
            return ClMemory::new(context, 0, u64::MAX);
        }
        // SAFETY: `words` is valid for `len` bytes; COPY_HOST_PTR copies it before returning.
        let buffer = unsafe {
            Buffer::<u8>::create(
                context,
                CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                len,
                words.as_ptr() as *mut std::ffi::c_void,
            )
        }
        .map_err(|e| cl(e, "clCreateBuffer(COPY_HOST_PTR)"))?;
        Ok(ClMemory::created(buffer, len, context))
    }

    /// Memory over a buffer gpubuf has just created (no other object can hold its handle).
    fn created(buffer: Buffer<u8>, len: usize, context: &Context) -> Self {
        owned::claim(Kind::Mem, buffer.get());
        ClMemory::wrap(buffer, len, context.get() as usize)
    }

    /// Memory over a buffer handed in (its reference becomes this value's), unless a live
    /// `ClMemory` holds the handle already: then the wrapper comes back unreleased.
    pub(crate) fn claimed(buffer: Buffer<u8>, context: usize) -> std::result::Result<Self, Buffer<u8>> {
        if owned::claim(Kind::Mem, buffer.get()) {
            Ok(ClMemory::wrap(buffer, 0, context))
        } else {
            Err(buffer)
        }
    }
}

impl ClMemory {
    fn wrap(buffer: Buffer<u8>, len: usize, context: usize) -> Self {
        let forks = gpubuf_core::process::generation();
        ClMemory { buffer: std::mem::ManuallyDrop::new(buffer), len, context, forks }
    }
}

impl Drop for ClMemory {
    fn drop(&mut self) {
        owned::forget(Kind::Mem, self.raw());
        if gpubuf_core::process::generation() != self.forks {
            // A forked child: the reference is the parent's, and the driver may hang here.
            return;
        }
        // SAFETY: dropped once, here, as the value goes away; nothing reads it after.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.buffer) };
    }
}
