//! Size classes from the leading bits of the size, as pyopencl's `MemoryPool` does.
//!
//! A size's bin is its binary exponent followed by the `bits` bits after the leading one;
//! every size in a bin is padded to the bin's largest size, so the padding stays below
//! `size * 2^-bits`.

/// Block sizes are multiples of this (so blocks carved from one allocation stay aligned
/// for every dtype and for device access).
pub const GRANULE: usize = 256;

/// `floor(log2(n))` for `n >= 1`, 0 for 0.
#[inline]
fn bitlog2(n: usize) -> u32 {
    if n == 0 {
        0
    } else {
        usize::BITS - 1 - n.leading_zeros()
    }
}

/// The bin of `size` with `bits` leading bits (pyopencl's `bin_number`).
#[inline]
pub fn bin_number(size: usize, bits: u32) -> usize {
    let l = bitlog2(size);
    let shifted = if l >= bits { size >> (l - bits) } else { size << (bits - l) };
    let chopped = shifted & ((1usize << bits) - 1);
    ((l as usize) << bits) | chopped
}

/// The largest size in `bin` (pyopencl's `alloc_size`).
#[inline]
pub fn alloc_size(bin: usize, bits: u32) -> usize {
    let exponent = (bin >> bits) as i64;
    let mantissa = bin & ((1usize << bits) - 1);
    let shift = exponent - i64::from(bits);
    let head = if shift >= 0 {
        ((1usize << bits) | mantissa) << shift
    } else {
        ((1usize << bits) | mantissa) >> -shift
    };
    let ones = if shift > 0 { (1usize << shift) - 1 } else { 0 };
    head | ones
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
}
