//! The pool's state behind its lock: the arena, the counters, the limit with the growth
//! reserved below it, and the held-memory window.

use crate::arena::Arena;
use crate::config::PoolConfig;
use gpubuf_core::PoolStats;
use std::sync::Arc;

pub(crate) struct State<M> {
    pub(crate) arena: Arena<M>,
    pub(crate) holding: bool,
    pub(crate) limit: Option<usize>,
    /// Bytes of segments being allocated (outside the lock) that count against the limit
    /// already: `managed + reserved` never exceeds the limit, however many threads grow
    /// the pool at once.
    pub(crate) reserved: usize,
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
    pub(crate) fn new(limit: Option<usize>) -> Self {
        State {
            arena: Arena::new(),
            holding: true,
            limit,
            reserved: 0,
            hits: 0,
            misses: 0,
            peak_managed: 0,
            peak_active: 0,
            window_peak: [0, 0],
            window_frees: 0,
            held_floor: 0,
        }
    }

    /// Records the active bytes before a free for the sliding peak.
    pub(crate) fn note_active_before(&mut self, active: usize) {
        self.window_peak[0] = self.window_peak[0].max(active);
    }

    /// Counts a block handed out (a hit unless it came from a fresh segment).
    #[inline]
    pub(crate) fn note_taken(&mut self, hit: bool) {
        // A u64 count of allocations does not wrap in practice; wrapping keeps it a plain add.
        self.hits = self.hits.wrapping_add(u64::from(hit));
        self.peak_active = self.peak_active.max(self.arena.active_bytes);
    }

    /// Advances the window after a free.
    pub(crate) fn note_active(&mut self) {
        // No overflow: between frees `window_frees < window <= u32::MAX` (or both are 0),
        // since the free that reaches `window` resets it in `allowed_managed`.
        self.window_frees += 1;
    }

    /// The most bytes the pool should manage now (see [`PoolConfig::held_ratio`]).
    pub(crate) fn allowed_managed(&mut self, cfg: &PoolConfig) -> usize {
        let fixed = self.arena.active_bytes.saturating_add(cfg.min_held_bytes);
        // Fast path: within the fixed allowance, nothing to work out.
        if self.arena.managed <= fixed && self.window_frees < cfg.window {
            return usize::MAX;
        }
        if self.window_frees >= cfg.window {
            self.window_frees = 0;
            self.window_peak = [self.arena.active_bytes, self.window_peak[0]];
        }
        let window = self.window_peak[0].max(self.window_peak[1]);
        // Float-to-int casts saturate (and a NaN from 0 * inf is 0).
        self.held_floor = window.saturating_add((window as f64 * cfg.held_ratio) as usize);
        let peak = window.max(self.arena.active_bytes);
        let slack = (peak as f64 * cfg.held_ratio) as usize;
        peak.saturating_add(slack).max(fixed)
    }

    /// Reserves `seg` bytes of growth below the limit (and below `usize::MAX`), freeing
    /// held segments first when that makes room. Returns, with the outcome, the memory
    /// freed on the way, for the caller to drop outside the lock; the error is the bytes
    /// still available under the limit (`None` without one).
    pub(crate) fn reserve(&mut self, seg: usize) -> (Result<(), Option<usize>>, Vec<Arc<M>>) {
        let (reserved, limit) = (self.reserved, self.limit);
        let fits = move |a: &Arena<M>| {
            a.managed
                .checked_add(reserved)
                .and_then(|x| x.checked_add(seg))
                .is_some_and(|total| limit.is_none_or(|l| total <= l))
        };
        let mut freed = Vec::new();
        if !fits(&self.arena) {
            self.arena.flush_quick();
            freed = self.arena.release_free_segments(|a| !fits(a));
            if !fits(&self.arena) {
                let available = limit.map(|l| l.saturating_sub(self.arena.active_bytes));
                return (Err(available), freed);
            }
        }
        // `fits`: managed + reserved + seg is a usize.
        self.reserved += seg;
        (Ok(()), freed)
    }

    /// Gives back a reservation (the allocation failed, or its segment was added).
    pub(crate) fn unreserve(&mut self, seg: usize) {
        self.reserved = self.reserved.saturating_sub(seg);
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
