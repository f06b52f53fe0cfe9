//! Straightforward reference implementations, written independently of the backends,
//! that the backends are checked against.

use gpubuf::halo::Dim;
use gpubuf::{CopyPlan, DType};
use ndarray::{ArrayD, IxDyn};

/// Source element index of element `l` of a segment's box, by plain C-order decomposition.
fn element(seg: &gpubuf::Segment, mut l: usize) -> usize {
    let mut at = seg.offset as i64;
    for d in (0..gpubuf::MAX_DIMS).rev() {
        let i = l % seg.extents[d];
        l /= seg.extents[d];
        at += i as i64 * seg.strides[d] as i64;
    }
    at as usize
}

/// Gathers on the host: returns the buffer (`plan.buffer_len()` elements) with every element
/// the plan does not write left as in `initial`.
pub fn gather(plan: &CopyPlan, dtype: DType, sources: &[Vec<u8>], initial: &[u8]) -> Vec<u8> {
    let w = dtype.size();
    let mut buf = initial.to_vec();
    for seg in plan.segments() {
        for l in 0..seg.len() {
            let from = element(seg, l) * w;
            let to = (seg.dst_offset + l) * w;
            let mut v = sources[seg.source][from..from + w].to_vec();
            if seg.negate {
                dtype.negate_bytes(&mut v);
            }
            buf[to..to + w].copy_from_slice(&v);
        }
    }
    buf
}

/// Scatters on the host: writes `buffer` into copies of `targets` and returns them.
pub fn scatter(plan: &CopyPlan, dtype: DType, buffer: &[u8], targets: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let w = dtype.size();
    let mut out = targets.to_vec();
    for seg in plan.segments() {
        for l in 0..seg.len() {
            let to = element(seg, l) * w;
            let from = (seg.dst_offset + l) * w;
            let mut v = buffer[from..from + w].to_vec();
            if seg.negate {
                dtype.negate_bytes(&mut v);
            }
            out[seg.source][to..to + w].copy_from_slice(&v);
        }
    }
    out
}

/// numpy's `rot90(a, k=1, axes=(p, q))` by its index formula:
/// `out[.., i_p, .., i_q, ..] = a[.. with i_p <- i_q, i_q <- n_q - 1 - i_p ..]`.
pub fn rot90<T: Clone>(a: &ArrayD<T>, p: usize, q: usize) -> ArrayD<T> {
    let mut shape = a.shape().to_vec();
    shape.swap(p, q);
    ArrayD::from_shape_fn(IxDyn(&shape), |idx| {
        let mut src: Vec<usize> = ndarray::Dimension::slice(&idx).to_vec();
        src[p] = idx[q];
        src[q] = a.shape()[q] - 1 - idx[p];
        a[IxDyn(&src)].clone()
    })
}

/// Reverses axis `ax`.
pub fn flip<T: Clone>(a: &ArrayD<T>, ax: usize) -> ArrayD<T> {
    ArrayD::from_shape_fn(a.raw_dim(), |idx| {
        let mut src: Vec<usize> = ndarray::Dimension::slice(&idx).to_vec();
        src[ax] = a.shape()[ax] - 1 - idx[ax];
        a[IxDyn(&src)].clone()
    })
}

/// NDSL's `rotate_scalar_data`, written out with [`rot90`] and [`flip`] (independent of
/// the view-based implementation under test).
pub fn rotate<T: Clone>(a: &ArrayD<T>, dims: &[Dim], n: i32) -> ArrayD<T> {
    let n = n.rem_euclid(4);
    let x = dims.iter().rposition(|d| matches!(d, Dim::X | Dim::XInterface));
    let y = dims.iter().rposition(|d| matches!(d, Dim::Y | Dim::YInterface));
    match (n, x, y) {
        (1, Some(x), Some(y)) => rot90(a, y, x),
        (3, Some(x), Some(y)) => rot90(a, x, y),
        (1, Some(x), None) => flip(a, x),
        (3, None, Some(y)) => flip(a, y),
        (2, _, _) => {
            let mut out = a.clone();
            for (ax, d) in dims.iter().enumerate() {
                if matches!(d, Dim::X | Dim::XInterface | Dim::Y | Dim::YInterface) {
                    out = flip(&out, ax);
                }
            }
            out
        }
        _ => a.clone(),
    }
}
