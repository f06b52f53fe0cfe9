//! [`View`]: a sub-view of a mirror's array (slices, flips, axis orders) that knows which
//! bytes of the base array it covers.

use gpubuf_core::{Error, Layout, Order, Result, Segment};
use ndarray::{ArrayViewMutD, Axis, Slice};
use std::ops::Range;

/// A view of a mirrored array: a range per base axis, optional reversal of base axes, and
/// an axis order. Every write through it marks exactly the bytes it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    base_shape: Vec<usize>,
    ranges: Vec<Range<usize>>,
    flips: Vec<bool>,
    /// View axis `k` is base axis `perm[k]`.
    perm: Vec<usize>,
}

impl View {
    /// The whole array of `shape`.
    pub fn full(shape: &[usize]) -> Self {
        View {
            base_shape: shape.to_vec(),
            ranges: shape.iter().map(|&n| 0..n).collect(),
            flips: vec![false; shape.len()],
            perm: (0..shape.len()).collect(),
        }
    }

    /// The shape of the array the view belongs to.
    pub fn base_shape(&self) -> &[usize] {
        &self.base_shape
    }

    /// The view's shape (in view axis order).
    pub fn shape(&self) -> Vec<usize> {
        self.perm.iter().map(|&a| self.ranges[a].len()).collect()
    }

    /// A sub-view: `ranges[k]` on view axis `k`.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for the wrong number of ranges, [`Error::OutOfBounds`] for
    /// a range outside its axis.
    pub fn slice(&self, ranges: &[Range<usize>]) -> Result<Self> {
        if ranges.len() != self.perm.len() {
            return Err(Error::ShapeMismatch { expected: vec![self.perm.len()], got: vec![ranges.len()] });
        }
        let mut out = self.clone();
        for (k, r) in ranges.iter().enumerate() {
            let ax = self.perm[k];
            let cur = &self.ranges[ax];
            if r.start > r.end || r.end > cur.len() {
                return Err(Error::OutOfBounds {
                    what: format!("view slice on axis {k}"),
                    start: r.start,
                    end: r.end,
                    len: cur.len(),
                });
            }
            out.ranges[ax] = if self.flips[ax] {
                (cur.end - r.end)..(cur.end - r.start)
            } else {
                (cur.start + r.start)..(cur.start + r.end)
            };
        }
        Ok(out)
    }

    /// The view with view axis `axis` reversed.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a missing axis.
    pub fn flip(&self, axis: usize) -> Result<Self> {
        let ax = *self.perm.get(axis).ok_or_else(|| Error::invalid(format!("no axis {axis}")))?;
        let mut out = self.clone();
        out.flips[ax] = !out.flips[ax];
        Ok(out)
    }

    /// The view with its axes reordered: new axis `k` is current axis `axes[k]`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `axes` is not a permutation.
    pub fn permute(&self, axes: &[usize]) -> Result<Self> {
        let n = self.perm.len();
        let mut seen = vec![false; n];
        if axes.len() != n || axes.iter().any(|&a| a >= n || std::mem::replace(&mut seen[a], true)) {
            return Err(Error::invalid(format!("{axes:?} is not a permutation of {n} axes")));
        }
        let mut out = self.clone();
        out.perm = axes.iter().map(|&a| self.perm[a]).collect();
        Ok(out)
    }

    /// The view with its axes reversed (a transpose).
    pub fn t(&self) -> Self {
        let mut out = self.clone();
        out.perm.reverse();
        out
    }

    /// The view as a layout over the base array's elements.
    ///
    /// # Errors
    /// Only for a base shape whose size overflows.
    pub fn layout(&self) -> Result<Layout> {
        let mut l = Layout::contiguous(&self.base_shape, Order::C)?.sliced(&self.ranges)?;
        for (ax, &f) in self.flips.iter().enumerate() {
            if f {
                l = l.flipped(ax)?;
            }
        }
        l.permuted(&self.perm)
    }

    /// The byte extent of the view in the base array, glumpy's `(start, stop)`: from its
    /// lowest to one past its highest byte (`None` when empty).
    ///
    /// # Errors
    /// As [`View::layout`].
    pub fn extent(&self, itemsize: usize) -> Result<Option<Range<usize>>> {
        Ok(self.layout()?.span()?.map(|r| r.start * itemsize..r.end * itemsize))
    }

    /// The exact byte ranges of the base array the view covers (runs of adjacent elements
    /// merged), in increasing order of the first element of each run.
    ///
    /// # Errors
    /// As [`View::layout`].
    pub fn byte_runs(&self, itemsize: usize) -> Result<Vec<Range<usize>>> {
        let mut out = Vec::new();
        for seg in Segment::from_layout(0, &self.layout()?, 0)? {
            let (n, s) = (seg.extents[3], seg.strides[3]);
            let rows = seg.extents[0] * seg.extents[1] * seg.extents[2];
            for r in 0..rows {
                let (i2, i1, i0) = (
                    r % seg.extents[2],
                    (r / seg.extents[2]) % seg.extents[1],
                    r / (seg.extents[1] * seg.extents[2]),
                );
                let base = seg.offset as isize
                    + i0 as isize * seg.strides[0]
                    + i1 as isize * seg.strides[1]
                    + i2 as isize * seg.strides[2];
                if s.abs() == 1 {
                    let lo = if s < 0 { base - (n as isize - 1) } else { base } as usize;
                    out.push(lo * itemsize..(lo + n) * itemsize);
                } else {
                    for k in 0..n {
                        let at = (base + k as isize * s) as usize;
                        out.push(at * itemsize..(at + 1) * itemsize);
                    }
                }
            }
        }
        Ok(out)
    }

    /// Applies the view to a mutable ndarray view of the whole base array.
    pub(crate) fn apply<'a, T>(&self, base: ArrayViewMutD<'a, T>) -> ArrayViewMutD<'a, T> {
        let mut v = base;
        for (ax, r) in self.ranges.iter().enumerate() {
            v.slice_axis_inplace(Axis(ax), Slice::from(r.clone()));
            if self.flips[ax] {
                v.invert_axis(Axis(ax));
            }
        }
        v.permuted_axes(self.perm.clone())
    }
}
