//! [`NDBuffer`]: a typed n-d array on a device, like zarr's `NDBuffer`.

use crate::Buffer;
use gpubuf_core::{
    checked_size, Backend, CopyPlan, DType, Element, Error, Kernels, Layout, MemRef, Order, Result, Segment,
};
use std::marker::PhantomData;
use std::ops::Range;

/// A typed n-d view over a [`Buffer`]: shape, strides (elements, possibly negative) and an
/// element offset. Views (`transpose`, `slice`, `reshape` of contiguous data) share storage.
pub struct NDBuffer<B: Backend, T: Element> {
    pub(crate) buffer: Buffer<B>,
    pub(crate) layout: Layout,
    pub(crate) _t: PhantomData<T>,
}

impl<B: Backend, T: Element> Clone for NDBuffer<B, T> {
    fn clone(&self) -> Self {
        NDBuffer { buffer: self.buffer.clone(), layout: self.layout.clone(), _t: PhantomData }
    }
}

impl<B: Backend, T: Element> std::fmt::Debug for NDBuffer<B, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NDBuffer")
            .field("backend", &self.buffer.backend().kind())
            .field("dtype", &T::DTYPE)
            .field("shape", &self.layout.shape())
            .field("strides", &self.layout.strides())
            .field("offset", &self.layout.offset())
            .finish()
    }
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
        let layout = Layout::contiguous(shape, order)?;
        let bytes = nbytes_of::<T>(&layout)?;
        let buffer = Buffer::empty(backend, bytes)?;
        Ok(NDBuffer { buffer, layout, _t: PhantomData })
    }

    /// Uploads a host slice as a C-order array of `shape`.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when `data.len()` is not the size of `shape`.
    pub fn from_slice(backend: &B, shape: &[usize], data: &[T]) -> Result<Self> {
        if checked_size(shape)? != data.len() {
            return Err(Error::ShapeMismatch { expected: shape.to_vec(), got: vec![data.len()] });
        }
        let layout = Layout::contiguous(shape, Order::C)?;
        let buffer = Buffer::from_bytes(backend, crate::host::bytes_of(data))?;
        Ok(NDBuffer { buffer, layout, _t: PhantomData })
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
    /// Zero strides (broadcasts) are fine for reading; writing through them is refused.
    ///
    /// # Errors
    /// As [`NDBuffer::from_buffer`]; [`Error::InvalidArgument`] when the view's elements
    /// take more than `isize::MAX` bytes (a broadcast larger than any copy of it).
    pub fn from_buffer_layout(buffer: Buffer<B>, layout: Layout) -> Result<Self> {
        let size = T::DTYPE.size();
        if buffer.offset() % size != 0 {
            return Err(Error::invalid(format!(
                "buffer offset {} is not a multiple of the {size}-byte element",
                buffer.offset()
            )));
        }
        layout.check_fits(buffer.len() / size)?;
        nbytes_of::<T>(&layout)?;
        Ok(NDBuffer { buffer, layout, _t: PhantomData })
    }

    /// The array on `target`: zero-copy when it is this array's device (also under another
    /// handle type: a `gpubuf::Device` and the concrete backend it holds, see
    /// [`Buffer::to_backend`]), else a copy.
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

    /// Bytes of the elements in the view (every constructor keeps it at most `isize::MAX`).
    pub fn nbytes(&self) -> usize {
        self.size().saturating_mul(T::DTYPE.size())
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        T::DTYPE
    }

    /// Whether the view is dense in C order.
    pub fn is_c_contiguous(&self) -> bool {
        self.layout.is_c_contiguous()
    }

    /// What a kernel that takes `(base pointer, element offset)` needs to address this
    /// view: its allocation and the offset, in elements, of its first element there (the
    /// buffer's offset plus the layout's). The backends' `interop::view_parts` return it.
    ///
    /// Only C-contiguous views are taken (the kernel gets no strides); an empty view is
    /// accepted at any offset and gives offset `0` (its kernel must touch no element).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a view that is not C-contiguous, when the buffer's
    /// offset is not whole elements, or when the offset overflows.
    pub fn kernel_parts(&self) -> Result<(&B::Memory, u64)> {
        let size = T::DTYPE.size().max(1);
        let memory = &**self.buffer.memory();
        if self.size() == 0 {
            return Ok((memory, 0));
        }
        if !self.is_c_contiguous() {
            return Err(Error::invalid(format!(
                "a kernel view must be C-contiguous (the kernel gets no strides), this one has \
                 shape {:?} and strides {:?}: make a dense copy with NDBuffer::copy first",
                self.shape(),
                self.strides()
            )));
        }
        if self.buffer.offset() % size != 0 {
            return Err(Error::invalid(format!(
                "buffer offset {} is not a multiple of the {size}-byte element",
                self.buffer.offset()
            )));
        }
        let offset = (self.buffer.offset() / size)
            .checked_add(self.layout.offset())
            .and_then(|o| u64::try_from(o).ok())
            .ok_or_else(|| Error::invalid("view offset overflows"))?;
        Ok((memory, offset))
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

    /// The bytes of a C-contiguous view, as a byte range of its buffer (an empty range for
    /// an empty view, whatever its offset).
    pub(crate) fn dense_bytes(&self) -> Option<Range<usize>> {
        if self.size() == 0 {
            return Some(0..0);
        }
        if !self.is_c_contiguous() {
            return None;
        }
        // A non-empty view lies inside its buffer (checked at construction, kept by every
        // view operation): these products and sums are at most the buffer's length.
        let start = self.layout.offset().checked_mul(T::DTYPE.size())?;
        Some(start..start.checked_add(self.nbytes())?)
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

    /// The same elements with another shape, read and placed in `order` (numpy's
    /// `reshape(..., order=)`): [`Order::C`] is [`NDBuffer::reshape`]; [`Order::F`] walks
    /// the first axis fastest, a view when the array is F-contiguous, else a copy (the
    /// transposed C reshape of the transposed array).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when the sizes differ.
    pub fn reshape_order(&self, shape: &[usize], order: Order) -> Result<Self> {
        match order {
            Order::C => self.reshape(shape),
            Order::F => {
                let reversed: Vec<usize> = shape.iter().rev().copied().collect();
                self.transpose(None)?.reshape(&reversed)?.transpose(None)
            }
        }
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
    /// [`Error::InvalidPlan`] when the view addresses an element twice (a broadcast);
    /// allocation and driver errors.
    pub fn fill(&self, value: T) -> Result<()> {
        if let Some(r) = self.dense_bytes() {
            return self.buffer.slice(r)?.fill(bytemuck::bytes_of(&value));
        }
        // Refuse a view that writes an element twice before allocating its values.
        let plan = self.gather_plan()?;
        plan.check_scatter()?;
        let src = Self::create(self.backend(), &[self.size()], Order::C, Some(value))?;
        self.scatter_with(&plan, &src)
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
            _ => {
                // Refuse a view that writes an element twice before copying the source.
                let plan = self.gather_plan()?;
                plan.check_scatter()?;
                self.scatter_with(&plan, &src.copy()?)
            }
        }
    }

    /// Scatters `dense` into this view with `plan` (this view's [`Self::gather_plan`]).
    pub(crate) fn scatter_with(&self, plan: &CopyPlan, dense: &NDBuffer<B, T>) -> Result<()> {
        let b = self.backend();
        let plan = b.prepare(plan, T::DTYPE)?;
        b.scatter(b.default_stream(), &plan, dense.storage(), &[self.storage()])
    }

    /// One element.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] for an index past the shape, [`Error::InvalidArgument`] for one
    /// with the wrong number of axes.
    pub fn get(&self, index: &[usize]) -> Result<T> {
        let at = self.element_byte(index)?;
        let mut v = T::default();
        self.buffer.read_into(at, bytemuck::bytes_of_mut(&mut v))?;
        Ok(v)
    }

    /// Sets one element.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] for an index past the shape, [`Error::InvalidArgument`] for one
    /// with the wrong number of axes.
    pub fn set(&self, index: &[usize], value: T) -> Result<()> {
        let at = self.element_byte(index)?;
        self.buffer.write(at, bytemuck::bytes_of(&value))
    }

    /// Byte offset in the buffer of the element at `index`.
    fn element_byte(&self, index: &[usize]) -> Result<usize> {
        let at = self.layout.index_of(index)?;
        at.checked_mul(T::DTYPE.size()).ok_or_else(|| Error::OutOfBounds {
            what: "element byte offset".into(),
            start: at,
            end: usize::MAX,
            len: self.buffer.len(),
        })
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
}

/// Bytes of the elements of `layout`: at most `isize::MAX`, so that every copy of the view
/// can exist.
fn nbytes_of<T: Element>(layout: &Layout) -> Result<usize> {
    layout.size().checked_mul(T::DTYPE.size()).filter(|&n| n <= isize::MAX as usize).ok_or_else(|| {
        Error::invalid(format!("{} elements of {} take too many bytes", layout.size(), T::DTYPE))
    })
}
