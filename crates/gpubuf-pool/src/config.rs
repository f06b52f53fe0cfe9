//! [`PoolConfig`] and [`Limit`]: how a pool rounds, carves, caps and trims.

/// A cap on the bytes a pool may hold from its allocator.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Limit {
    /// At most this many bytes.
    Bytes(usize),
    /// At most this fraction of the device's total memory.
    Fraction(f64),
}

/// How a pool rounds, carves, caps and trims.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Mantissa bits of a size class (pyopencl's `leading_bits_in_bin_id`, default 4): a
    /// request is padded by less than `size * 2^-bits`.
    pub leading_bits_in_bin_id: u32,
    /// Allocate with [`Allocator::allocate_immediate`](gpubuf_core::Allocator::allocate_immediate) (memory exists on return; default)
    /// rather than [`Allocator::allocate`](gpubuf_core::Allocator::allocate).
    pub immediate: bool,
    /// Most bytes the pool may hold from its allocator.
    pub limit: Option<Limit>,
    /// Bound on held memory: after a free, wholly free segments go back to the allocator
    /// while the pool manages more than `(1 + held_ratio)` times the peak of active bytes
    /// over the last `window` frees, or `min_held_bytes` above the active bytes if larger.
    /// A steady loop keeps its blocks; a workload that shrank gives memory back.
    pub held_ratio: f64,
    /// See `held_ratio`.
    pub min_held_bytes: usize,
    /// See `held_ratio` (frees per window of the active-bytes peak).
    pub window: u32,
    /// Blocks up to this size share segments of `small_segment` bytes.
    pub small_max: usize,
    /// Segment size for small blocks.
    pub small_segment: usize,
    /// Larger blocks get their own segments, rounded up to a multiple of this.
    pub large_round: usize,
    /// Freed blocks kept unmerged per size class for the fastest reuse.
    pub quick_per_bin: usize,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            leading_bits_in_bin_id: 4,
            immediate: true,
            limit: None,
            held_ratio: 0.2,
            min_held_bytes: 8 << 20,
            window: 1024,
            small_max: 1 << 20,
            small_segment: 2 << 20,
            large_round: 2 << 20,
            quick_per_bin: 8,
        }
    }
}
