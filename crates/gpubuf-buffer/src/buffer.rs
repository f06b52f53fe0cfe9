//! [`Buffer`]: untyped contiguous bytes on a device.

use gpubuf_core::{Backend, DeviceMemory, Error, MemRef, Result};
use std::any::Any;
use std::ops::Range;
use std::sync::Arc;

/// A contiguous byte range of one device allocation, like zarr's `Buffer`.
///
/// Cloning and [`Buffer::slice`] share the allocation (zero-copy views); the allocation is
/// freed when the last view drops. All operations use the backend's default stream and
/// return when the host side of the work is done; device-side work is stream-ordered.
pub struct Buffer<B: Backend> {
    backend: B,
    memory: Arc<B::Memory>,
    offset: usize,
    len: usize,
    /// Kept alive as long as any view of this buffer (a pool block returns on its drop).
    lease: Option<Arc<dyn Any + Send + Sync>>,
}

impl<B: Backend> Clone for Buffer<B> {
    fn clone(&self) -> Self {
        Buffer {
            backend: self.backend.clone(),
            memory: self.memory.clone(),
            offset: self.offset,
            len: self.len,
            lease: self.lease.clone(),
        }
    }
}

impl<B: Backend> std::fmt::Debug for Buffer<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("backend", &self.backend().kind())
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
}

