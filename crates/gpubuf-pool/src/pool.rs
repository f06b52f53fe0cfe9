//! [`MemoryPool`]: allocation, the out-of-memory ladder and the limit.

use crate::arena::{Taken, EXACT};
use crate::bins::{bin_of, block_size, GRANULE};
use crate::block::{PooledBuffer, Streams};
use crate::config::resolve_limit;
pub use crate::config::{Limit, PoolConfig};
use crate::state::State;
use crate::stream::{PoolStream, StreamHandle, StreamKey};
use gpubuf_core::{Allocator, Backend, DeviceMemory, Error, Result};
use parking_lot::Mutex;
use std::sync::Arc;

pub(crate) struct Shared<A: Allocator> {
    pub(crate) allocator: A,
    pub(crate) config: PoolConfig,
    pub(crate) state: Mutex<State<A::Memory>>,
}

/// A memory pool over any [`Allocator`], after pyopencl's `MemoryPool`: freed blocks are
/// kept and handed out again instead of paying the allocator each time.
///
/// Requests are padded to their size class (see [`crate::bin_number`]) and carved from
/// segments the pool allocates: small blocks share 2 MiB segments, large ones get their own;
/// freed blocks wait in a per-class quick list, then merge with free neighbours. Wholly
/// free segments go back to the allocator under memory pressure, past the limit, when
/// held memory outgrows its allowance, or on [`MemoryPool::free_held`].
///
/// The pool is `Send + Sync`; its lock is never held across an allocator call.
pub struct MemoryPool<A: Allocator> {
    pub(crate) shared: Arc<Shared<A>>,
}

impl<A: Allocator> Clone for MemoryPool<A> {
    fn clone(&self) -> Self {
        MemoryPool { shared: self.shared.clone() }
    }
}

impl<A: Allocator> std::fmt::Debug for MemoryPool<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryPool").field("stats", &self.stats()).finish()
    }
}

/// Growth reserved below the limit while the allocator runs; given back on drop unless
/// [`Reservation::commit`] turned it into a segment (so an allocator error, or a panic in
/// the allocator, does not leave it counted).
struct Reservation<'a, A: Allocator> {
    shared: &'a Shared<A>,
    bytes: usize,
}

impl<A: Allocator> Reservation<'_, A> {
    fn commit(self, st: &mut State<A::Memory>) {
        st.unreserve(self.bytes);
        std::mem::forget(self);
    }
}

impl<A: Allocator> Drop for Reservation<'_, A> {
    fn drop(&mut self) {
        self.shared.state.lock().unreserve(self.bytes);
    }
}

impl<A: Allocator> MemoryPool<A> {
    /// A pool with the default [`PoolConfig`].
    pub fn new(allocator: A) -> Self {
        // The default config is valid and has no limit.
        Self::build(allocator, PoolConfig::default(), None)
    }

    /// A pool with `config`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a fractional limit when the allocator cannot report
    /// its total memory, a fraction outside (0, 1] (or NaN), `leading_bits_in_bin_id` above
    /// [`crate::MAX_LEADING_BITS`], a zero `large_round` or `small_segment`, or a negative
    /// or NaN `held_ratio`. Every other value works (sizes and ratios saturate).
    pub fn with_config(allocator: A, config: PoolConfig) -> Result<Self> {
        config.check()?;
        let limit = resolve_limit(&allocator, config.limit)?;
        Ok(Self::build(allocator, config, limit))
    }

    fn build(allocator: A, config: PoolConfig, limit: Option<usize>) -> Self {
        let state = Mutex::new(State::new(limit));
        MemoryPool { shared: Arc::new(Shared { allocator, config, state }) }
    }

    /// The allocator the pool draws from.
    pub fn allocator(&self) -> &A {
        &self.shared.allocator
    }

