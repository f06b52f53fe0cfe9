//! [`MemoryPool`]: allocation, the out-of-memory ladder, the limit and the held-memory policy.

use crate::arena::{Arena, Taken};
use crate::bins::{alloc_size, bin_number, block_size, GRANULE};
use crate::block::{PooledBuffer, Streams};
pub use crate::config::{Limit, PoolConfig};
use crate::stream::{PoolStream, StreamHandle};
use gpubuf_core::{Allocator, Backend, Error, PoolStats, Result};
use parking_lot::Mutex;
use std::sync::Arc;

pub(crate) struct State<M> {
    pub(crate) arena: Arena<M>,
    pub(crate) holding: bool,
    pub(crate) limit: Option<usize>,
    pub(crate) hits: u64,
    pub(crate) misses: u64,
    pub(crate) peak_managed: usize,
    pub(crate) peak_active: usize,
    /// Sliding peak of active bytes: this window's and the previous window's.
    pub(crate) window_peak: [usize; 2],
    pub(crate) window_frees: u32,
    /// A lower bound of [`State::allowed_managed`] until the window ends: the part that
    /// comes from the window's peak, as last worked out (the peak only grows within a
    /// window). Lets a free skip the full check.
    pub(crate) held_floor: usize,
}

impl<M> State<M> {
    /// Records the active bytes before a free for the sliding peak.
    pub(crate) fn note_active_before(&mut self, active: usize) {
        self.window_peak[0] = self.window_peak[0].max(active);
    }

    /// Counts a block handed out (a hit unless it came from a fresh segment).
    #[inline]
    pub(crate) fn note_taken(&mut self, hit: bool) {
        self.hits += u64::from(hit);
        self.peak_active = self.peak_active.max(self.arena.active_bytes);
    }

    /// Advances the window after a free.
    pub(crate) fn note_active(&mut self) {
        self.window_frees += 1;
    }

    /// The most bytes the pool should manage now (see [`PoolConfig::held_ratio`]).
    pub(crate) fn allowed_managed(&mut self, cfg: &PoolConfig) -> usize {
        // Fast path: within the fixed allowance, nothing to work out.
        if self.arena.managed <= self.arena.active_bytes + cfg.min_held_bytes
            && self.window_frees < cfg.window
        {
            return usize::MAX;
        }
        if self.window_frees >= cfg.window {
            self.window_frees = 0;
            self.window_peak = [self.arena.active_bytes, self.window_peak[0]];
        }
        let window = self.window_peak[0].max(self.window_peak[1]);
        self.held_floor = window.saturating_add((window as f64 * cfg.held_ratio) as usize);
        let peak = window.max(self.arena.active_bytes);
        let slack = (peak as f64 * cfg.held_ratio) as usize;
        peak.saturating_add(slack).max(self.arena.active_bytes + cfg.min_held_bytes)
    }
}

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

/// One row of [`MemoryPool::bin_report`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BinReport {
    /// The size class.
    pub bin: usize,
    /// Largest request size in the class.
    pub max_size: usize,
    /// Blocks of the class handed out.
    pub active: usize,
    /// Held (free) blocks whose size falls in the class.
    pub held: usize,
}

impl<A: Allocator> MemoryPool<A> {
    /// A pool with the default [`PoolConfig`].
    pub fn new(allocator: A) -> Self {
        // The default config has no limit, so it cannot fail.
        Self::build(allocator, PoolConfig::default(), None)
    }

    /// A pool with `config`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a fractional limit when the allocator cannot report
    /// its total memory, a fraction outside (0, 1], `leading_bits_in_bin_id` above 16, a
    /// zero `large_round` or `small_segment`, or a negative or NaN `held_ratio`.
    pub fn with_config(allocator: A, config: PoolConfig) -> Result<Self> {
        if config.leading_bits_in_bin_id > 16 {
            return Err(Error::invalid("leading_bits_in_bin_id must be at most 16"));
        }
        if config.large_round == 0 || config.small_segment == 0 {
            return Err(Error::invalid("large_round and small_segment must be at least one byte"));
        }
        if config.held_ratio.is_nan() || config.held_ratio < 0.0 {
            return Err(Error::invalid(format!(
                "held_ratio {} is not a non-negative number",
                config.held_ratio
            )));
        }
        let limit = resolve_limit(&allocator, config.limit)?;
        Ok(Self::build(allocator, config, limit))
    }

    fn build(allocator: A, config: PoolConfig, limit: Option<usize>) -> Self {
        let bins = (usize::BITS as usize + 1) << config.leading_bits_in_bin_id;
        let state = State {
            arena: Arena::new(bins),
            holding: true,
            limit,
            hits: 0,
            misses: 0,
            peak_managed: 0,
            peak_active: 0,
            window_peak: [0, 0],
            window_frees: 0,
            held_floor: 0,
        };
        MemoryPool { shared: Arc::new(Shared { allocator, config, state: Mutex::new(state) }) }
    }

