//! Straightforward reference implementations, written independently of the backends,
//! that the backends are checked against.

use gpubuf::{CopyPlan, DType};

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
