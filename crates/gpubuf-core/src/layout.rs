//! Shapes, strides and views: how an n-d array sits in a flat allocation.

use crate::{Error, Result};
use std::ops::Range;

/// Memory order of a freshly created contiguous array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Order {
    /// Row-major: the last axis varies fastest.
    #[default]
    C,
    /// Column-major: the first axis varies fastest.
    F,
}

/// An n-d view: shape, strides in elements (may be negative or zero) and the element offset
/// of index `[0, 0, ...]` from the start of the underlying storage.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layout {
    shape: Vec<usize>,
    strides: Vec<isize>,
    offset: usize,
}

impl Layout {
    /// A contiguous layout of `shape` in `order`, starting at offset 0.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the element count, or the product of the non-zero
    /// extents (which the strides of an empty array still need), exceeds `isize::MAX`.
    pub fn contiguous(shape: &[usize], order: Order) -> Result<Self> {
        check_extents(shape)?;
        let mut strides = vec![0isize; shape.len()];
        let mut acc = 1isize;
        let axes: Vec<usize> = match order {
            Order::C => (0..shape.len()).rev().collect(),
            Order::F => (0..shape.len()).collect(),
        };
        for ax in axes {
            strides[ax] = acc;
            // Never fails: `check_extents` bounded the product of every `max(1)` extent.
            acc = isize::try_from(shape[ax].max(1))
                .ok()
                .and_then(|n| acc.checked_mul(n))
                .ok_or_else(|| too_big(shape))?;
        }
        Ok(Layout { shape: shape.to_vec(), strides, offset: 0 })
    }

    /// A layout from explicit parts. Every element it addresses must have a storage index
    /// in `0..isize::MAX` (a storage of at most `isize::MAX` elements, as for a
    /// [`CopyPlan`](crate::CopyPlan); index arithmetic never wraps); use [`Layout::check_fits`] to
    /// check it against a storage length. An empty view addresses nothing: its strides and
    /// offset are not checked.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `shape` and `strides` differ in length, the size (or
    /// the product of the non-zero extents) exceeds `isize::MAX`, or an element's index
    /// falls outside `0..isize::MAX`.
    pub fn new(shape: Vec<usize>, strides: Vec<isize>, offset: usize) -> Result<Self> {
        if shape.len() != strides.len() {
            return Err(Error::invalid(format!(
                "shape has {} axes but strides have {}",
                shape.len(),
                strides.len()
            )));
        }
        check_extents(&shape)?;
        let l = Layout { shape, strides, offset };
        if let Some((lo, hi)) = l.bounds()? {
            if lo < 0 || hi >= isize::MAX as i128 {
                return Err(Error::invalid(format!(
                    "view addresses storage elements {lo}..={hi}, outside 0..{}",
                    isize::MAX
                )));
            }
        }
        Ok(l)
    }

    /// The extents of each axis.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The stride of each axis, in elements.
    pub fn strides(&self) -> &[isize] {
        &self.strides
    }

    /// Element offset of the first index from the start of the storage.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Number of axes.
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements (1 for a 0-d array).
    pub fn size(&self) -> usize {
        // Every constructor bounds the product by isize::MAX, so this never saturates.
        self.shape.iter().fold(1usize, |a, &n| a.saturating_mul(n))
    }

    /// The lowest and highest storage index the view addresses (inclusive), in `i128`, or
    /// `None` when it is empty.
    ///
    /// Cannot overflow `i128` for a layout whose size fits `isize` (every constructor
    /// checks that): each axis reaches at most `(n - 1) * 2^63` and the `n - 1` sum to at
    /// most the size; the arithmetic is checked all the same.
    fn bounds(&self) -> Result<Option<(i128, i128)>> {
        if self.size() == 0 {
            return Ok(None);
        }
        let overflow = || Error::invalid("view span overflows");
        let (mut lo, mut hi) = (self.offset as i128, self.offset as i128);
        for (&n, &s) in self.shape.iter().zip(&self.strides) {
            let reach = (n as i128 - 1).checked_mul(s as i128).ok_or_else(overflow)?;
            if reach < 0 {
                lo = lo.checked_add(reach).ok_or_else(overflow)?;
            } else {
                hi = hi.checked_add(reach).ok_or_else(overflow)?;
            }
        }
        Ok(Some((lo, hi)))
    }

    /// The half-open range of storage elements the view can touch, or `None` when it is empty.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the view reaches below element 0 of its storage or
    /// past `usize::MAX` (possible only after [`Layout::with_offset`]).
    pub fn span(&self) -> Result<Option<Range<usize>>> {
        let Some((lo, hi)) = self.bounds()? else { return Ok(None) };
        if lo < 0 {
            return Err(Error::invalid(format!("view reaches element {lo}, below its storage")));
        }
        let lo = usize::try_from(lo).map_err(|_| Error::invalid("view span overflows"))?;
        let hi = usize::try_from(hi + 1).map_err(|_| Error::invalid("view span overflows"))?;
        Ok(Some(lo..hi))
    }

