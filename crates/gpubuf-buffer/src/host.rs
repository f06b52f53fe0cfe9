//! Host interop of [`NDBuffer`]: ndarray views in, ndarray arrays and vectors out.

use crate::{Buffer, NDBuffer};
use gpubuf_core::{Element, Error, Kernels, Layout, Order, Result};
use ndarray::{ArrayD, ArrayView, Dimension, IxDyn};
use std::marker::PhantomData;

/// The bytes of a slice of elements.
pub(crate) fn bytes_of<T: Element>(v: &[T]) -> &[u8] {
    bytemuck::cast_slice(v)
}

/// An empty host vector with room for `n` elements, or [`Error::OutOfMemory`] (never an
/// abort) when the host cannot hold them.
pub(crate) fn reserve<T>(n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
        requested: n.saturating_mul(std::mem::size_of::<T>()),
        available: None,
        pool: None,
    })?;
    Ok(v)
}

/// The elements of any ndarray view in C order, in a new vector, or
/// [`Error::OutOfMemory`] (never an abort) when the host cannot hold them: a broadcast view
/// may stand for more elements than memory.
///
/// # Errors
/// [`Error::OutOfMemory`].
pub fn c_order_vec<T: Copy, D: Dimension>(view: &ArrayView<'_, T, D>) -> Result<Vec<T>> {
    let mut data = reserve(view.len())?;
    data.extend(view.iter().copied());
    Ok(data)
}

impl<B: Kernels, T: Element> NDBuffer<B, T> {
    /// Uploads any ndarray view, contiguous or not. C- and F-contiguous views keep their
    /// order in one copy; other views (sliced, stepped, negative strides) are gathered on
    /// the host into C order first.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when a non-contiguous (for instance broadcast) view's elements
    /// do not fit in host memory; allocation and driver errors.
    pub fn from_ndarray<D: Dimension>(backend: &B, view: ArrayView<'_, T, D>) -> Result<Self> {
        let shape = view.shape().to_vec();
        if let Some(s) = view.as_slice() {
            return Self::from_slice(backend, &shape, s);
        }
        if let Some(s) = view.as_slice_memory_order() {
            if view.t().is_standard_layout() {
                let layout = Layout::contiguous(&shape, Order::F)?;
                let buffer = Buffer::from_bytes(backend, bytes_of(s))?;
                return Ok(NDBuffer { buffer, layout, _t: PhantomData });
            }
        }
        Self::from_slice(backend, &shape, &c_order_vec(&view)?)
    }

    /// Writes a host ndarray view of the same shape into this view.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`]; driver errors.
    pub fn write_ndarray<D: Dimension>(&self, src: ArrayView<'_, T, D>) -> Result<()> {
        if src.shape() != self.shape() {
            return Err(Error::ShapeMismatch { expected: self.shape().to_vec(), got: src.shape().to_vec() });
        }
        match (self.dense_bytes(), src.as_slice()) {
            (Some(r), Some(s)) => self.buffer.write(r.start, bytes_of(s)),
            _ => self.copy_from(&Self::from_ndarray(self.backend(), src)?),
        }
    }

    /// Copies the view to a host ndarray (C order). Non-contiguous views are gathered on the
    /// device first, so exactly `nbytes()` cross to the host.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the host (or, for a strided view, the device) cannot hold
    /// the elements; driver errors.
    pub fn to_ndarray(&self) -> Result<ArrayD<T>> {
        let mut data = reserve(self.size())?;
        data.resize(self.size(), T::default());
        if self.size() > 0 {
            let dense;
            let (buf, r) = match self.dense_bytes() {
                Some(r) => (&self.buffer, r),
                None => {
                    dense = self.copy()?;
                    (&dense.buffer, 0..self.nbytes())
                }
            };
            buf.read_into(r.start, bytemuck::cast_slice_mut(&mut data))?;
        }
        ArrayD::from_shape_vec(IxDyn(self.shape()), data).map_err(|e| Error::invalid(e.to_string()))
    }

    /// Copies the view to a host `Vec` in C order.
    ///
    /// # Errors
    /// As [`NDBuffer::to_ndarray`].
    pub fn to_vec(&self) -> Result<Vec<T>> {
        Ok(self.to_ndarray()?.into_raw_vec_and_offset().0)
    }

    /// Whether every element equals `value`; NaN equals NaN (zarr's `all_equal` with
    /// `equal_nan=True`). An empty array is all-equal.
    ///
    /// # Errors
    /// As [`NDBuffer::to_ndarray`].
    pub fn all_equal(&self, value: T) -> Result<bool> {
        Ok(self.to_ndarray()?.iter().all(|v| v.same_value(&value)))
    }
}
