//! [`PooledBuffer`]: a block on loan from a [`crate::MemoryPool`].

use crate::arena::Taken;
use crate::bins::bin_of;
use crate::pool::Shared;
use crate::stream::{key_of, Events, Never, PoolStream, StreamHandle};
use gpubuf_buffer::Buffer;
use gpubuf_core::{Allocator, Backend, MemRef, Result};
use std::ptr::NonNull;
use std::sync::Arc;

/// A block of pool memory: a byte range of a shared allocation. It goes back to the pool
/// when dropped (or with [`PooledBuffer::release`]).
pub struct PooledBuffer<A: Allocator> {
    pool: Arc<Shared<A>>,
    /// The segment's allocation. The segment keeps its `Arc` alive while any of its blocks
    /// is active (only wholly free segments are released), so this pointer stays valid for
    /// the life of the block; holding it raw spares two atomic operations per allocation.
    mem: NonNull<A::Memory>,
    taken: Taken,
    len: usize,
    bin: usize,
    /// Whether the block is exactly its size class (then it may wait in a quick list).
    exact: bool,
    /// The streams the block is used on; boxed so the host-only block stays small (it is
    /// moved on every allocation).
    streams: Option<Box<Streams>>,
}

/// The streams a block is used on.
pub(crate) struct Streams {
    /// The stream it was allocated on.
    pub(crate) owner: Option<Arc<dyn PoolStream>>,
    /// Further streams named with [`PooledBuffer::record_stream`].
    pub(crate) used_on: Vec<Arc<dyn PoolStream>>,
}

// SAFETY: the raw pointer is to an `A::Memory` (Send + Sync) kept alive by the pool; all
// other fields are Send + Sync.
unsafe impl<A: Allocator> Send for PooledBuffer<A> {}
// SAFETY: as above; `&PooledBuffer` only lends `&A::Memory`.
unsafe impl<A: Allocator> Sync for PooledBuffer<A> {}

impl<A: Allocator> std::fmt::Debug for PooledBuffer<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledBuffer")
            .field("offset", &self.taken.offset)
            .field("len", &self.len)
            .field("block", &self.taken.size)
            .finish()
    }
}

impl<A: Allocator> PooledBuffer<A> {
    pub(crate) fn new(
        pool: Arc<Shared<A>>,
        mem: NonNull<A::Memory>,
        taken: Taken,
        len: usize,
        bin: usize,
        exact: bool,
        streams: Option<Box<Streams>>,
    ) -> Self {
        PooledBuffer { pool, mem, taken, len, bin, exact, streams }
    }

    /// Makes the block serve a new request of `bytes` bytes in place, as if it had been
    /// freed and handed out again by the pool's hit path: for a caller that keeps freed
    /// blocks of its own (a cache in front of the pool, used by one owner). Returns whether
    /// it did: only when `bytes` is of the block's size class and the block is one the
    /// pool's quick lists would take back as it is (exactly its class, used on no stream);
    /// otherwise the block is unchanged. Count such reuses with
    /// [`crate::MemoryPool::count_hits`] to keep the pool's stats whole.
    #[inline]
    pub fn reuse(&mut self, bytes: usize) -> bool {
        let bits = self.pool.config.leading_bits_in_bin_id;
        // The pool's config was validated: at most MAX_LEADING_BITS.
        if !self.exact || self.streams.is_some() || bin_of(bytes.max(1), bits) != self.bin {
            return false;
        }
        self.len = bytes;
        true
    }

    /// The allocation the block lies in.
    pub fn memory(&self) -> &A::Memory {
        // SAFETY: see the field: the allocation outlives every active block carved from it.
        unsafe { self.mem.as_ref() }
    }

    /// Byte offset of the block in [`PooledBuffer::memory`].
    pub fn offset(&self) -> usize {
        self.taken.offset
    }

    /// The size asked for.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether zero bytes were asked for.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The block's real size (the request padded to its size class, or more).
    pub fn block_size(&self) -> usize {
        self.taken.size
    }