    /// Checks that every element of the view lies inside a storage of `len` elements.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when it does not; [`Error::InvalidArgument`] as [`Layout::span`].
    pub fn check_fits(&self, len: usize) -> Result<()> {
        if let Some(r) = self.span()? {
            if r.end > len {
                return Err(Error::OutOfBounds {
                    what: "view in storage (elements)".into(),
                    start: r.start,
                    end: r.end,
                    len,
                });
            }
        }
        Ok(())
    }

    /// Whether elements are laid out densely in C order from `offset`.
    pub fn is_c_contiguous(&self) -> bool {
        self.dense_in(self.shape.len(), |i| self.shape.len() - 1 - i)
    }

    /// Whether elements are laid out densely in F order from `offset`.
    pub fn is_f_contiguous(&self) -> bool {
        self.dense_in(self.shape.len(), |i| i)
    }

    fn dense_in(&self, n: usize, axis: impl Fn(usize) -> usize) -> bool {
        if self.size() <= 1 {
            return true;
        }
        let mut expect = 1isize;
        for i in 0..n {
            let ax = axis(i);
            if self.shape[ax] != 1 && self.strides[ax] != expect {
                return false;
            }
            // No extent is 0 (size > 1), so `expect` stays below the size: never None.
            match isize::try_from(self.shape[ax]).ok().and_then(|e| expect.checked_mul(e)) {
                Some(e) => expect = e,
                None => return false,
            }
        }
        true
    }

    /// Storage index of a multi-index.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the index has the wrong number of axes (the message
    /// names the index and the shape), [`Error::OutOfBounds`] when it exceeds the shape, [`Error::InvalidArgument`] when the element lies outside
    /// any storage (a view moved there by [`Layout::with_offset`]).
    pub fn index_of(&self, index: &[usize]) -> Result<usize> {
        if index.len() != self.ndim() {
            return Err(Error::invalid(format!(
                "index {index:?} has {} axes, the array has {} (shape {:?})",
                index.len(),
                self.ndim(),
                self.shape
            )));
        }
        let mut at = self.offset as i128;
        for (ax, (&i, (&n, &s))) in index.iter().zip(self.shape.iter().zip(&self.strides)).enumerate() {
            if i >= n {
                return Err(Error::OutOfBounds {
                    what: format!("index on axis {ax}"),
                    start: i,
                    end: i.saturating_add(1),
                    len: n,
                });
            }
            // |i * s| < 2^126 and the terms sum to at most the view's reach: checked anyway.
            at = (i as i128).checked_mul(s as i128).and_then(|d| at.checked_add(d)).unwrap_or(i128::MAX);
        }
        usize::try_from(at).map_err(|_| {
            Error::invalid(format!("index {index:?} addresses element {at}, outside any storage"))
        })
    }

    /// A view with the axes reordered: axis `k` of the result is axis `axes[k]` of `self`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `axes` is not a permutation of `0..ndim`.
    pub fn permuted(&self, axes: &[usize]) -> Result<Self> {
        let mut seen = vec![false; self.ndim()];
        if axes.len() != self.ndim() {
            return Err(Error::invalid(format!("permutation {axes:?} for {} axes", self.ndim())));
        }
        for &a in axes {
            if a >= self.ndim() || std::mem::replace(&mut seen[a], true) {
                return Err(Error::invalid(format!("{axes:?} is not a permutation")));
            }
        }
        Ok(Layout {
            shape: axes.iter().map(|&a| self.shape[a]).collect(),
            strides: axes.iter().map(|&a| self.strides[a]).collect(),
            offset: self.offset,
        })
    }

    /// The view with its axes reversed (numpy's `.T`).
    pub fn transposed(&self) -> Self {
        Layout {
            shape: self.shape.iter().rev().copied().collect(),
            strides: self.strides.iter().rev().copied().collect(),
            offset: self.offset,
        }
    }

    /// A sub-view taking `ranges[k]` on axis `k` (step 1). An empty result keeps the
    /// offset of `self` (it addresses nothing).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for the wrong number of ranges, [`Error::OutOfBounds`] for a
    /// range outside its axis or reversed, [`Error::InvalidArgument`] when the first element
    /// lies outside any storage (a view moved there by [`Layout::with_offset`]).
    pub fn sliced(&self, ranges: &[Range<usize>]) -> Result<Self> {
        if ranges.len() != self.ndim() {
            return Err(Error::ShapeMismatch { expected: vec![self.ndim()], got: vec![ranges.len()] });
        }
        let mut shape = Vec::with_capacity(self.ndim());
        for (ax, r) in ranges.iter().enumerate() {
            if r.start > r.end || r.end > self.shape[ax] {
                return Err(Error::OutOfBounds {
                    what: format!("slice on axis {ax}"),
                    start: r.start,
                    end: r.end,
                    len: self.shape[ax],
                });
            }
            shape.push(r.end - r.start);
        }
        let mut out = Layout { shape, strides: self.strides.clone(), offset: self.offset };
        if out.size() > 0 {
            // Every `start` is a valid index of a non-empty axis: the first element of the
            // sub-view is an element of `self`.
            let start: Vec<usize> = ranges.iter().map(|r| r.start).collect();
            out.offset = self.index_of(&start)?;
        }
        Ok(out)
    }

