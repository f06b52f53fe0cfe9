//! [`PoolConfig`] and [`Limit`]: how a pool rounds, carves, caps and trims.

use crate::bins::MAX_LEADING_BITS;
use gpubuf_core::{Allocator, Error, Result};

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
    /// Mantissa bits of a size class (pyopencl's `leading_bits_in_bin_id`, default 4, at
    /// most [`MAX_LEADING_BITS`]): a request is padded by less than `size * 2^-bits`. The
    /// pool keeps 40 bytes per class up to the largest class it has served.
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
    /// See `held_ratio` (`usize::MAX`: hold everything until trimmed).
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
    /// pyopencl's layout: every block is an allocation of its own, of exactly its size
    /// class's block size, handed out again only for requests of that size class (never
    /// split, never carved from a shared segment; `small_max`, `small_segment` and
    /// `large_round` are ignored). A block then starts its allocation, so a foreign
    /// library can take the allocation's handle for the block.
    pub whole_blocks: bool,
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
            whole_blocks: false,
        }
    }
}

impl PoolConfig {
    /// Checks the settings that no pool could work with.
    pub(crate) fn check(&self) -> Result<()> {
        if self.leading_bits_in_bin_id > MAX_LEADING_BITS {
            return Err(Error::invalid(format!(
                "leading_bits_in_bin_id {} is above {MAX_LEADING_BITS}",
                self.leading_bits_in_bin_id
            )));
        }
        if self.large_round == 0 || self.small_segment == 0 {
            return Err(Error::invalid("large_round and small_segment must be at least one byte"));
        }
        if self.held_ratio.is_nan() || self.held_ratio < 0.0 {
            return Err(Error::invalid(format!(
                "held_ratio {} is not a non-negative number",
                self.held_ratio
            )));
        }
        Ok(())
    }
}

/// The limit in bytes.
pub(crate) fn resolve_limit<A: Allocator>(a: &A, limit: Option<Limit>) -> Result<Option<usize>> {
    match limit {
        None => Ok(None),
        Some(Limit::Bytes(b)) => Ok(Some(b)),
        // NaN fails both comparisons.
        Some(Limit::Fraction(f)) if f > 0.0 && f <= 1.0 => {
            let total = a.memory_info().map(|m| m.total).ok_or_else(|| {
                Error::invalid("a fractional limit needs an allocator that reports its total memory")
            })?;
            // The product is at most `total`; the cast saturates at usize::MAX.
            Ok(Some((total as f64 * f) as usize))
        }
        Some(Limit::Fraction(f)) => Err(Error::invalid(format!("limit fraction {f} outside (0, 1]"))),
    }
}