    /// Sets (or removes) the memory limit; held blocks are freed at once if it is exceeded.
    /// Segments being allocated by other threads when the limit is lowered still arrive.
    ///
    /// # Errors
    /// As [`MemoryPool::with_config`] for a fractional limit; the limit is then unchanged.
    pub fn set_limit(&self, limit: Option<Limit>) -> Result<()> {
        let bytes = resolve_limit(&self.shared.allocator, limit)?;
        let freed = {
            let mut st = self.shared.state.lock();
            st.limit = bytes;
            let reserved = st.reserved;
            let over = move |managed: usize| bytes.is_some_and(|l| managed.saturating_add(reserved) > l);
            if over(st.arena.managed) {
                st.arena.flush_quick();
                st.arena.release_free_segments(|a| over(a.managed))
            } else {
                Vec::new()
            }
        };
        drop(freed);
        Ok(())
    }

    /// A block of at least `bytes` bytes for use from the host or a synchronous queue: it
    /// comes back to the pool on drop and is reused by any later request.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] (with the pool's stats) when the allocator fails even after
    /// the pool freed what it held, the limit is reached, or no block of that size can
    /// exist; [`Error::InvalidArgument`] when the allocator returns less memory than asked
    /// for; other allocator errors. The pool is unchanged by a failed request except for
    /// held segments it freed.
    pub fn allocate(&self, bytes: usize) -> Result<PooledBuffer<A>> {
        match self.allocate_held(bytes) {
            Some(block) => Ok(block),
            None => self.allocate_with(bytes, None),
        }
    }

    /// [`MemoryPool::allocate`]'s hit path alone: the newest block the pool holds for
    /// `bytes` (freed from the host, waiting on no event), or `None`, without calling the
    /// allocator or searching further. A caller that must prepare for a device allocation
    /// (release a lock, say) tries this first; `None` counts as nothing in the stats.
    #[inline]
    pub fn allocate_held(&self, bytes: usize) -> Option<PooledBuffer<A>> {
        // The config was validated: at most MAX_LEADING_BITS.
        let bin = bin_of(bytes.max(1), self.shared.config.leading_bits_in_bin_id);
        let (t, mem) = {
            let mut st = self.shared.state.lock();
            let t = st.arena.take_quick(bin)?;
            st.note_taken(true);
            (t, st.arena.mem_ptr(t.seg))
        };
        Some(PooledBuffer::new(self.shared.clone(), mem, t, bytes, bin, true, None))
    }

    /// A block for work queued on `stream`. When it is freed, an event is recorded on
    /// `stream` (and on every stream named with [`PooledBuffer::record_stream`]); the block
    /// is handed out again at once on `stream`, and on other streams only after those
    /// events complete.
    ///
    /// # Errors
    /// As [`MemoryPool::allocate`].
    pub fn allocate_on<B: Backend>(
        &self,
        bytes: usize,
        backend: &B,
        stream: &B::Stream,
    ) -> Result<PooledBuffer<A>> {
        let owner: Arc<dyn PoolStream> =
            Arc::new(StreamHandle { backend: backend.clone(), stream: stream.clone() });
        self.allocate_with(bytes, Some(Box::new(Streams { owner: Some(owner), used_on: Vec::new() })))
    }

    fn out_of_memory(&self, requested: usize, available: Option<usize>) -> Error {
        Error::OutOfMemory { requested, available, pool: Some(Box::new(self.stats())) }
    }

