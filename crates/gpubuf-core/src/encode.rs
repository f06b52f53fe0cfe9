//! The device form of a copy plan, shared by the OpenCL and CUDA kernels.
//!
//! Each segment becomes [`SEG_WORDS`] `i64` words:
//! `source, offset, e0, e1, e2, e3, s0, s1, s2, s3, dst_offset, negate`.
//! `starts` holds the prefix sums of the segment lengths (`nseg + 1` words), so a work-item
//! with global index `t < total` finds its segment by binary search and its position in
//! the box by decomposing `t - starts[k]` over the extents. No per-element index arrays.

use crate::{CopyPlan, MAX_DIMS};

/// Words per segment in [`EncodedPlan::segments`].
pub const SEG_WORDS: usize = 4 + 2 * MAX_DIMS;

/// A plan flattened for upload to a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedPlan {
    /// [`SEG_WORDS`] words per non-empty segment.
    pub segments: Vec<i64>,
    /// Prefix sums of the segment lengths, `nseg + 1` entries starting at 0.
    pub starts: Vec<i64>,
    /// Elements moved (the last entry of `starts`).
    pub total: usize,
}

impl EncodedPlan {
    /// Number of encoded (non-empty) segments.
    pub fn nseg(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }
}

/// One count or index as a device word. Exact for every number of a valid plan: a
/// [`CopyPlan`] keeps lengths, offsets and extents at most `isize::MAX` (= `i64::MAX` on
/// 64-bit hosts; smaller elsewhere), and source indices of fewer sources than elements.
fn word(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Flattens `plan`, dropping empty segments.
pub fn encode(plan: &CopyPlan) -> EncodedPlan {
    let mut segments = Vec::with_capacity(plan.segments().len().saturating_mul(SEG_WORDS));
    let mut starts = vec![0i64];
    let mut total = 0usize;
    for s in plan.segments().iter().filter(|s| !s.is_empty()) {
        segments.push(word(s.source));
        segments.push(word(s.offset));
        segments.extend(s.extents.iter().map(|&e| word(e)));
        // isize -> i64 is lossless on every target Rust supports (pointers of at most 64 bits).
        segments.extend(s.strides.iter().map(|&e| e as i64));
        segments.push(word(s.dst_offset));
        segments.push(i64::from(s.negate));
        // Buffer ranges are disjoint and inside the buffer: the sum stays <= buffer_len.
        total = total.saturating_add(s.len());
        starts.push(word(total));
    }
    EncodedPlan { segments, starts, total }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Segment;

    #[test]
    fn encodes_prefix_sums() {
        let a = Segment::new(0, 3, &[(2, 5), (3, -1)], 0).unwrap().negated(true);
        let empty = Segment::new(0, 0, &[(0, 1)], 6).unwrap();
        let b = Segment::new(1, 0, &[(4, 1)], 6).unwrap();
        let plan = CopyPlan::new(vec![20, 4], 10, vec![a, empty, b]).unwrap();
        let e = encode(&plan);
        assert_eq!(e.starts, vec![0, 6, 10]);
        assert_eq!(e.nseg(), 2);
        assert_eq!(&e.segments[..SEG_WORDS], &[0, 3, 1, 1, 2, 3, 0, 0, 5, -1, 0, 1]);
    }
}