    /// The requested bytes as a [`MemRef`] for backend calls.
    pub fn memref(&self) -> MemRef<'_, A::Memory> {
        MemRef { memory: self.memory(), offset: self.taken.offset, len: self.len }
    }

    /// Notes that work on `stream` uses the block (beyond the stream it was allocated on):
    /// when the block is freed an event is recorded there too, and the block goes to other
    /// streams only after it completes (PyTorch's `record_stream`).
    pub fn record_stream<B: Backend>(&mut self, backend: &B, stream: &B::Stream) {
        let key = key_of(backend, stream);
        let streams =
            self.streams.get_or_insert_with(|| Box::new(Streams { owner: None, used_on: Vec::new() }));
        if streams.owner.as_ref().is_some_and(|o| o.key() == key)
            || streams.used_on.iter().any(|s| s.key() == key)
        {
            return;
        }
        streams.used_on.push(Arc::new(StreamHandle { backend: backend.clone(), stream: stream.clone() }));
    }

    /// Returns the block to the pool now (the same as dropping it).
    pub fn release(self) {}

    /// The block as a [`Buffer`] of the requested length; the block returns to the pool
    /// when the last view of that buffer drops.
    ///
    /// # Errors
    /// [`gpubuf_core::Error::OutOfBounds`] only if the pool's bookkeeping were inconsistent.
    pub fn into_buffer<B: Backend<Memory = A::Memory>>(self, backend: &B) -> Result<Buffer<B>>
    where
        A: 'static,
    {
        let len = self.len;
        self.into_buffer_of(backend, len)
    }

    /// The whole block as a [`Buffer`] ([`PooledBuffer::block_size`] bytes: the request
    /// and its padding to the size class, all of it the block's own memory); the block
    /// returns to the pool when the last view of that buffer drops.
    ///
    /// # Errors
    /// As [`PooledBuffer::into_buffer`].
    pub fn into_block_buffer<B: Backend<Memory = A::Memory>>(self, backend: &B) -> Result<Buffer<B>>
    where
        A: 'static,
    {
        let len = self.taken.size;
        self.into_buffer_of(backend, len)
    }

    /// The block's first `len` bytes (at most its size) as a [`Buffer`].
    fn into_buffer_of<B: Backend<Memory = A::Memory>>(self, backend: &B, len: usize) -> Result<Buffer<B>>
    where
        A: 'static,
    {
        // SAFETY: `mem` came from `Arc::as_ptr` of the segment's `Arc`, which is alive while
        // this block is active (see the field); adding a strong count first makes the new
        // `Arc` an owner of its own.
        let mem = unsafe {
            Arc::increment_strong_count(self.mem.as_ptr());
            Arc::from_raw(self.mem.as_ptr())
        };
        let range = self.taken.offset..self.taken.offset + len.min(self.taken.size);
        Buffer::from_lease(backend, mem, range, Arc::new(self))
    }

    fn events(streams: &Streams) -> Events {
        let mut out = Events::new();
        for s in streams.owner.iter().chain(streams.used_on.iter()) {
            match s.record() {
                Ok(Some(e)) => out.push((s.key(), e)),
                Ok(None) => {}
                Err(e) => {
                    // Without an event nothing tells when the stream's work on the block
                    // is done: only that stream may take the block again.
                    tracing::warn!("recording a pool event failed ({e}); the block stays with its stream");
                    out.push((s.key(), Arc::new(Never)));
                }
            }
        }
        out
    }
}

impl<A: Allocator> Drop for PooledBuffer<A> {
    fn drop(&mut self) {
        if self.streams.is_none() && self.exact {
            // The hit path: onto the quick list when no held-memory check is due (the
            // general path below would then do just this).
            let cfg = &self.pool.config;
            let mut st = self.pool.state.lock();
            let a = &st.arena;
            let active = a.active_bytes;
            // No overflow with any config: `window_frees < window` between frees (see
            // `State::note_active`); `managed - active + size` is the held bytes after this
            // free, at most `managed` (the block is active, so `size <= active <= managed`).
            if st.holding
                && st.window_frees + 1 < cfg.window
                && (a.managed <= st.held_floor || a.managed - active + self.taken.size <= cfg.min_held_bytes)
                && st.arena.put_quick(self.taken, self.bin, cfg.quick_per_bin)
            {
                st.note_active_before(active);
                st.note_active();
                return;
            }
        }
        self.drop_slow();
    }
}

impl<A: Allocator> PooledBuffer<A> {
    /// Returns the block through the general path: events, coalescing, the held-memory
    /// policy.
    #[inline(never)]
    fn drop_slow(&mut self) {
        let events = self.streams.as_deref().map_or_else(Vec::new, Self::events);
        let cfg = &self.pool.config;
        let freed = {
            let mut st = self.pool.state.lock();
            let holding = st.holding;
            let active = st.arena.active_bytes;
            st.note_active_before(active);
            let quick = holding && self.exact && st.arena.quick_len(self.bin) < cfg.quick_per_bin;
            let whole = st.arena.release(self.taken, self.bin, events, quick);
            st.note_active();
            let allowed = st.allowed_managed(cfg);
            if !holding && whole {
                st.arena.release_free_segments(|_| true)
            } else if st.arena.managed > allowed && st.arena.held_bytes() > 0 {
                st.arena.flush_quick();
                st.arena.release_free_segments(|a| a.managed > allowed)
            } else {
                Vec::new()
            }
        };
        drop(freed);
    }
}
