//! numpy's reshape rules on a [`Layout`]: a new shape with one extent left to infer (`-1`),
//! checked against the view's size before any view or copy is made.

use crate::{Error, Layout, Result};

impl Layout {
    /// The shape numpy's `reshape(shape)` gives this view: `shape` with at most one `-1`,
    /// which becomes the extent that makes the sizes agree. Whether the result is a view
    /// ([`Layout::reshaped`], for a C-contiguous view) or needs a copy is up to the caller.
    ///
    /// ```
    /// use gpubuf_core::{Layout, Order};
    ///
    /// let l = Layout::contiguous(&[4, 5, 6], Order::C)?;
    /// assert_eq!(l.infer_shape(&[-1, 6])?, vec![20, 6]);
    /// assert_eq!(l.infer_shape(&[120])?, vec![120]);
    /// assert!(l.infer_shape(&[7, -1]).is_err());
    /// # Ok::<(), gpubuf_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a second `-1` or another negative extent;
    /// [`Error::ShapeMismatch`] (expected: this view's shape) when no extent makes the sizes
    /// agree, among them a `-1` beside a zero extent, as numpy refuses it.
    pub fn infer_shape(&self, shape: &[isize]) -> Result<Vec<usize>> {
        let mismatch = || {
            let got = shape.iter().map(|&n| usize::try_from(n).unwrap_or(usize::MAX)).collect();
            Error::ShapeMismatch { expected: self.shape().to_vec(), got }
        };
        let mut known: usize = 1;
        let mut unknown = None;
        for (k, &n) in shape.iter().enumerate() {
            if n == -1 && unknown.is_none() {
                unknown = Some(k);
            } else {
                let n = usize::try_from(n).map_err(|_| Error::invalid(format!("extent {n} in a reshape")))?;
                known = known.checked_mul(n).ok_or_else(mismatch)?;
            }
        }
        let size = self.size();
        let mut out: Vec<usize> = shape.iter().map(|&n| usize::try_from(n).unwrap_or(0)).collect();
        match unknown {
            Some(k) => {
                if known == 0 || size % known != 0 {
                    return Err(mismatch());
                }
                out[k] = size / known;
            }
            None if known != size => return Err(mismatch()),
            None => {}
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Error, Layout, Order};

    fn layout(shape: &[usize]) -> Layout {
        Layout::contiguous(shape, Order::C).unwrap()
    }

    #[test]
    fn one_extent_is_inferred() {
        let l = layout(&[2, 3, 4]);
        assert_eq!(l.infer_shape(&[4, -1]).unwrap(), vec![4, 6]);
        assert_eq!(l.infer_shape(&[-1]).unwrap(), vec![24]);
        assert_eq!(l.infer_shape(&[2, -1, 3]).unwrap(), vec![2, 4, 3]);
        assert_eq!(l.infer_shape(&[24, 1]).unwrap(), vec![24, 1]);
        // An empty view: any shape of size 0, and -1 beside non-zero extents.
        let e = layout(&[0, 3]);
        assert_eq!(e.infer_shape(&[3, 0, 5]).unwrap(), vec![3, 0, 5]);
        assert_eq!(e.infer_shape(&[-1, 3]).unwrap(), vec![0, 3]);
        // A 0-d view has one element.
        assert_eq!(layout(&[]).infer_shape(&[1, -1]).unwrap(), vec![1, 1]);
        assert_eq!(layout(&[]).infer_shape(&[]).unwrap(), Vec::<usize>::new());
    }

    #[test]
    fn bad_shapes_are_errors() {
        let l = layout(&[2, 3, 4]);
        let mismatch =
            |r| matches!(r, Err(Error::ShapeMismatch { ref expected, .. }) if expected == &[2, 3, 4]);
        assert!(mismatch(l.infer_shape(&[5, -1])));
        assert!(mismatch(l.infer_shape(&[25])));
        assert!(mismatch(l.infer_shape(&[0, -1])), "-1 beside a zero extent");
        assert!(mismatch(l.infer_shape(&[isize::MAX, isize::MAX, -1])), "overflow");
        assert!(matches!(l.infer_shape(&[-1, -1]), Err(Error::InvalidArgument(_))));
        assert!(matches!(l.infer_shape(&[-2, 12]), Err(Error::InvalidArgument(_))));
        assert!(matches!(l.infer_shape(&[isize::MIN]), Err(Error::InvalidArgument(_))));
    }
}
