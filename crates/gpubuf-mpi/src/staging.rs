//! Host staging buffers that MPI reads or writes while a request is in flight.

use gpubuf_core::{Error, Result};
use std::ptr::NonNull;

/// A zeroed host buffer held as a raw allocation rather than a `Box`: moving a `Box`
/// asserts unique access to its memory, which an MPI request in flight contradicts, while a
/// raw pointer makes no such claim. Freed on drop, which must not happen while a request
/// still uses it (the updater completes its requests first).
pub(crate) struct Staging {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: `Staging` owns its allocation exclusively, like a `Box<[u8]>`; it holds no
// thread-bound state, and shared access only reads through `unsafe` methods whose callers
// rule out concurrent writers.
unsafe impl Send for Staging {}
// SAFETY: as above: `&Staging` gives no safe access to the bytes.
unsafe impl Sync for Staging {}

impl Staging {
    /// `bytes` zeroed bytes.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the host cannot provide them (instead of an aborted
    /// allocation).
    pub(crate) fn new(bytes: usize) -> Result<Self> {
        let mut v: Vec<u8> = Vec::new();
        v.try_reserve_exact(bytes).map_err(|_| Error::OutOfMemory {
            requested: bytes,
            available: None,
            pool: None,
        })?;
        v.resize(bytes, 0);
        let raw: *mut [u8] = Box::into_raw(v.into_boxed_slice());
        // A Box's pointer is never null (dangling but non-null when empty).
        let ptr = NonNull::new(raw.cast::<u8>()).ok_or_else(|| Error::invalid("null staging allocation"))?;
        Ok(Staging { ptr, len: bytes })
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Raw pointer to the first byte.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The bytes.
    ///
    /// # Safety
    /// No MPI request that writes this buffer may be in flight for the life of the borrow.
    pub(crate) unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` is a live allocation of `len` initialised bytes; the caller rules
        // out concurrent writers.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, for writing.
    ///
    /// # Safety
    /// No MPI request that reads or writes this buffer may be in flight for the life of the
    /// borrow.
    pub(crate) unsafe fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `bytes`, and `&mut self` excludes other borrows made through
        // `Staging`; the caller rules out MPI's access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let raw = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
        // SAFETY: `raw` is exactly the pointer and length `Box::into_raw` returned in `new`,
        // freed once, here; the updater completes every request on it before it drops.
        drop(unsafe { Box::from_raw(raw) });
    }
}
