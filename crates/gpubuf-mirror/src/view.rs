//! [`View`]: a sub-view of a mirror's array (slices, flips, axis orders) that knows which
//! bytes of the base array it covers.

use gpubuf_core::{Error, Layout, Order, Result};
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
    /// [`Error::InvalidArgument`] for a base shape whose element count overflows.
    pub fn layout(&self) -> Result<Layout> {
        let base = Layout::contiguous(&self.base_shape, Order::C)?;
        if self.ranges.iter().any(|r| r.is_empty()) {
            // No element: any layout of the shape will do, and this one avoids offset
            // arithmetic over the (possibly saturated) strides of an empty base array.
            return Layout::contiguous(&self.shape(), Order::C);
        }
        let mut l = base.sliced(&self.ranges)?;
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
    /// As [`View::layout`]; [`Error::InvalidArgument`] when the byte offsets overflow
    /// `usize` for this `itemsize`.
    pub fn extent(&self, itemsize: usize) -> Result<Option<Range<usize>>> {
        match self.layout()?.span()? {
            Some(r) => Ok(Some(bytes_of(r.start, itemsize)?..bytes_of(r.end, itemsize)?)),
            None => Ok(None),
        }
    }

    /// The exact byte ranges of the base array the view covers: one run per row of the
    /// view's innermost axis (axes dense relative to each other merged first), or one per
    /// element when that axis is strided, in the view's element order.
    ///
    /// # Errors
    /// As [`View::extent`]; [`Error::OutOfMemory`] when the list of runs cannot be
    /// allocated (a strided view of a huge base shape).
    pub fn byte_runs(&self, itemsize: usize) -> Result<Vec<Range<usize>>> {
        let l = self.layout()?;
        let Some(span) = l.span()? else { return Ok(Vec::new()) };
        // Every element index below lies in the span, whose end in bytes fits `isize`.
        bytes_of(span.end, itemsize)?;
        let mut dims: Vec<(usize, isize)> = Vec::new();
        for (&n, &s) in l.shape().iter().zip(l.strides()) {
            if n == 1 {
                continue;
            }
            match dims.last_mut() {
                Some((pn, ps)) if isize::try_from(n).ok().and_then(|n| s.checked_mul(n)) == Some(*ps) => {
                    *pn *= n;
                    *ps = s;
                }
                _ => dims.push((n, s)),
            }
        }
        let (inner_n, inner_s) = dims.pop().unwrap_or((1, 1));
        let dense = inner_s.unsigned_abs() == 1;
        let rows: usize = dims.iter().map(|d| d.0).product();
        let count = if dense { rows } else { rows.saturating_mul(inner_n) };
        let mut out = Vec::new();
        out.try_reserve_exact(count).map_err(|_| Error::OutOfMemory {
            requested: count.saturating_mul(std::mem::size_of::<Range<usize>>()),
            available: None,
            pool: None,
        })?;
        // An odometer over the outer axes (last fastest), `at` the row's first element.
        let mut index = vec![0usize; dims.len()];
        let mut at = l.offset() as isize;
        for _ in 0..rows {
            if dense {
                let lo = if inner_s < 0 { at - (inner_n as isize - 1) } else { at } as usize;
                out.push(lo * itemsize..(lo + inner_n) * itemsize);
            } else {
                for k in 0..inner_n as isize {
                    let e = (at + k * inner_s) as usize;
                    out.push(e * itemsize..(e + 1) * itemsize);
                }
            }
            // Wrapping: past the last row `at` may step outside the span before it is
            // wound back; the values used above are always inside it.
            for (i, &(n, s)) in index.iter_mut().zip(&dims).rev() {
                *i += 1;
                at = at.wrapping_add(s);
                if *i < n {
                    break;
                }
                at = at.wrapping_sub(s.wrapping_mul(n as isize));
                *i = 0;
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

/// `elements * itemsize`, or an error when it overflows.
fn bytes_of(elements: usize, itemsize: usize) -> Result<usize> {
    elements
        .checked_mul(itemsize)
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| Error::invalid(format!("{elements} elements of {itemsize} bytes overflow usize")))
}
