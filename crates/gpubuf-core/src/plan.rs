//! The copy plan: one backend-neutral description of a gather (pack) or scatter (unpack).
//!
//! A plan maps strided boxes in several *source* arrays onto ranges of one contiguous
//! *buffer*. Gather reads every box in C order (last extent fastest) into its buffer range;
//! scatter writes the buffer range back into the box. A segment may negate what it moves
//! (vector components after a rotation). Rotations and flips are views: swapped extents and
//! negative strides, never index arrays.

use crate::{Error, Result, Segment};
use std::ops::ControlFlow;
use std::sync::OnceLock;

/// A validated copy plan: segments over `source_lens.len()` sources and a buffer of
/// `buffer_len` elements. Every box lies inside its source, every buffer range inside the
/// buffer, and buffer ranges never overlap (so gathers write each element once).
#[derive(Debug)]
pub struct CopyPlan {
    source_lens: Vec<usize>,
    buffer_len: usize,
    segments: Vec<Segment>,
    negates: bool,
    scatter_check: OnceLock<Result<()>>,
}

impl Clone for CopyPlan {
    fn clone(&self) -> Self {
        CopyPlan {
            source_lens: self.source_lens.clone(),
            buffer_len: self.buffer_len,
            segments: self.segments.clone(),
            negates: self.negates,
            scatter_check: self.scatter_check.clone(),
        }
    }
}

impl PartialEq for CopyPlan {
    fn eq(&self, other: &Self) -> bool {
        self.source_lens == other.source_lens
            && self.buffer_len == other.buffer_len
            && self.segments == other.segments
    }
}

impl CopyPlan {
    /// Validates and builds a plan. `source_lens[i]` is the length in elements of source `i`.
    ///
    /// Lengths are at most `isize::MAX` (no storage is longer), so every element index of a
    /// valid plan, and every count, fits `isize`, `i64` and the device encodings.
    ///
    /// # Errors
    /// [`Error::InvalidPlan`] when a length exceeds `isize::MAX`, a segment names a missing
    /// source, reaches outside its source or the buffer, or when two segments' buffer
    /// ranges overlap.
    pub fn new(source_lens: Vec<usize>, buffer_len: usize, segments: Vec<Segment>) -> Result<Self> {
        const MAX: usize = isize::MAX as usize;
        if buffer_len > MAX {
            return Err(Error::plan(format!("buffer of {buffer_len} elements (at most {MAX})")));
        }
        if let Some((i, n)) = source_lens.iter().enumerate().find(|(_, &n)| n > MAX) {
            return Err(Error::plan(format!("source {i} of {n} elements (at most {MAX})")));
        }
        let mut ranges = Vec::with_capacity(segments.len());
        for (i, s) in segments.iter().enumerate() {
            let len = source_lens.get(s.source).ok_or_else(|| {
                Error::plan(format!("segment {i} names source {} of {}", s.source, source_lens.len()))
            })?;
            let n =
                s.checked_len().ok_or_else(|| Error::plan(format!("segment {i} has too many elements")))?;
            if let Some((lo, hi)) = s.source_span()? {
                if lo < 0 || hi > *len as i128 {
                    return Err(Error::plan(format!(
                        "segment {i} touches source elements {lo}..{hi} of source {} with {len}",
                        s.source
                    )));
                }
            }
            let end = s.dst_offset.checked_add(n).filter(|&e| e <= buffer_len);
            let end = end.ok_or_else(|| {
                Error::plan(format!(
                    "segment {i} writes buffer elements {}..{} of {buffer_len}",
                    s.dst_offset,
                    s.dst_offset.saturating_add(n)
                ))
            })?;
            if n > 0 {
                ranges.push((s.dst_offset, end, i));
            }
        }
        ranges.sort_unstable();
        for w in ranges.windows(2) {
            if w[1].0 < w[0].1 {
                return Err(Error::plan(format!("segments {} and {} overlap in the buffer", w[0].2, w[1].2)));
            }
        }
        let negates = segments.iter().any(|s| s.negate);
        Ok(CopyPlan { source_lens, buffer_len, segments, negates, scatter_check: OnceLock::new() })
    }

    /// A plan with no source, no buffer and no segment.
    pub(crate) fn empty() -> Self {
        CopyPlan {
            source_lens: Vec::new(),
            buffer_len: 0,
            segments: Vec::new(),
            negates: false,
            scatter_check: OnceLock::new(),
        }
    }

    /// The segments, in the order given.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Whether any segment negates what it moves (such a plan refuses a dtype that is
    /// not [`crate::DType::negatable`]).
    pub fn negates(&self) -> bool {
        self.negates
    }

