//! [`NDBuffer`]: a typed n-d array on a device, like zarr's `NDBuffer`.

use crate::Buffer;
use gpubuf_core::{
    checked_size, Backend, CopyPlan, DType, Element, Error, Kernels, Layout, MemRef, Order, Result, Segment,
};
use ndarray::{ArrayD, ArrayView, Dimension, IxDyn};
use std::marker::PhantomData;
use std::ops::Range;

/// A typed n-d view over a [`Buffer`]: shape, strides (elements, possibly negative) and an
/// element offset. Views (`transpose`, `slice`, `reshape` of contiguous data) share storage.
pub struct NDBuffer<B: Backend, T: Element> {
    buffer: Buffer<B>,
    layout: Layout,
    _t: PhantomData<T>,
}

impl<B: Backend, T: Element> Clone for NDBuffer<B, T> {
    fn clone(&self) -> Self {
        NDBuffer { buffer: self.buffer.clone(), layout: self.layout.clone(), _t: PhantomData }
    }
}

impl<B: Backend, T: Element> std::fmt::Debug for NDBuffer<B, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NDBuffer")
            .field("backend", &B::KIND)
            .field("dtype", &T::DTYPE)
            .field("shape", &self.layout.shape())
            .field("strides", &self.layout.strides())
            .field("offset", &self.layout.offset())
            .finish()
    }
}

fn bytes_of<T: Element>(v: &[T]) -> &[u8] {
    bytemuck::cast_slice(v)
}

impl<B: Kernels, T: Element> NDBuffer<B, T> {
    /// A new contiguous array of `shape` in `order`, every element `fill`, or zero when `fill`
    /// is `None` (zeros on every backend, unlike an uninitialised allocation).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the size overflows; allocation errors.
    pub fn create(backend: &B, shape: &[usize], order: Order, fill: Option<T>) -> Result<Self> {
        let a = Self::empty(backend, shape, order)?;
        a.buffer.fill(bytemuck::bytes_of(&fill.unwrap_or_default()))?;
        Ok(a)
    }

    /// A new contiguous array of zeros (C order).
    ///
    /// # Errors
    /// As [`NDBuffer::create`].
    pub fn zeros(backend: &B, shape: &[usize]) -> Result<Self> {
        Self::create(backend, shape, Order::C, None)
    }

    /// A new contiguous array whose contents are unspecified (never read before written).
    ///
    /// # Errors
    /// As [`NDBuffer::create`].
    pub fn empty(backend: &B, shape: &[usize], order: Order) -> Result<Self> {
        let n = checked_size(shape)?;
        let bytes = n.checked_mul(T::DTYPE.size()).ok_or_else(|| Error::invalid("array too large"))?;
        let buffer = Buffer::empty(backend, bytes)?;
        Ok(NDBuffer { buffer, layout: Layout::contiguous(shape, order)?, _t: PhantomData })
    }

    /// Uploads a host slice as a C-order array of `shape`.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when `data.len()` is not the size of `shape`.
    pub fn from_slice(backend: &B, shape: &[usize], data: &[T]) -> Result<Self> {
        if checked_size(shape)? != data.len() {
            return Err(Error::ShapeMismatch { expected: shape.to_vec(), got: vec![data.len()] });
        }
        let buffer = Buffer::from_bytes(backend, bytes_of(data))?;
        Ok(NDBuffer { buffer, layout: Layout::contiguous(shape, Order::C)?, _t: PhantomData })
    }

    /// Uploads any ndarray view, contiguous or not. C- and F-contiguous views keep their
    /// order in one copy; other views (sliced, stepped, negative strides) are gathered on
    /// the host into C order first.
    ///
    /// # Errors
    /// Allocation and driver errors.
    pub fn from_ndarray<D: Dimension>(backend: &B, view: ArrayView<'_, T, D>) -> Result<Self> {
        let shape = view.shape().to_vec();
        if let Some(s) = view.as_slice() {
            return Self::from_slice(backend, &shape, s);
        }
        if let Some(s) = view.as_slice_memory_order() {
            if view.t().is_standard_layout() {
                let buffer = Buffer::from_bytes(backend, bytes_of(s))?;
                return Ok(NDBuffer {
                    buffer,
                    layout: Layout::contiguous(&shape, Order::F)?,
                    _t: PhantomData,
                });
            }
        }
        let data: Vec<T> = view.iter().copied().collect();
        Self::from_slice(backend, &shape, &data)
    }