impl<B: Backend> Buffer<B> {
    /// Allocates `len` bytes with unspecified contents (zarr's `create_zero_length` + resize).
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] or driver errors.
    pub fn empty(backend: &B, len: usize) -> Result<Self> {
        let memory = backend.allocate(len)?;
        Ok(Self::from_memory(backend, memory))
    }

    /// Allocates `len` zeroed bytes.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] or driver errors.
    pub fn zeros(backend: &B, len: usize) -> Result<Self> {
        let b = Self::empty(backend, len)?;
        if len > 0 {
            backend.fill(backend.default_stream(), b.memref(), &[0])?;
        }
        Ok(b)
    }

    /// Copies `bytes` from the host into a new buffer.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] or driver errors.
    pub fn from_bytes(backend: &B, bytes: &[u8]) -> Result<Self> {
        let b = Self::empty(backend, bytes.len())?;
        backend.write(backend.default_stream(), &b.memory, 0, bytes)?;
        Ok(b)
    }

    /// Wraps an existing allocation (the whole of it).
    pub fn from_memory(backend: &B, memory: B::Memory) -> Self {
        let len = memory.len();
        Buffer { backend: backend.clone(), memory: Arc::new(memory), offset: 0, len, lease: None }
    }

    /// Wraps a shared allocation, or a range of it.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the range leaves the allocation.
    pub fn from_shared(backend: &B, memory: Arc<B::Memory>, range: Range<usize>) -> Result<Self> {
        let len = range.end.checked_sub(range.start).ok_or_else(|| Error::invalid("reversed range"))?;
        MemRef::new(&*memory, range.start, len)?;
        Ok(Buffer { backend: backend.clone(), memory, offset: range.start, len, lease: None })
    }

    /// Like [`Buffer::from_shared`], holding `lease` until the last view of the buffer drops
    /// (a memory pool passes its block here, so the block returns when the buffer is gone).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the range leaves the allocation.
    pub fn from_lease(
        backend: &B,
        memory: Arc<B::Memory>,
        range: Range<usize>,
        lease: Arc<dyn Any + Send + Sync>,
    ) -> Result<Self> {
        let mut b = Self::from_shared(backend, memory, range)?;
        b.lease = Some(lease);
        Ok(b)
    }

    /// The backend handle.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Byte offset of this view in its allocation.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The shared allocation.
    pub fn memory(&self) -> &Arc<B::Memory> {
        &self.memory
    }

    /// Whether this buffer and `other` are views of one allocation with at least one byte
    /// in common, also when they are typed by different handles of one device (see
    /// [`Buffer::to_backend`]).
    pub fn shares_memory<B2: Backend>(&self, other: &Buffer<B2>) -> bool {
        self.len > 0
            && other.len > 0
            && self.backend.kind() == other.backend.kind()
            && self.memory.id() == other.memory.id()
            && self.offset < other.offset.saturating_add(other.len)
            && other.offset < self.offset.saturating_add(self.len)
    }

    /// The view as a [`MemRef`] for backend calls.
    pub fn memref(&self) -> MemRef<'_, B::Memory> {
        MemRef { memory: &*self.memory, offset: self.offset, len: self.len }
    }

    /// A zero-copy view of `range` (bytes, relative to this view).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the range leaves the view or is reversed.
    pub fn slice(&self, range: Range<usize>) -> Result<Self> {
        if range.start > range.end || range.end > self.len {
            return Err(Error::OutOfBounds {
                what: "buffer slice (bytes)".into(),
                start: range.start,
                end: range.end,
                len: self.len,
            });
        }
        Ok(Buffer {
            backend: self.backend.clone(),
            memory: self.memory.clone(),
            offset: self.offset + range.start,
            len: range.end - range.start,
            lease: self.lease.clone(),
        })
    }

    /// Whether two views share at least one byte.
    pub fn overlaps(&self, other: &Buffer<B>) -> bool {
        self.memref().overlaps(&other.memref())
    }

    /// Copies the bytes to the host (zarr's `as_numpy_array` for bytes).
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the host cannot hold them; driver errors.
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        let mut out = crate::host::reserve(self.len)?;
        out.resize(self.len, 0u8);
        self.read_into(0, &mut out)?;
        Ok(out)
    }

    /// Copies `dst.len()` bytes from byte `offset` of the view into `dst`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the range leaves the view; driver errors.
    pub fn read_into(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_range(offset, dst.len())?;
        self.backend.read(self.backend.default_stream(), &self.memory, self.offset + offset, dst)
    }

    /// Copies `src` from the host into the view at byte `offset`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the range leaves the view; driver errors.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check_range(offset, src.len())?;
        self.backend.write(self.backend.default_stream(), &self.memory, self.offset + offset, src)
    }

    /// Device-to-device copy of all of `src` into this view at byte `offset`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`]; [`Error::DeviceMismatch`] when `src` lives on another device;
    /// [`Error::InvalidArgument`] when the ranges overlap.
    pub fn copy_from(&self, offset: usize, src: &Buffer<B>) -> Result<()> {
        self.check_range(offset, src.len)?;
        if !self.backend.same_device(&src.backend) {
            return Err(Error::DeviceMismatch("copy between buffers of different devices".into()));
        }
        self.backend.copy(self.backend.default_stream(), src.memref(), &self.memory, self.offset + offset)
    }

    /// Fills the view with repetitions of `pattern`.
    ///
    /// # Errors
    /// See [`Backend::fill`].
    pub fn fill(&self, pattern: &[u8]) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        self.backend.fill(self.backend.default_stream(), self.memref(), pattern)
    }

    /// Concatenates buffers into one new buffer (zarr's `Buffer.combine`), device to device.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] when a part lives on another device; allocation errors.
    pub fn combine(backend: &B, parts: &[&Buffer<B>]) -> Result<Self> {
        let total = parts.iter().try_fold(0usize, |a, p| a.checked_add(p.len));
        let total = total.ok_or_else(|| Error::invalid("combined length overflows"))?;
        let out = Self::empty(backend, total)?;
        let mut at = 0;
        for p in parts {
            out.copy_from(at, p)?;
            at += p.len;
        }
        Ok(out)
    }

    /// This buffer on `target`: the same storage (zero-copy) when `target` is this buffer's
    /// own device, otherwise a copy through host memory.
    ///
    /// "The same device" includes another handle type for it: a `Buffer<gpubuf::Device>`
    /// given the concrete backend its device holds (`device.as_cpu()`, `as_opencl()`,
    /// `as_cuda()`), and the converse, share the allocation ([`Backend::memory_to`],
    /// [`Backend::memory_from`]); writes through one are seen through the other. Ask
    /// [`Buffer::shares_memory`] to tell.
    ///
    /// # Errors
    /// Allocation and driver errors of the copy.
    pub fn to_backend<B2: Backend>(&self, target: &B2) -> Result<Buffer<B2>> {
        if let Some(same) = (target as &dyn Any).downcast_ref::<B>() {
            if same.same_device(&self.backend) {
                let shared: Box<dyn Any> = Box::new(self.clone());
                if let Ok(b) = shared.downcast::<Buffer<B2>>() {
                    return Ok(*b);
                }
            }
        }
        let shared = self
            .backend
            .memory_to(&self.memory, target)
            .or_else(|| target.memory_from(&self.backend, &self.memory));
        if let Some(memory) = shared {
            return Ok(Buffer {
                backend: target.clone(),
                memory,
                offset: self.offset,
                len: self.len,
                lease: self.lease.clone(),
            });
        }
        let bytes = self.to_vec()?;
        Buffer::from_bytes(target, &bytes)
    }

    /// Blocks until all work queued on the default stream is done.
    ///
    /// # Errors
    /// Driver errors.
    pub fn synchronize(&self) -> Result<()> {
        self.backend.synchronize(self.backend.default_stream())
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::OutOfBounds {
                what: "buffer range (bytes)".into(),
                start: offset,
                end: offset.saturating_add(len),
                len: self.len,
            }),
        }
    }
}