    /// Length in elements of each source.
    pub fn source_lens(&self) -> &[usize] {
        &self.source_lens
    }

    /// Length of the buffer in elements.
    pub fn buffer_len(&self) -> usize {
        self.buffer_len
    }

    /// Number of elements the plan moves (at most the buffer length: buffer ranges of a
    /// valid plan are disjoint).
    pub fn total(&self) -> usize {
        self.segments.iter().fold(0usize, |a, s| a.saturating_add(s.len()))
    }

    /// Checks that scattering writes every source element at most once (boxes neither
    /// overlap each other nor themselves), so the result does not depend on execution order.
    /// Computed once per plan and cached. Time and memory follow the elements the plan
    /// moves, and the check stops at the first element written twice.
    ///
    /// # Errors
    /// [`Error::InvalidPlan`] naming the first element found written twice;
    /// [`Error::OutOfMemory`] when the check's bookkeeping does not fit in host memory.
    pub fn check_scatter(&self) -> Result<()> {
        self.scatter_check
            .get_or_init(|| {
                let mut by_source: Vec<&Segment> = self.segments.iter().filter(|s| !s.is_empty()).collect();
                by_source.sort_by_key(|s| s.source);
                by_source.chunk_by(|a, b| a.source == b.source).try_for_each(check_source)
            })
            .clone()
    }
}

/// The bookkeeping of a check could not be allocated.
fn check_oom(bytes: usize) -> Error {
    Error::OutOfMemory { requested: bytes, available: None, pool: None }
}

/// Checks that no element of one source (`segs`, non-empty, all naming it) is written
/// twice. Memory stays proportional to the elements written, whatever the declared source
/// length: a bitset over the touched span when the writes are dense in it, sorted indices
/// otherwise.
fn check_source(segs: &[&Segment]) -> Result<()> {
    let src = segs.first().map_or(0, |s| s.source);
    // Segments of a valid plan have disjoint buffer ranges: their lengths sum to at most
    // the buffer length, and their spans lie inside the source (both <= isize::MAX).
    let count = segs.iter().fold(0usize, |a, s| a.saturating_add(s.len()));
    let mut bounds: Option<(i128, i128)> = None;
    for s in segs {
        if let Some((l, h)) = s.source_span()? {
            bounds = Some(bounds.map_or((l, h), |(al, ah)| (l.min(al), h.max(ah))));
        }
    }
    let Some((lo, hi)) = bounds else { return Ok(()) };
    let twice = |at: usize| Error::plan(format!("scatter writes element {at} of source {src} twice"));
    let lo = usize::try_from(lo).map_err(|_| Error::plan("a segment reaches below its source"))?;
    let span = usize::try_from(hi).map_err(|_| Error::plan("a segment reaches past its source"))? - lo;
    if span / 64 <= count {
        // Dense: one bit per element of the span (at most count / 8 + 8 bytes). A write
        // into an element already set stops the walk at once, so a broadcast is found at
        // its second element whatever its length.
        let words = span.div_ceil(64);
        let mut bits: Vec<u64> = Vec::new();
        bits.try_reserve_exact(words).map_err(|_| check_oom(words.saturating_mul(8)))?;
        bits.resize(words, 0);
        for s in segs {
            let r = s.walk(|_, at| {
                let k = at - lo;
                let (w, b) = (k / 64, 1u64 << (k % 64));
                if bits[w] & b != 0 {
                    return ControlFlow::Break(at);
                }
                bits[w] |= b;
                ControlFlow::Continue(())
            });
            if let ControlFlow::Break(at) = r {
                return Err(twice(at));
            }
        }
    } else {
        let mut all: Vec<usize> = Vec::new();
        all.try_reserve_exact(count).map_err(|_| check_oom(count.saturating_mul(8)))?;
        for s in segs {
            s.for_each(|_, at| all.push(at));
        }
        all.sort_unstable();
        if let Some(w) = all.windows(2).find(|w| w[0] == w[1]) {
            return Err(twice(w[0]));
        }
    }
    Ok(())
}

