//! [`CpuView`]: ndarray views taken from an `NDBuffer` on the CPU backend itself.

use crate::{interop, CpuBackend};
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{Element, Result};
use ndarray::{ArrayViewD, ArrayViewMutD};

/// Zero-copy ndarray views of an [`NDBuffer`] on the CPU backend, with its shape, strides,
/// flips and offsets (including the offset of its buffer in a shared allocation, such as a
/// pool segment holding several arrays).
///
/// The view lives only inside the closure, which runs while the bytes the view spans are
/// borrowed (for reading, or for writing with `view_mut`): a conflicting backend call on
/// those bytes from inside it is an error, not an alias, while other arrays of the same
/// allocation (a pool segment) stay free to view and write (see [`interop`]).
///
/// ```
/// use gpubuf_buffer::NDBuffer;
/// use gpubuf_cpu::{CpuBackend, CpuView};
///
/// let cpu = CpuBackend::new();
/// let a = NDBuffer::<_, f64>::from_slice(&cpu, &[4], &[1.0, 2.0, 3.0, 4.0])?;
/// let (lo, hi) = (a.slice(&[0..2])?, a.slice(&[2..4])?);
/// // Disjoint slices of one array: read one while writing the other.
/// lo.view(|l| hi.view_mut(|mut h| h += &l))?;
/// assert_eq!(a.to_vec()?, vec![1.0, 2.0, 4.0, 6.0]);
/// // The same bytes read and written: an error, not an alias.
/// assert!(a.view(|_| lo.view_mut(|_| ()))?.is_err());
/// # Ok::<(), gpubuf_core::Error>(())
/// ```
///
/// ```
/// use gpubuf_buffer::NDBuffer;
/// use gpubuf_cpu::{CpuBackend, CpuView};
///
/// let cpu = CpuBackend::new();
/// let a = NDBuffer::<_, f64>::from_slice(&cpu, &[2, 2], &[1.0, 2.0, 3.0, 4.0])?;
/// a.view_mut(|mut v| v *= 2.0)?;
/// assert_eq!(a.view(|v| v.sum())?, 20.0);
/// assert_eq!(a.transpose(None)?.view(|v| v[[0, 1]])?, 6.0);
/// # Ok::<(), gpubuf_core::Error>(())
/// ```
pub trait CpuView<T: Element> {
    /// Runs `f` on a read-only view of the array.
    ///
    /// # Errors
    /// As [`interop::view`].
    fn view<R>(&self, f: impl FnOnce(ArrayViewD<'_, T>) -> R) -> Result<R>;

    /// Runs `f` on a mutable view of the array; writes land in the array's own bytes.
    ///
    /// # Errors
    /// As [`interop::view_mut`] (a broadcast view is refused).
    fn view_mut<R>(&self, f: impl FnOnce(ArrayViewMutD<'_, T>) -> R) -> Result<R>;
}

impl<T: Element> CpuView<T> for NDBuffer<CpuBackend, T> {
    fn view<R>(&self, f: impl FnOnce(ArrayViewD<'_, T>) -> R) -> Result<R> {
        interop::view(self, f)
    }

    fn view_mut<R>(&self, f: impl FnOnce(ArrayViewMutD<'_, T>) -> R) -> Result<R> {
        interop::view_mut(self, f)
    }
}
