//! [`Segment`]: one strided box of a source array mapped onto a contiguous buffer range.

use crate::{Error, Layout, Result};
use std::ops::ControlFlow;

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
    /// [`Error::InvalidPlan`] with more than [`MAX_DIMS`] axes, or when the number of
    /// elements overflows `usize`.
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
        let seg = Segment { source, offset, extents, strides, dst_offset, negate: false };
        if seg.checked_len().is_none() {
            return Err(Error::plan(format!("a segment of extents {extents:?} has too many elements")));
        }
        Ok(seg)
    }

    /// The same segment with negation switched on or off.
    pub fn negated(mut self, negate: bool) -> Self {
        self.negate = negate;
        self
    }

    /// Number of elements in the box, saturating at `usize::MAX` for a box too large to
    /// exist (built field by field; [`Segment::new`] and [`CopyPlan::new`](crate::CopyPlan::new) reject those).
    pub fn len(&self) -> usize {
        self.checked_len().unwrap_or(usize::MAX)
    }

    /// Number of elements in the box, or `None` when it overflows `usize`.
    pub fn checked_len(&self) -> Option<usize> {
        if self.extents.contains(&0) {
            return Some(0);
        }
        self.extents.iter().try_fold(1usize, |a, &e| a.checked_mul(e))
    }

    /// Whether the box holds no element.
    pub fn is_empty(&self) -> bool {
        self.extents.contains(&0)
    }

    /// The lowest and one-past-highest source element the box touches (`None` when it is
    /// empty), in `i128`; [`Error::InvalidPlan`] when even that overflows.
    pub(crate) fn source_span(&self) -> Result<Option<(i128, i128)>> {
        if self.is_empty() {
            return Ok(None);
        }
        let overflow = || Error::plan("a segment's box reaches past any index");
        let (mut lo, mut hi) = (self.offset as i128, self.offset as i128);
        for (&n, &s) in self.extents.iter().zip(&self.strides) {
            let reach = (n as i128 - 1).checked_mul(s as i128).ok_or_else(overflow)?;
            let side = if reach < 0 { &mut lo } else { &mut hi };
            *side = side.checked_add(reach).ok_or_else(overflow)?;
        }
        Ok(Some((lo, hi + 1)))
    }

    /// Whether every element index of the box (and their count) lies in `0..=isize::MAX`:
    /// the condition under which [`Segment::for_each`] and the kernels compute indices in
    /// `isize` without wrapping. [`CopyPlan::new`](crate::CopyPlan::new) enforces it.
    fn indices_fit(&self) -> bool {
        let len_fits = self.checked_len().is_some_and(|n| n <= isize::MAX as usize);
        match self.source_span() {
            Ok(Some((lo, hi))) => len_fits && lo >= 0 && hi - 1 <= isize::MAX as i128,
            Ok(None) => true,
            Err(_) => false,
        }
    }

    /// Calls `f(k, source_index)` for every element `k` of the box in buffer order.
    ///
    /// A box with an element index outside `0..=isize::MAX` (possible only for a segment
    /// built field by field: [`CopyPlan::new`](crate::CopyPlan::new) rejects it) visits nothing.
    pub fn for_each(&self, mut f: impl FnMut(usize, usize)) {
        let _ = self.walk(|k, at| {
            f(k, at);
            ControlFlow::<()>::Continue(())
        });
    }

    /// [`Segment::for_each`] that stops as soon as `f` breaks.
    pub(crate) fn walk<B>(&self, mut f: impl FnMut(usize, usize) -> ControlFlow<B>) -> ControlFlow<B> {
        if self.is_empty() || !self.indices_fit() {
            return ControlFlow::Continue(());
        }
        // Every extent is at most the length (<= isize::MAX) and every partial sum of
        // `offset + i*s` terms lies between the box's lowest and highest index, both in
        // 0..=isize::MAX: no step below can wrap.
        let [n0, n1, n2, n3] = self.extents;
        let [s0, s1, s2, s3] = self.strides;
        let mut k = 0;
        for i0 in 0..n0 {
            for i1 in 0..n1 {
                for i2 in 0..n2 {
                    let base = self.offset as isize + i0 as isize * s0 + i1 as isize * s1 + i2 as isize * s2;
                    for i3 in 0..n3 {
                        f(k, (base + i3 as isize * s3) as usize)?;
                        k += 1;
                    }
                }
            }
        }
        ControlFlow::Continue(())
    }

    /// Segments covering every element of `layout` (in C order of the view) from `source`,
    /// packed contiguously into the buffer from `dst_offset`. Adjacent axes that are dense
    /// relative to each other are merged first, so most views give one segment.
    ///
    /// # Errors
    /// [`Error::InvalidPlan`] when the view reaches outside `0..=isize::MAX` or the buffer
    /// range passes `usize::MAX`; [`Error::OutOfMemory`] when the segment list does not fit
    /// in host memory.
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
                // `s * n` in i128: it may not fit isize, and then it cannot equal `ps`.
                Some((pn, ps)) if *ps as i128 == s as i128 * n as i128 => {
                    // Merged extents multiply to at most the size: never saturates.
                    *pn = pn.saturating_mul(n);
                    *ps = s;
                }
                _ => dims.push((n, s)),
            }
        }
        let offset = layout.offset();
        let outside = || Error::plan("the view reaches outside 0..=isize::MAX of its storage");
        if dims.len() <= MAX_DIMS {
            let seg = Segment::new(source, offset, &dims, dst_offset)?;
            return if seg.indices_fit() { Ok(vec![seg]) } else { Err(outside()) };
        }
        // More than MAX_DIMS axes after merging: enumerate the outer ones. Extents multiply
        // to at most the size, so the products below never saturate.
        let (outer, inner) = dims.split_at(dims.len() - MAX_DIMS);
        let inner_len = inner.iter().fold(1usize, |a, d| a.saturating_mul(d.0));
        let outer_count = outer.iter().fold(1usize, |a, d| a.saturating_mul(d.0));
        dst_offset
            .checked_add(size)
            .ok_or_else(|| Error::plan(format!("buffer range {dst_offset}.. + {size} overflows")))?;
        let mut segs = Vec::new();
        segs.try_reserve_exact(outer_count).map_err(|_| Error::OutOfMemory {
            requested: outer_count.saturating_mul(std::mem::size_of::<Segment>()),
            available: None,
            pool: None,
        })?;
        for o in 0..outer_count {
            let mut rem = o;
            let mut off = offset as i128;
            for &(n, s) in outer.iter().rev() {
                off += (rem % n) as i128 * s as i128;
                rem /= n;
            }
            let off = usize::try_from(off).map_err(|_| outside())?;
            // o * inner_len + inner_len <= size, and dst_offset + size fits (checked above).
            let seg = Segment::new(source, off, inner, dst_offset + o * inner_len)?;
            if !seg.indices_fit() {
                return Err(outside());
            }
            segs.push(seg);
        }
        Ok(segs)
    }
}
