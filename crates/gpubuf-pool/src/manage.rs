//! [`MemoryPool`]'s counters, reports and trimming.

use crate::bins::{alloc_size, bin_number};
use crate::pool::MemoryPool;
use crate::state::stats_of;
use gpubuf_core::{Allocator, PoolStats};
use std::collections::BTreeMap;

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
    /// The counters.
    pub fn stats(&self) -> PoolStats {
        stats_of(&self.shared.state.lock())
    }

    /// Counts `n` requests served by [`crate::PooledBuffer::reuse`] as hits in the stats
    /// (a caller's own cache in front of the pool).
    pub fn count_hits(&self, n: u64) {
        let mut st = self.shared.state.lock();
        st.hits = st.hits.wrapping_add(n);
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
        let mut rows: BTreeMap<usize, BinReport> = BTreeMap::new();
        for (bin, n) in st.arena.active_per_bin().enumerate().filter(|&(_, n)| n > 0) {
            rows.insert(bin, BinReport { bin, max_size: alloc_size(bin, bits), active: n, held: 0 });
        }
        for size in st.arena.held_sizes() {
            let bin = bin_number(size, bits);
            let row = rows.entry(bin).or_insert(BinReport {
                bin,
                max_size: alloc_size(bin, bits),
                active: 0,
                held: 0,
            });
            row.held += 1;
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

    /// Frees wholly free segments, largest first, until at most `bytes` are held (or no
    /// wholly free segment is left: blocks in partly used segments stay).
    pub fn trim_to(&self, bytes: usize) {
        let freed = {
            let mut st = self.shared.state.lock();
            st.arena.flush_quick();
            st.arena.release_free_segments(|a| a.held_bytes() > bytes)
        };
        drop(freed);
    }
}
