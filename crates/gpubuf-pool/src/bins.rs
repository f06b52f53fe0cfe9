//! Size classes from the leading bits of the size, as pyopencl's `MemoryPool` does.
//!
//! A size's bin is its binary exponent followed by the `bits` bits after the leading one;
//! every size in a bin is padded to the bin's largest size, so the padding stays below
//! `size * 2^-bits`.

/// Block sizes are multiples of this (so blocks carved from one allocation stay aligned
/// for every dtype and for device access).
pub const GRANULE: usize = 256;

/// The most leading bits a size class may keep ([`crate::PoolConfig::leading_bits_in_bin_id`]
/// rejects more; the functions of this module treat a larger `bits` as this).
pub const MAX_LEADING_BITS: u32 = 16;

/// `floor(log2(n))` for `n >= 1`, 0 for 0.
#[inline]
fn bitlog2(n: usize) -> u32 {
    if n == 0 {
        0
    } else {
        usize::BITS - 1 - n.leading_zeros()
    }
}

/// The bin of `size` with `bits` leading bits (pyopencl's `bin_number`). A `bits` above
/// [`MAX_LEADING_BITS`] counts as [`MAX_LEADING_BITS`].
#[inline]
pub fn bin_number(size: usize, bits: u32) -> usize {
    bin_of(size, bits.min(MAX_LEADING_BITS))
}

/// [`bin_number`] for a `bits` already known to be at most [`MAX_LEADING_BITS`] (a pool's
/// validated config): the hit path's form.
#[inline]
pub(crate) fn bin_of(size: usize, bits: u32) -> usize {
    debug_assert!(bits <= MAX_LEADING_BITS);
    let l = bitlog2(size);
    // Both shifts are below usize::BITS: l <= 63 and bits <= 16.
    let shifted = if l >= bits { size >> (l - bits) } else { size << (bits - l) };
    let chopped = shifted & ((1usize << bits) - 1);
    ((l as usize) << bits) | chopped
}

/// The largest size in `bin` (pyopencl's `alloc_size`), or `usize::MAX` for a bin whose
/// sizes do not fit in a `usize` (no [`bin_number`] result is such a bin). A `bits` above
/// [`MAX_LEADING_BITS`] counts as [`MAX_LEADING_BITS`].
#[inline]
pub fn alloc_size(bin: usize, bits: u32) -> usize {
    let bits = bits.min(MAX_LEADING_BITS);
    let exponent = bin >> bits;
    if exponent >= usize::BITS as usize {
        return usize::MAX;
    }
    // exponent <= 63 and bits <= 16: every shift below is under usize::BITS, and the head
    // (bits + 1 significant bits shifted up to the exponent) keeps its top bit at or below
    // bit `exponent`.
    let exponent = exponent as u32;
    let head = (1usize << bits) | (bin & ((1usize << bits) - 1));
    if exponent >= bits {
        let shift = exponent - bits;
        (head << shift) | ((1usize << shift) - 1)
    } else {
        head >> (bits - exponent)
    }
}

/// The size of the block that serves a request of `size` bytes: the bin's largest size,
/// rounded up to [`GRANULE`] (for sizes of at least `GRANULE << bits` the rounding adds
/// exactly one byte: the bin's bound is already one below a granule multiple). `None` when
/// that size does not fit in a `usize` (requests within 256 bytes of `usize::MAX`, or
/// whose bin reaches it).
#[inline]
pub fn block_size(size: usize, bits: u32) -> Option<usize> {
    let top = alloc_size(bin_number(size.max(1), bits), bits);
    top.checked_next_multiple_of(GRANULE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_pyopencl_examples() {
        // Worked by hand from pyopencl's definitions with 4 leading bits.
        assert_eq!(bin_number(17, 4), (4 << 4) | 1);
        assert_eq!(alloc_size(bin_number(17, 4), 4), 17);
        assert_eq!(bin_number(100, 4), (6 << 4) | 9);
        assert_eq!(alloc_size(bin_number(100, 4), 4), 103);
        assert_eq!(block_size(100, 4), Some(256));
        assert_eq!(block_size(5000, 4), Some(5120));
        assert_eq!(block_size(usize::MAX, 4), None);
        assert_eq!(block_size(usize::MAX - 300, 4), None, "its bin reaches usize::MAX");
    }

    #[test]
    fn hostile_arguments_do_not_panic() {
        // Each of these overflowed a shift before.
        assert_eq!(bin_number(5, 64), bin_number(5, MAX_LEADING_BITS));
        assert_eq!(bin_number(usize::MAX, u32::MAX), bin_number(usize::MAX, MAX_LEADING_BITS));
        assert_eq!(alloc_size(70 << 4, 4), usize::MAX);
        assert_eq!(alloc_size(usize::MAX, 0), usize::MAX);
        assert_eq!(alloc_size(usize::MAX, u32::MAX), usize::MAX);
        assert_eq!(block_size(5, 200), Some(GRANULE));
        // The largest real bins still round-trip.
        for bits in 0..=MAX_LEADING_BITS {
            assert_eq!(alloc_size(bin_number(usize::MAX, bits), bits), usize::MAX);
            assert_eq!(alloc_size(bin_number(1, bits), bits), 1);
            assert_eq!(bin_number(0, bits), 0);
        }
    }
}