impl CopyPlan {
    /// Splits the plan by source into sub-plans of at most `max_sources` consecutive sources
    /// each (for backends that bind sources as kernel arguments). Each part lists the plan
    /// sources it covers and a plan whose segments name them `0..`; parts without a
    /// non-empty segment are dropped. Buffer offsets are unchanged.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `max_sources` is 0.
    pub fn split_by_source(&self, max_sources: usize) -> Result<Vec<(Vec<usize>, CopyPlan)>> {
        if max_sources == 0 {
            return Err(Error::invalid("max_sources must be at least 1"));
        }
        let mut parts = Vec::new();
        let n = self.source_lens.len();
        for first in (0..n).step_by(max_sources) {
            let count = max_sources.min(n - first);
            let segments: Vec<Segment> = self
                .segments
                .iter()
                .filter(|s| s.source >= first && s.source < first + count && !s.is_empty())
                .map(|s| Segment { source: s.source - first, ..*s })
                .collect();
            if segments.is_empty() {
                continue;
            }
            let lens = self.source_lens[first..first + count].to_vec();
            let plan = CopyPlan {
                source_lens: lens,
                buffer_len: self.buffer_len,
                negates: segments.iter().any(|s| s.negate),
                segments,
                scatter_check: OnceLock::new(),
            };
            parts.push(((first..first + count).collect(), plan));
        }
        Ok(parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Layout, Order};

    #[test]
    fn layout_segments_merge_dense_axes() {
        let l = Layout::contiguous(&[2, 3, 4, 5, 6], Order::C).unwrap();
        let segs = Segment::from_layout(0, &l, 0).unwrap();
        assert_eq!(segs.len(), 1);
        assert_eq!(segs[0].extents, [1, 1, 1, 720]);
        let t = l.transposed();
        let segs = Segment::from_layout(0, &t, 0).unwrap();
        assert_eq!(segs.len(), 6);
        assert_eq!(segs.iter().map(Segment::len).sum::<usize>(), 720);
    }

    #[test]
    fn rejects_bad_plans() {
        let seg = Segment::new(0, 0, &[(4, 1)], 0).unwrap();
        assert!(CopyPlan::new(vec![4], 4, vec![seg]).is_ok());
        assert!(CopyPlan::new(vec![3], 4, vec![seg]).is_err());
        assert!(CopyPlan::new(vec![4], 3, vec![seg]).is_err());
        assert!(CopyPlan::new(vec![], 4, vec![seg]).is_err());
        let back = Segment::new(0, 2, &[(4, -1)], 0).unwrap();
        assert!(CopyPlan::new(vec![8], 4, vec![back]).is_err());
        let other = Segment { dst_offset: 3, ..seg };
        assert!(CopyPlan::new(vec![4], 8, vec![seg, other]).is_err());
        assert!(Segment::new(0, 0, &[(1, 1); 5], 0).is_err());
    }

    #[test]
    fn split_by_source_keeps_every_segment() {
        let segs: Vec<Segment> = (0..5).map(|i| Segment::new(i, 0, &[(2, 1)], 2 * i).unwrap()).collect();
        let plan = CopyPlan::new(vec![2; 5], 10, segs).unwrap();
        let parts = plan.split_by_source(2).unwrap();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[2].0, vec![4]);
        assert_eq!(parts[2].1.segments()[0].source, 0);
        assert_eq!(parts[2].1.segments()[0].dst_offset, 8);
        assert_eq!(parts.iter().map(|p| p.1.total()).sum::<usize>(), 10);
        assert!(plan.split_by_source(0).is_err());
    }

    #[test]
    fn scatter_check_memory_follows_the_writes_not_the_declared_length() {
        // Two elements a petabyte apart in a source declared huge: no huge bitset.
        let far = Segment::new(0, 0, &[(2, 1 << 50)], 0).unwrap();
        let plan = CopyPlan::new(vec![usize::MAX / 2], 2, vec![far]).unwrap();
        assert!(plan.check_scatter().is_ok());
        let again = Segment { dst_offset: 2, ..far };
        let plan = CopyPlan::new(vec![usize::MAX / 2], 4, vec![far, again]).unwrap();
        assert!(plan.check_scatter().is_err());
    }

    #[test]
    fn scatter_check_finds_double_writes() {
        let a = Segment::new(0, 0, &[(2, 2), (2, 1)], 0).unwrap();
        let b = Segment { offset: 1, dst_offset: 4, ..a };
        let plan = CopyPlan::new(vec![8], 8, vec![a, b]).unwrap();
        assert!(plan.check_scatter().is_err());
        let c = Segment { offset: 4, dst_offset: 4, ..a };
        assert!(CopyPlan::new(vec![8], 8, vec![a, c]).unwrap().check_scatter().is_ok());
        let bcast = Segment::new(0, 0, &[(3, 0)], 0).unwrap();
        assert!(CopyPlan::new(vec![1], 3, vec![bcast]).unwrap().check_scatter().is_err());
    }
}
