//! [`ClMemory`]: one OpenCL buffer object.

use crate::error::{cl, INVALID_BUFFER_SIZE, OOM_CODES};
use gpubuf_core::{DeviceMemory, Error, Result};
use opencl3::context::Context;
use opencl3::memory::{Buffer, ClMem, CL_MEM_COPY_HOST_PTR, CL_MEM_READ_ONLY, CL_MEM_READ_WRITE};
use std::ptr;

/// One OpenCL buffer. OpenCL has no zero-sized buffers, so a zero-length allocation holds
/// one byte and reports length 0.
pub struct ClMemory {
    pub(crate) buffer: Buffer<u8>,
    pub(crate) len: usize,
    /// The context the buffer belongs to (its raw handle, which the buffer keeps alive), so
    /// a backend can refuse memory of another context without asking the driver.
    pub(crate) context: usize,
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
    /// The raw `cl_mem` handle.
    pub fn raw(&self) -> opencl3::types::cl_mem {
        self.buffer.get()
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
            Ok(buffer) => Ok(ClMemory { buffer, len, context: context.get() as usize }),
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
        Ok(ClMemory { buffer, len, context: context.get() as usize })
    }
}