    /// The view with axis `axis` reversed (numpy's `flip`): the stride is negated and the
    /// offset moves to the old last element (an empty view keeps its offset).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `axis` does not exist, its stride is `isize::MIN`
    /// (which has no negation), or the new first element lies outside any storage.
    pub fn flipped(&self, axis: usize) -> Result<Self> {
        if axis >= self.ndim() {
            return Err(Error::invalid(format!("axis {axis} of a {}-d view", self.ndim())));
        }
        let mut out = self.clone();
        out.strides[axis] = self.strides[axis].checked_neg().ok_or_else(|| {
            Error::invalid(format!("stride {} of axis {axis} cannot be negated", isize::MIN))
        })?;
        if self.size() > 0 {
            let mut last = vec![0; self.ndim()];
            last[axis] = self.shape[axis] - 1;
            out.offset = self.index_of(&last)?;
        }
        Ok(out)
    }

    /// The same storage seen with another shape; only for C-contiguous views.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when the sizes differ, [`Error::InvalidArgument`] when the view
    /// is not C-contiguous or the new extents overflow.
    pub fn reshaped(&self, shape: &[usize]) -> Result<Self> {
        if checked_size(shape)? != self.size() {
            return Err(Error::ShapeMismatch { expected: self.shape.clone(), got: shape.to_vec() });
        }
        if !self.is_c_contiguous() {
            return Err(Error::invalid("reshape of a non-contiguous view needs a copy"));
        }
        let mut l = Layout::contiguous(shape, Order::C)?;
        l.offset = self.offset;
        Ok(l)
    }

    /// The same view starting at element `offset` of its storage. Not checked: a view moved
    /// past `isize::MAX` is reported by [`Layout::span`], [`Layout::check_fits`] and
    /// [`Layout::index_of`] as outside any storage.
    pub fn with_offset(mut self, offset: usize) -> Self {
        self.offset = offset;
        self
    }
}

fn too_big(shape: &[usize]) -> Error {
    Error::invalid(format!("shape {shape:?} has too many elements"))
}

/// Checks the size and the product of the non-zero extents (the span of contiguous strides
/// even when the array is empty) against `isize::MAX`; returns the size.
fn check_extents(shape: &[usize]) -> Result<usize> {
    let size = checked_size(shape)?;
    shape
        .iter()
        .try_fold(1usize, |acc, &n| acc.checked_mul(n.max(1)))
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| too_big(shape))?;
    Ok(size)
}

/// The product of `shape`, or an error when it overflows `usize`.
///
/// # Errors
/// [`Error::InvalidArgument`] on overflow.
pub fn checked_size(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &n| acc.checked_mul(n))
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| Error::invalid(format!("shape {shape:?} has too many elements")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_strides() {
        let c = Layout::contiguous(&[2, 3, 4], Order::C).unwrap();
        assert_eq!(c.strides(), &[12, 4, 1]);
        assert!(c.is_c_contiguous() && !c.is_f_contiguous());
        let f = Layout::contiguous(&[2, 3, 4], Order::F).unwrap();
        assert_eq!(f.strides(), &[1, 2, 6]);
        assert!(f.is_f_contiguous() && !f.is_c_contiguous());
        assert_eq!(c.transposed().strides(), &[1, 4, 12]);
        assert!(c.transposed().is_f_contiguous());
    }

    #[test]
    fn slicing_and_flipping() {
        let c = Layout::contiguous(&[4, 5], Order::C).unwrap();
        let s = c.sliced(&[1..3, 2..5]).unwrap();
        assert_eq!(s.offset(), 7);
        assert_eq!(s.span().unwrap(), Some(7..15));
        let f = s.flipped(1).unwrap();
        assert_eq!(f.index_of(&[0, 0]).unwrap(), 9);
        assert_eq!(f.index_of(&[1, 2]).unwrap(), 12);
        assert!(c.sliced(&[0..5, 0..1]).is_err());
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = [3..2, 0..1];
        assert!(c.sliced(&reversed).is_err());
        assert!(c.index_of(&[4, 0]).is_err());
        assert!(c.reshaped(&[21]).is_err());
        assert_eq!(c.reshaped(&[20]).unwrap().shape(), &[20]);
        assert!(s.reshaped(&[6]).is_err());
    }

    #[test]
    fn overflow_is_an_error() {
        assert!(Layout::contiguous(&[usize::MAX, 2], Order::C).is_err());
        assert!(Layout::new(vec![1], vec![], 0).is_err());
    }
}
