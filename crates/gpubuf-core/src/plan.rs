//! The copy plan: one backend-neutral description of a gather (pack) or scatter (unpack).
//!
//! A plan maps strided boxes in several *source* arrays onto ranges of one contiguous
//! *buffer*. Gather reads every box in C order (last extent fastest) into its buffer range;
//! scatter writes the buffer range back into the box. A segment may negate what it moves
//! (vector components after a rotation). Rotations and flips are views: swapped extents and
//! negative strides, never index arrays.

use crate::{Error, Layout, Result};
use std::sync::OnceLock;

/// Most axes one segment's box can have; views with more axes become several segments.
pub const MAX_DIMS: usize = 4;

/// One strided box of a source array, mapped onto a contiguous range of the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Segment {
    /// Which source array (index into the plan's sources).
    pub source: usize,
    /// Element offset of the box's first element in its source.
    pub offset: usize,
    /// Extents of the box, outermost first; unused axes have extent 1.
    pub extents: [usize; MAX_DIMS],
    /// Strides in elements for each extent; may be negative or zero.
    pub strides: [isize; MAX_DIMS],
    /// Element offset of the box's first element in the buffer.
    pub dst_offset: usize,
    /// Whether values are negated on the way (see [`crate::DType::negate_bytes`]).
    pub negate: bool,
}

impl Segment {
    /// A segment from up to [`MAX_DIMS`] `(extent, stride)` pairs, outermost first.
    ///
    /// # Errors
    /// [`Error::InvalidPlan`] with more than [`MAX_DIMS`] axes.
    pub fn new(source: usize, offset: usize, dims: &[(usize, isize)], dst_offset: usize) -> Result<Self> {
        if dims.len() > MAX_DIMS {
            return Err(Error::plan(format!("a segment has at most {MAX_DIMS} axes, got {}", dims.len())));
        }
        let mut extents = [1; MAX_DIMS];
        let mut strides = [0; MAX_DIMS];
        let pad = MAX_DIMS - dims.len();
        for (k, &(n, s)) in dims.iter().enumerate() {
            extents[pad + k] = n;
            strides[pad + k] = s;
        }
        Ok(Segment { source, offset, extents, strides, dst_offset, negate: false })
    }

    /// The same segment with negation switched on or off.
    pub fn negated(mut self, negate: bool) -> Self {
        self.negate = negate;
        self
    }

    /// Number of elements in the box.
    pub fn len(&self) -> usize {
        self.extents.iter().product()
    }

    /// Whether the box holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The lowest and one-past-highest source element the box touches (None when empty).
    fn source_span(&self) -> Option<(i128, i128)> {
        if self.is_empty() {
            return None;
        }
        let (mut lo, mut hi) = (self.offset as i128, self.offset as i128);
        for (&n, &s) in self.extents.iter().zip(&self.strides) {
            let reach = (n as i128 - 1) * s as i128;
            if reach < 0 {
                lo += reach
            } else {
                hi += reach
            }
        }
        Some((lo, hi + 1))
    }

    /// Calls `f(k, source_index)` for every element `k` of the box in buffer order.
    pub fn for_each(&self, mut f: impl FnMut(usize, usize)) {
        let [n0, n1, n2, n3] = self.extents;
        let [s0, s1, s2, s3] = self.strides;
        let mut k = 0;
        for i0 in 0..n0 {
            for i1 in 0..n1 {
                for i2 in 0..n2 {
                    let base = self.offset as isize + i0 as isize * s0 + i1 as isize * s1 + i2 as isize * s2;
                    for i3 in 0..n3 {
                        f(k, (base + i3 as isize * s3) as usize);
                        k += 1;
                    }
                }
            }
        }
    }

    /// Segments covering every element of `layout` (in C order of the view) from `source`,
    /// packed contiguously into the buffer from `dst_offset`. Adjacent axes that are dense
    /// relative to each other are merged first, so most views give one segment.
    ///
    /// # Errors
    /// [`Error::InvalidPlan`] when the view reaches below its storage.
    pub fn from_layout(source: usize, layout: &Layout, dst_offset: usize) -> Result<Vec<Segment>> {
        let size = layout.size();
        if size == 0 {
            return Ok(Vec::new());
        }
        let mut dims: Vec<(usize, isize)> = Vec::new();
        for (&n, &s) in layout.shape().iter().zip(layout.strides()) {
            if n == 1 {
                continue;
            }
            match dims.last_mut() {
                Some((pn, ps)) if *ps == s * n as isize => {
                    *pn *= n;
                    *ps = s;
                }
                _ => dims.push((n, s)),
            }
        }
        let offset = layout.offset();
        if dims.len() <= MAX_DIMS {
            return Ok(vec![Segment::new(source, offset, &dims, dst_offset)?]);
        }
        // More than MAX_DIMS axes after merging: enumerate the outer ones.
        let (outer, inner) = dims.split_at(dims.len() - MAX_DIMS);
        let inner_len: usize = inner.iter().map(|d| d.0).product();
        let outer_count: usize = outer.iter().map(|d| d.0).product();
        let mut segs = Vec::with_capacity(outer_count);
        for o in 0..outer_count {
            let mut rem = o;
            let mut off = offset as isize;
            for &(n, s) in outer.iter().rev() {
                off += (rem % n) as isize * s;
                rem /= n;
            }
            if off < 0 {
                return Err(Error::plan("view reaches below its storage"));
            }
            segs.push(Segment::new(source, off as usize, inner, dst_offset + o * inner_len)?);
        }
        Ok(segs)
    }
}