    /// An n-d view over `buffer` (zero-copy): `shape` in `order` from its first byte.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the buffer is too short; [`Error::InvalidArgument`]
    /// when its offset is not a multiple of the element size.
    pub fn from_buffer(buffer: Buffer<B>, shape: &[usize], order: Order) -> Result<Self> {
        Self::from_buffer_layout(buffer, Layout::contiguous(shape, order)?)
    }

    /// An n-d view over `buffer` with an explicit layout (offset and strides in elements).
    ///
    /// # Errors
    /// As [`NDBuffer::from_buffer`].
    pub fn from_buffer_layout(buffer: Buffer<B>, layout: Layout) -> Result<Self> {
        let size = T::DTYPE.size();
        if buffer.offset() % size != 0 {
            return Err(Error::invalid(format!(
                "buffer offset {} is not a multiple of the {size}-byte element",
                buffer.offset()
            )));
        }
        layout.check_fits(buffer.len() / size)?;
        Ok(NDBuffer { buffer, layout, _t: PhantomData })
    }

    /// The array on `target`: zero-copy when it is this array's device, else a copy.
    ///
    /// # Errors
    /// Allocation and driver errors of the copy.
    pub fn to_backend<B2: Kernels>(&self, target: &B2) -> Result<NDBuffer<B2, T>> {
        NDBuffer::from_buffer_layout(self.buffer.to_backend(target)?, self.layout.clone())
    }

    /// The backend handle.
    pub fn backend(&self) -> &B {
        self.buffer.backend()
    }

    /// The underlying storage (the whole buffer the view indexes into).
    pub fn buffer(&self) -> &Buffer<B> {
        &self.buffer
    }

    /// Shape, strides and offset.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The extents.
    pub fn shape(&self) -> &[usize] {
        self.layout.shape()
    }

    /// Strides in elements.
    pub fn strides(&self) -> &[isize] {
        self.layout.strides()
    }

    /// Number of axes.
    pub fn ndim(&self) -> usize {
        self.layout.ndim()
    }

    /// Number of elements.
    pub fn size(&self) -> usize {
        self.layout.size()
    }

    /// Bytes of the elements in the view.
    pub fn nbytes(&self) -> usize {
        self.size() * T::DTYPE.size()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        T::DTYPE
    }

    /// Whether the view is dense in C order.
    pub fn is_c_contiguous(&self) -> bool {
        self.layout.is_c_contiguous()
    }