    /// The allocator the pool draws from.
    pub fn allocator(&self) -> &A {
        &self.shared.allocator
    }

    /// Sets (or removes) the memory limit; held blocks are freed at once if it is exceeded.
    ///
    /// # Errors
    /// As [`MemoryPool::with_config`] for a fractional limit.
    pub fn set_limit(&self, limit: Option<Limit>) -> Result<()> {
        let bytes = resolve_limit(&self.shared.allocator, limit)?;
        let freed = {
            let mut st = self.shared.state.lock();
            st.limit = bytes;
            match bytes {
                Some(l) if st.arena.managed > l => {
                    st.arena.flush_quick();
                    st.arena.release_free_segments(|a| a.managed > l)
                }
                _ => Vec::new(),
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
    /// the pool freed what it held, or the limit is reached; other allocator errors.
    pub fn allocate(&self, bytes: usize) -> Result<PooledBuffer<A>> {
        // The hit path: the newest block of the request's quick list.
        let bin = bin_number(bytes.max(1), self.shared.config.leading_bits_in_bin_id);
        let hit = {
            let mut st = self.shared.state.lock();
            st.arena.take_quick(bin).map(|t| {
                st.note_taken(true);
                (t, st.arena.mem_ptr(t.seg))
            })
        };
        match hit {
            Some((t, mem)) => Ok(PooledBuffer::new(self.shared.clone(), mem, t, bytes, bin, true, None)),
            None => self.allocate_with(bytes, None),
        }
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

    #[inline(never)]
    fn allocate_with(&self, bytes: usize, owner: Option<Box<Streams>>) -> Result<PooledBuffer<A>> {
        let cfg = &self.shared.config;
        let bits = cfg.leading_bits_in_bin_id;
        let bin = bin_number(bytes.max(1), bits);
        // A request whose block or segment size does not fit in a usize can never be met.
        let sizes = block_size(bytes, bits).and_then(|size| {
            let seg = if size > cfg.small_max {
                size.checked_next_multiple_of(cfg.large_round)?
            } else {
                cfg.small_segment.max(size)
            };
            Some((size, seg))
        });
        let Some((size, seg_size)) = sizes else {
            return Err(Error::OutOfMemory {
                requested: bytes,
                available: None,
                pool: Some(Box::new(self.stats())),
            });
        };
        let large = size > cfg.small_max;
        let min_split = if large { cfg.small_max.max(GRANULE) } else { GRANULE };
        let tag = owner.as_ref().and_then(|s| s.owner.as_ref()).map(|o| o.id());
        for _ in 0..8 {
            let freed;
            {
                let mut st = self.shared.state.lock();
                if let Some(t) = self.take(&mut st, size, bin, large, tag, min_split, true) {
                    return Ok(self.hand_out(&st, t, bytes, bin, t.size == size, owner));
                }
                st.misses += 1;
                freed = match st.limit {
                    Some(limit) if st.arena.managed.saturating_add(seg_size) > limit => {
                        st.arena.flush_quick();
                        let f =
                            st.arena.release_free_segments(|a| a.managed.saturating_add(seg_size) > limit);
                        if st.arena.managed.saturating_add(seg_size) > limit {
                            let available = limit.saturating_sub(st.arena.active_bytes);
                            let stats = Box::new(stats_of(&st));
                            drop(st);
                            drop(f);
                            return Err(Error::OutOfMemory {
                                requested: bytes,
                                available: Some(available),
                                pool: Some(stats),
                            });
                        }
                        f
                    }
                    _ => Vec::new(),
                };
            }
            drop(freed);
            let mem = self.allocate_segment(seg_size, bytes)?;
            let mut st = self.shared.state.lock();
            st.arena.add_segment(Arc::new(mem), seg_size, large);
            st.peak_managed = st.peak_managed.max(st.arena.managed);
            if let Some(t) = self.take(&mut st, size, bin, large, tag, min_split, false) {
                return Ok(self.hand_out(&st, t, bytes, bin, t.size == size, owner));
            }
        }
        Err(Error::OutOfMemory { requested: bytes, available: None, pool: Some(Box::new(self.stats())) })
    }

    #[allow(clippy::too_many_arguments)]
    fn take(
        &self,
        st: &mut State<A::Memory>,
        size: usize,
        bin: usize,
        large: bool,
        tag: Option<u64>,
        min_split: usize,
        count_hit: bool,
    ) -> Option<Taken> {
        let mut t = st.arena.take(size, bin, large, tag, min_split);
        if t.is_none() && st.arena.quick_blocks > 0 {
            st.arena.flush_quick();
            t = st.arena.take(size, bin, large, tag, min_split);
        }
        if t.is_some() {
            st.note_taken(count_hit);
        }
        t
    }

    #[allow(clippy::too_many_arguments)]
    fn hand_out(
        &self,
        st: &State<A::Memory>,
        t: Taken,
        bytes: usize,
        bin: usize,
        exact: bool,
        owner: Option<Box<Streams>>,
    ) -> PooledBuffer<A> {
        let mem = st.arena.mem_ptr(t.seg);
        PooledBuffer::new(self.shared.clone(), mem, t, bytes, bin, exact, owner)
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
                        let pool = Some(Box::new(self.stats()));
                        return Err(Error::OutOfMemory { requested, available, pool });
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

    /// The counters.
    pub fn stats(&self) -> PoolStats {
        stats_of(&self.shared.state.lock())
    }

    /// Free blocks kept for reuse (pyopencl's `held_blocks`).
    pub fn held_blocks(&self) -> usize {
        self.shared.state.lock().arena.held_blocks()
    }

    /// Blocks handed out (pyopencl's `active_blocks`).
    pub fn active_blocks(&self) -> usize {
        self.shared.state.lock().arena.active_blocks
    }

    /// Bytes held from the allocator, active and held (pyopencl's `managed_bytes`).
    pub fn managed_bytes(&self) -> usize {
        self.shared.state.lock().arena.managed
    }

    /// Bytes of the blocks handed out (pyopencl's `active_bytes`).
    pub fn active_bytes(&self) -> usize {
        self.shared.state.lock().arena.active_bytes
    }

    /// Bytes of the held blocks.
    pub fn held_bytes(&self) -> usize {
        self.shared.state.lock().arena.held_bytes()
    }

    /// Active and held blocks per size class, classes with neither left out.
    pub fn bin_report(&self) -> Vec<BinReport> {
        let bits = self.shared.config.leading_bits_in_bin_id;
        let st = self.shared.state.lock();
        let mut rows: std::collections::BTreeMap<usize, BinReport> = std::collections::BTreeMap::new();
        for (bin, n) in st.arena.active_per_bin().enumerate().filter(|&(_, n)| n > 0) {
            rows.insert(bin, BinReport { bin, max_size: alloc_size(bin, bits), active: n, held: 0 });
        }
        for size in st.arena.held_sizes() {
            let bin = bin_number(size, bits);
            rows.entry(bin)
                .or_insert(BinReport { bin, max_size: alloc_size(bin, bits), active: 0, held: 0 })
                .held += 1;
        }
        rows.into_values().collect()
    }

    /// Returns every wholly free segment to the allocator (pyopencl's `free_held`).
    pub fn free_held(&self) {
        let freed = {
            let mut st = self.shared.state.lock();
            st.arena.flush_quick();
            st.arena.release_free_segments(|_| true)
        };
        drop(freed);
    }

    /// Frees what is held and makes later frees go straight back to the allocator once
    /// their segment is wholly free (pyopencl's `stop_holding`).
    pub fn stop_holding(&self) {
        self.shared.state.lock().holding = false;
        self.free_held();
    }

    /// Frees wholly free segments, largest first, until at most `bytes` are held.
    pub fn trim_to(&self, bytes: usize) {
        let freed = {
            let mut st = self.shared.state.lock();
            st.arena.flush_quick();
            st.arena.release_free_segments(|a| a.held_bytes() > bytes)
        };
        drop(freed);
    }
}

pub(crate) fn stats_of<M>(st: &State<M>) -> PoolStats {
    PoolStats {
        active_blocks: st.arena.active_blocks,
        active_bytes: st.arena.active_bytes,
        held_blocks: st.arena.held_blocks(),
        held_bytes: st.arena.held_bytes(),
        managed_bytes: st.arena.managed,
        peak_managed_bytes: st.peak_managed,
        peak_active_bytes: st.peak_active,
        hits: st.hits,
        misses: st.misses,
        limit: st.limit,
    }
}

fn resolve_limit<A: Allocator>(a: &A, limit: Option<Limit>) -> Result<Option<usize>> {
    match limit {
        None => Ok(None),
        Some(Limit::Bytes(b)) => Ok(Some(b)),
        Some(Limit::Fraction(f)) if f > 0.0 && f <= 1.0 => {
            let total = a.memory_info().map(|m| m.total).ok_or_else(|| {
                Error::invalid("a fractional limit needs an allocator that reports its total memory")
            })?;
            Ok(Some((total as f64 * f) as usize))
        }
        Some(Limit::Fraction(f)) => Err(Error::invalid(format!("limit fraction {f} outside (0, 1]"))),
    }
}
