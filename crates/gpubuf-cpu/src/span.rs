//! Where foreign host arrays lie: the bytes an array's elements span, from its data
//! pointer, shape and byte strides ([`Span`], [`span`], [`byte_extent`]), the numbers
//! every zero-copy path (adoption, overlap checks) starts from. Pure arithmetic, checked:
//! numbers that do not fit give `None`, never a wrapped range.

use crate::interop::ADOPT_ALIGN;

/// Where an adoptable array's elements lie: the span's first byte, its length in bytes,
/// the element strides and the offset (in elements) of element `[0, ..., 0]` in the span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    /// First byte of the span.
    pub base: usize,
    /// Bytes from the lowest to the end of the highest addressed element.
    pub len: usize,
    /// Strides in elements.
    pub strides: Vec<isize>,
    /// Element offset of `[0, ..., 0]` from `base`.
    pub offset: usize,
}

/// The span of an array with data pointer `data`, `shape`, byte `strides` and `item`
/// bytes per element; `None` when it cannot be adopted by the CPU backend (empty, strides
/// not whole elements, not on an [`ADOPT_ALIGN`] boundary, or arithmetic that does not
/// fit).
pub fn span(data: usize, shape: &[usize], strides: &[isize], item: usize) -> Option<Span> {
    span_unaligned(data, shape, strides, item).filter(|s| s.base % ADOPT_ALIGN == 0)
}

/// [`span`] without the alignment rule (device memory adopted by the CUDA backend).
pub fn span_unaligned(data: usize, shape: &[usize], strides: &[isize], item: usize) -> Option<Span> {
    if shape.contains(&0) || shape.len() != strides.len() || item == 0 {
        return None;
    }
    let item_i = i128::try_from(item).ok()?;
    let elems = strides
        .iter()
        .map(|&s| (s as i128 % item_i == 0).then(|| isize::try_from(s as i128 / item_i).ok()).flatten())
        .collect::<Option<Vec<isize>>>()?;
    let (base, len, low) = extent(data, shape, strides, item)?;
    let offset = usize::try_from(-low / item_i).ok()?;
    Some(Span { base, len, strides: elems, offset })
}

/// The bytes a non-empty array's elements lie in: `(first byte, length, low)` where `low`
/// (at most 0) is the first byte's distance from element `[0, ..., 0]`; `None` when a
/// number does not fit or the range passes the end of the address space.
fn extent(data: usize, shape: &[usize], strides: &[isize], item: usize) -> Option<(usize, usize, i128)> {
    let (mut low, mut high) = (0i128, 0i128);
    for (&n, &s) in shape.iter().zip(strides) {
        let reach = i128::try_from(s).ok()?.checked_mul(i128::try_from(n).ok()? - 1)?;
        if reach < 0 {
            low = low.checked_add(reach)?;
        } else {
            high = high.checked_add(reach)?;
        }
    }
    let start = i128::try_from(data).ok()?.checked_add(low)?;
    let len = high.checked_sub(low)?.checked_add(i128::try_from(item).ok()?)?;
    let (start, len) = (usize::try_from(start).ok()?, usize::try_from(len).ok()?);
    start.checked_add(len)?;
    Some((start, len, low))
}

/// The bytes the elements of a host array with data pointer `data`, `shape`, byte
/// `strides` and `item` bytes per element lie in, as `(first byte, length)`; `None` when
/// it has no element. Strides need not be whole elements. Numbers that do not fit (no
/// host array has them) give the whole address space, so that a caller copies.
pub fn byte_extent(data: usize, shape: &[usize], strides: &[isize], item: usize) -> Option<(usize, usize)> {
    if shape.contains(&0) {
        return None;
    }
    Some(extent(data, shape, strides, item).map_or((0, usize::MAX), |(start, len, _)| (start, len)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_of_plain_strided_and_flipped_arrays() {
        // 3x4 f64, C order.
        let s = span(4096, &[3, 4], &[32, 8], 8).unwrap();
        assert_eq!(s, Span { base: 4096, len: 96, strides: vec![4, 1], offset: 0 });
        // The same, rows flipped: element [0, 0] is the last row's first element.
        let s = span(4096 + 64, &[3, 4], &[-32, 8], 8).unwrap();
        assert_eq!(s, Span { base: 4096, len: 96, strides: vec![-4, 1], offset: 8 });
        // Every other column of a 3x8 array.
        let s = span(4096, &[3, 4], &[64, 16], 8).unwrap();
        assert_eq!((s.len, s.strides.clone()), (8 * (2 * 8 + 3 * 2) + 8, vec![8, 2]));
    }

    #[test]
    fn what_cannot_be_adopted_is_none() {
        assert_eq!(span(4096, &[0, 4], &[32, 8], 8), None, "empty");
        assert_eq!(span(4096, &[3, 4], &[32, 4], 8), None, "stride not whole elements");
        assert_eq!(span(4100, &[3, 4], &[32, 8], 8), None, "not 8-byte aligned");
        assert!(span_unaligned(4100, &[3, 4], &[32, 8], 8).is_some());
        assert_eq!(span(4096, &[3], &[8, 8], 8), None, "strides of another rank");
        assert_eq!(span(usize::MAX - 7, &[2], &[8], 8), None, "past the address space");
        assert_eq!(span(8, &[2, usize::MAX], &[8, isize::MAX], 8), None, "overflow");
        assert_eq!(span(32, &[2], &[-64], 8), None, "below address zero");
    }

    #[test]
    fn byte_extents_take_any_strides() {
        assert_eq!(byte_extent(100, &[3], &[3], 2), Some((100, 8)));
        assert_eq!(byte_extent(100, &[0], &[3], 2), None);
        assert_eq!(byte_extent(8, &[2, usize::MAX], &[8, isize::MAX], 8), Some((0, usize::MAX)));
    }
}