    /// The storage as a [`MemRef`] (element `0` of the layout's offsets is its first byte).
    pub fn storage(&self) -> MemRef<'_, B::Memory> {
        self.buffer.memref()
    }

    fn view(&self, layout: Layout) -> Self {
        NDBuffer { buffer: self.buffer.clone(), layout, _t: PhantomData }
    }

    fn storage_len(&self) -> usize {
        self.buffer.len() / T::DTYPE.size()
    }

    /// The bytes of a C-contiguous view, as a byte range of its buffer.
    fn dense_bytes(&self) -> Option<Range<usize>> {
        let size = T::DTYPE.size();
        if self.is_c_contiguous() {
            let start = self.layout.offset() * size;
            Some(start..start + self.nbytes())
        } else {
            None
        }
    }

    /// The plan that gathers this view in C order into a buffer of `size()` elements.
    fn gather_plan(&self) -> Result<CopyPlan> {
        CopyPlan::new(vec![self.storage_len()], self.size(), Segment::from_layout(0, &self.layout, 0)?)
    }

    /// A view with the axes permuted (`None` reverses them, numpy's `.T`). No copy.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `axes` is not a permutation.
    pub fn transpose(&self, axes: Option<&[usize]>) -> Result<Self> {
        Ok(self.view(match axes {
            Some(a) => self.layout.permuted(a)?,
            None => self.layout.transposed(),
        }))
    }

    /// A sub-view (step 1 on every axis). No copy.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] / [`Error::ShapeMismatch`] for bad ranges.
    pub fn slice(&self, ranges: &[Range<usize>]) -> Result<Self> {
        Ok(self.view(self.layout.sliced(ranges)?))
    }

    /// A view with one axis reversed. No copy.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a missing axis.
    pub fn flip(&self, axis: usize) -> Result<Self> {
        Ok(self.view(self.layout.flipped(axis)?))
    }

    /// The same elements with another shape: a view when C-contiguous, else a C-order copy.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when the sizes differ.
    pub fn reshape(&self, shape: &[usize]) -> Result<Self> {
        if checked_size(shape)? != self.size() {
            return Err(Error::ShapeMismatch { expected: self.shape().to_vec(), got: shape.to_vec() });
        }
        if self.is_c_contiguous() {
            return Ok(self.view(self.layout.reshaped(shape)?));
        }
        self.copy()?.reshape(shape)
    }

    /// A new C-contiguous array with the same elements, gathered on the device in one launch.
    ///
    /// # Errors
    /// Allocation and driver errors.
    pub fn copy(&self) -> Result<Self> {
        let out = Self::empty(self.backend(), self.shape(), Order::C)?;
        if self.size() == 0 {
            return Ok(out);
        }
        let b = self.backend();
        let plan = b.prepare(&self.gather_plan()?, T::DTYPE)?;
        b.gather(b.default_stream(), &plan, &[self.storage()], out.storage())?;
        Ok(out)
    }

    /// Sets every element of the view to `value` (contiguous views by a device fill,
    /// others by one scatter).
    ///
    /// # Errors
    /// Allocation and driver errors.
    pub fn fill(&self, value: T) -> Result<()> {
        if let Some(r) = self.dense_bytes() {
            return self.buffer.slice(r)?.fill(bytemuck::bytes_of(&value));
        }
        let src = Self::create(self.backend(), &[self.size()], Order::C, Some(value))?;
        self.scatter_from(&src)
    }

    /// Writes the elements of `src` (same shape, any layout, same device) into this view.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`]; [`Error::DeviceMismatch`]; driver errors.
    pub fn copy_from(&self, src: &NDBuffer<B, T>) -> Result<()> {
        if src.shape() != self.shape() {
            return Err(Error::ShapeMismatch { expected: self.shape().to_vec(), got: src.shape().to_vec() });
        }
        if !self.backend().same_device(src.backend()) {
            return Err(Error::DeviceMismatch("copy between arrays of different devices".into()));
        }
        if self.size() == 0 {
            return Ok(());
        }
        match self.dense_bytes() {
            Some(r) if !self.buffer.overlaps(&src.buffer) => {
                let b = self.backend();
                let plan = b.prepare(&src.gather_plan()?, T::DTYPE)?;
                let dst = self.buffer.slice(r)?;
                b.gather(b.default_stream(), &plan, &[src.storage()], dst.memref())
            }
            _ => self.scatter_from(&src.copy()?),
        }
    }

    /// Scatters a dense 1-d array of `size()` elements into this view.
    fn scatter_from(&self, dense: &NDBuffer<B, T>) -> Result<()> {
        let b = self.backend();
        let plan = b.prepare(&self.gather_plan()?, T::DTYPE)?;
        b.scatter(b.default_stream(), &plan, dense.storage(), &[self.storage()])
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
    /// Driver errors.
    pub fn to_ndarray(&self) -> Result<ArrayD<T>> {
        let mut data = vec![T::default(); self.size()];
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
    /// Driver errors.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        Ok(self.to_ndarray()?.into_raw_vec_and_offset().0)
    }

    /// One element.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] / [`Error::ShapeMismatch`] for a bad index.
    pub fn get(&self, index: &[usize]) -> Result<T> {
        let at = self.layout.index_of(index)?;
        let mut v = T::default();
        self.buffer.read_into(at * T::DTYPE.size(), bytemuck::bytes_of_mut(&mut v))?;
        Ok(v)
    }

    /// Sets one element.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] / [`Error::ShapeMismatch`] for a bad index.
    pub fn set(&self, index: &[usize], value: T) -> Result<()> {
        let at = self.layout.index_of(index)?;
        self.buffer.write(at * T::DTYPE.size(), bytemuck::bytes_of(&value))
    }

    /// The single element of a one-element array (zarr's `as_scalar`).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when the array does not hold exactly one element.
    pub fn as_scalar(&self) -> Result<T> {
        if self.size() != 1 {
            return Err(Error::ShapeMismatch { expected: vec![1], got: self.shape().to_vec() });
        }
        self.get(&vec![0; self.ndim()])
    }

    /// Whether every element equals `value`; NaN equals NaN (zarr's `all_equal` with
    /// `equal_nan=True`). An empty array is all-equal.
    ///
    /// # Errors
    /// Driver errors.
    pub fn all_equal(&self, value: T) -> Result<bool> {
        Ok(self.to_ndarray()?.iter().all(|v| v.same_value(&value)))
    }
}