/// A validated copy plan: segments over `source_lens.len()` sources and a buffer of
/// `buffer_len` elements. Every box lies inside its source, every buffer range inside the
/// buffer, and buffer ranges never overlap (so gathers write each element once).
#[derive(Debug)]
pub struct CopyPlan {
    source_lens: Vec<usize>,
    buffer_len: usize,
    segments: Vec<Segment>,
    scatter_check: OnceLock<Result<()>>,
}

impl Clone for CopyPlan {
    fn clone(&self) -> Self {
        CopyPlan {
            source_lens: self.source_lens.clone(),
            buffer_len: self.buffer_len,
            segments: self.segments.clone(),
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
    /// # Errors
    /// [`Error::InvalidPlan`] when a segment names a missing source, reaches outside its
    /// source or the buffer, or when two segments' buffer ranges overlap.
    pub fn new(source_lens: Vec<usize>, buffer_len: usize, segments: Vec<Segment>) -> Result<Self> {
        let mut ranges = Vec::with_capacity(segments.len());
        for (i, s) in segments.iter().enumerate() {
            let len = source_lens.get(s.source).ok_or_else(|| {
                Error::plan(format!("segment {i} names source {} of {}", s.source, source_lens.len()))
            })?;
            let n = s.extents.iter().try_fold(1usize, |a, &e| a.checked_mul(e));
            let n = n.ok_or_else(|| Error::plan(format!("segment {i} has too many elements")))?;
            if let Some((lo, hi)) = s.source_span() {
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
        Ok(CopyPlan { source_lens, buffer_len, segments, scatter_check: OnceLock::new() })
    }

    /// The segments, in the order given.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Length in elements of each source.
    pub fn source_lens(&self) -> &[usize] {
        &self.source_lens
    }

    /// Length of the buffer in elements.
    pub fn buffer_len(&self) -> usize {
        self.buffer_len
    }

    /// Number of elements the plan moves.
    pub fn total(&self) -> usize {
        self.segments.iter().map(Segment::len).sum()
    }

    /// Checks that scattering writes every source element at most once (boxes neither
    /// overlap each other nor themselves), so the result does not depend on execution order.
    /// Computed once per plan and cached.
    ///
    /// # Errors
    /// [`Error::InvalidPlan`] naming the first element written twice.
    pub fn check_scatter(&self) -> Result<()> {
        self.scatter_check
            .get_or_init(|| (0..self.source_lens.len()).try_for_each(|src| self.check_source(src)))
            .clone()
    }

    /// Checks that no element of source `src` is written twice. Memory stays proportional
    /// to the elements the plan moves, whatever the declared source length: a bitset over
    /// the touched span when the writes are dense in it, sorted indices otherwise.
    fn check_source(&self, src: usize) -> Result<()> {
        let segs: Vec<(usize, &Segment)> =
            self.segments.iter().enumerate().filter(|(_, s)| s.source == src && !s.is_empty()).collect();
        let count: usize = segs.iter().map(|(_, s)| s.len()).sum();
        let Some((lo, hi)) =
            segs.iter().filter_map(|(_, s)| s.source_span()).fold(None, |acc, (l, h)| match acc {
                None => Some((l, h)),
                Some((al, ah)) => Some((l.min(al), h.max(ah))),
            })
        else {
            return Ok(());
        };
        let twice = |at: usize| Error::plan(format!("scatter writes element {at} of source {src} twice"));
        let span = (hi - lo) as usize;
        if span / 64 <= count {
            let mut bits = vec![0u64; span.div_ceil(64)];
            let mut clash = None;
            for (_, s) in &segs {
                s.for_each(|_, at| {
                    let k = at - lo as usize;
                    let (w, b) = (k / 64, 1u64 << (k % 64));
                    if bits[w] & b != 0 && clash.is_none() {
                        clash = Some(at);
                    }
                    bits[w] |= b;
                });
                if let Some(at) = clash {
                    return Err(twice(at));
                }
            }
        } else {
            let mut all = Vec::with_capacity(count);
            for (_, s) in &segs {
                s.for_each(|_, at| all.push(at));
            }
            all.sort_unstable();
            if let Some(w) = all.windows(2).find(|w| w[0] == w[1]) {
                return Err(twice(w[0]));
            }
        }
        Ok(())
    }
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
    use crate::Order;

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