    #[inline(never)]
    fn allocate_with(&self, bytes: usize, owner: Option<Box<Streams>>) -> Result<PooledBuffer<A>> {
        let cfg = &self.shared.config;
        let bits = cfg.leading_bits_in_bin_id;
        let bin = bin_of(bytes.max(1), bits);
        // A request whose block or segment size does not fit in a usize can never be met.
        let sizes = block_size(bytes, bits).and_then(|size| {
            let seg = if cfg.whole_blocks {
                size
            } else if size > cfg.small_max {
                size.checked_next_multiple_of(cfg.large_round)?
            } else {
                cfg.small_segment.max(size)
            };
            Some((size, seg))
        });
        let Some((size, seg_size)) = sizes else {
            return Err(self.out_of_memory(bytes, None));
        };
        let large = cfg.whole_blocks || size > cfg.small_max;
        let min_split = if cfg.whole_blocks {
            EXACT
        } else if large {
            cfg.small_max.max(GRANULE)
        } else {
            GRANULE
        };
        let tag = owner.as_ref().and_then(|s| s.owner.as_ref()).map(|o| o.key());
        let (reserved, freed) = {
            let mut st = self.shared.state.lock();
            if let Some(t) = take(&mut st, size, bin, large, tag, min_split, true) {
                return Ok(self.hand_out(&st, t, bytes, bin, size, owner));
            }
            st.misses = st.misses.saturating_add(1);
            st.reserve(seg_size)
        };
        // Memory is dropped with the lock released.
        drop(freed);
        if let Err(available) = reserved {
            return Err(self.out_of_memory(bytes, available));
        }
        let reservation = Reservation { shared: &self.shared, bytes: seg_size };
        let mem = self.allocate_segment(seg_size, bytes)?;
        if mem.len() < seg_size {
            // Blocks carved past its end would fail every bounds check later: refuse now.
            return Err(Error::invalid(format!(
                "the pool's allocator returned {} bytes for a request of {seg_size}",
                mem.len()
            )));
        }
        let mem = Arc::new(mem);
        let mut st = self.shared.state.lock();
        reservation.commit(&mut st);
        st.arena.add_segment(mem, seg_size, large);
        st.peak_managed = st.peak_managed.max(st.arena.managed);
        // The fresh segment is idle and at least `size` bytes, so best fit finds a block.
        match take(&mut st, size, bin, large, tag, min_split, false) {
            Some(t) => Ok(self.hand_out(&st, t, bytes, bin, size, owner)),
            None => {
                drop(st);
                Err(self.out_of_memory(bytes, None))
            }
        }
    }

    fn hand_out(
        &self,
        st: &State<A::Memory>,
        t: Taken,
        bytes: usize,
        bin: usize,
        size: usize,
        owner: Option<Box<Streams>>,
    ) -> PooledBuffer<A> {
        let mem = st.arena.mem_ptr(t.seg);
        PooledBuffer::new(self.shared.clone(), mem, t, bytes, bin, t.size == size, owner)
    }

    /// Calls the allocator (without the lock); on failure frees held segments, largest
    /// first, retrying after each, before giving up with the pool's stats.
    fn allocate_segment(&self, seg_size: usize, requested: usize) -> Result<A::Memory> {
        let a = &self.shared.allocator;
        loop {
            let r = if self.shared.config.immediate {
                a.allocate_immediate(seg_size)
            } else {
                a.allocate(seg_size)
            };
            match r {
                Ok(m) => return Ok(m),
                Err(e) if e.is_retryable() => {
                    let freed = {
                        let mut st = self.shared.state.lock();
                        st.arena.flush_quick();
                        let mut first = true;
                        st.arena.release_free_segments(|_| std::mem::take(&mut first))
                    };
                    if freed.is_empty() {
                        let available = match e {
                            Error::OutOfMemory { available, .. } => available,
                            _ => None,
                        };
                        return Err(self.out_of_memory(requested, available));
                    }
                    tracing::debug!(
                        freed = freed.len(),
                        "pool freed a held segment after an allocation failure"
                    );
                    drop(freed);
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// A block for `tag` from what the pool holds: the quick list or best fit, and when that
/// fails and blocks wait in quick lists or on events, again after merging those that may
/// merge.
#[allow(clippy::too_many_arguments)]
fn take<M>(
    st: &mut State<M>,
    size: usize,
    bin: usize,
    large: bool,
    tag: Option<StreamKey>,
    min_split: usize,
    count_hit: bool,
) -> Option<Taken> {
    let mut t = st.arena.take(size, bin, large, tag, min_split);
    if t.is_none() && (st.arena.quick_blocks > 0 || st.arena.free.pending_len() > 0) {
        st.arena.flush_quick();
        t = st.arena.take(size, bin, large, tag, min_split);
    }
    if t.is_some() {
        st.note_taken(count_hit);
    }
    t
}
