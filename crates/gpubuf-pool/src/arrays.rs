//! `NDBuffer` constructors backed by a [`MemoryPool`], after pyopencl's
//! `empty(queue, shape, dtype, allocator=pool)`.

use crate::{DeferredAllocator, ImmediateAllocator, MemoryPool};
use gpubuf_buffer::ndarray::{ArrayView, Dimension, IxDyn};
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{Allocator, Backend, Element, Error, Kernels, Layout, Order, Result};
use std::any::Any;

/// The backend a pool allocates from, when the allocator is one (or wraps one in
/// [`ImmediateAllocator`] / [`DeferredAllocator`]) of `backend`'s type.
fn allocating_backend<A: 'static, B: Backend>(allocator: &A) -> Option<&B> {
    let any: &dyn Any = allocator;
    any.downcast_ref::<B>()
        .or_else(|| any.downcast_ref::<ImmediateAllocator<B>>().map(|a| &a.0))
        .or_else(|| any.downcast_ref::<DeferredAllocator<B>>().map(|a| &a.0))
}

/// The contiguous layout of `shape` in `order` and its size in bytes of `T`.
fn sized<T: Element>(shape: &[usize], order: Order) -> Result<(Layout, usize)> {
    let layout = Layout::contiguous(shape, order)?;
    let bytes = layout.size().checked_mul(T::DTYPE.size()).ok_or_else(|| {
        Error::invalid(format!("shape {shape:?} of {} holds more than usize::MAX bytes", T::DTYPE))
    })?;
    Ok((layout, bytes))
}

impl<A: Allocator + 'static> MemoryPool<A> {
    /// A C- or F-order array of `shape` in a block of this pool, **uninitialised**: a block
    /// the pool reuses still holds whatever its last user wrote (pyopencl's `empty`).
    /// Use [`MemoryPool::zeros`], [`MemoryPool::full`], [`MemoryPool::from_slice`] or
    /// [`MemoryPool::from_ndarray`] for defined contents.
    ///
    /// The block is taken for the backend's default stream (where `NDBuffer` operations
    /// run, see [`MemoryPool::allocate_on`]) and returns to the pool when the last view of
    /// the array drops.
    ///
    /// ```
    /// use gpubuf_buffer::NDBuffer;
    /// use gpubuf_core::Order;
    /// use gpubuf_cpu::CpuBackend;
    /// use gpubuf_pool::MemoryPool;
    ///
    /// let cpu = CpuBackend::new();
    /// let pool = MemoryPool::new(cpu.clone());
    /// let a: NDBuffer<_, f64> = pool.empty(&cpu, &[48, 48, 10], Order::C)?;
    /// a.fill(1.0)?; // contents were unspecified until now
    /// let b = pool.zeros::<_, f32>(&cpu, &[100])?; // zeroed, from the same pool
    /// assert_eq!(pool.active_blocks(), 2);
    /// assert!(b.all_equal(0.0)?);
    /// # Ok::<(), gpubuf_core::Error>(())
    /// ```
    ///
    /// `backend` must be the device the pool allocates on: when the pool's allocator is a
    /// backend of `B`'s type (or one wrapped in [`ImmediateAllocator`] or
    /// [`DeferredAllocator`]), another device is refused; an allocator of any other type
    /// cannot be compared, and the caller must pair them.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the shape's size or byte count overflows;
    /// [`Error::DeviceMismatch`] when `backend` is another device than the pool's (nothing
    /// is allocated then); the pool's allocation errors ([`Error::OutOfMemory`] with its
    /// statistics).
    pub fn empty<B, T>(&self, backend: &B, shape: &[usize], order: Order) -> Result<NDBuffer<B, T>>
    where
        B: Kernels<Memory = A::Memory>,
        T: Element,
    {
        let (layout, bytes) = sized::<T>(shape, order)?;
        if allocating_backend::<A, B>(self.allocator()).is_some_and(|own| !own.same_device(backend)) {
            return Err(Error::DeviceMismatch(
                "the pool allocates on another device than the backend the array is for".into(),
            ));
        }
        let block = self.allocate_on(bytes, backend, backend.default_stream())?;
        NDBuffer::from_buffer_layout(block.into_buffer(backend)?, layout)
    }

    /// A C-order array of `shape` from this pool, every element zero.
    ///
    /// # Errors
    /// As [`MemoryPool::empty`]; driver errors from the fill (the block is returned then).
    pub fn zeros<B, T>(&self, backend: &B, shape: &[usize]) -> Result<NDBuffer<B, T>>
    where
        B: Kernels<Memory = A::Memory>,
        T: Element,
    {
        let a: NDBuffer<B, T> = self.empty(backend, shape, Order::C)?;
        a.buffer().fill(&[0])?;
        Ok(a)
    }

    /// A C-order array of `shape` from this pool, every element `value`.
    ///
    /// # Errors
    /// As [`MemoryPool::zeros`].
    pub fn full<B, T>(&self, backend: &B, shape: &[usize], value: T) -> Result<NDBuffer<B, T>>
    where
        B: Kernels<Memory = A::Memory>,
        T: Element,
    {
        let a: NDBuffer<B, T> = self.empty(backend, shape, Order::C)?;
        a.fill(value)?;
        Ok(a)
    }

    /// A C-order array of `shape` from this pool holding `data`.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] (shape and element count) when `data.len()` is not the
    /// size of `shape`, checked before anything is allocated; as [`MemoryPool::empty`].
    pub fn from_slice<B, T>(&self, backend: &B, shape: &[usize], data: &[T]) -> Result<NDBuffer<B, T>>
    where
        B: Kernels<Memory = A::Memory>,
        T: Element,
    {
        let size = gpubuf_core::checked_size(shape)?;
        if size != data.len() {
            return Err(Error::ShapeMismatch { expected: shape.to_vec(), got: vec![data.len()] });
        }
        let view = ArrayView::from_shape(IxDyn(shape), data)?;
        let a: NDBuffer<B, T> = self.empty(backend, shape, Order::C)?;
        a.write_ndarray(view)?;
        Ok(a)
    }

    /// An array from this pool holding a copy of any ndarray view (C order; strided,
    /// flipped and broadcast views are gathered on the host first).
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when a non-contiguous view's elements do not fit in host
    /// memory; as [`MemoryPool::from_slice`].
    pub fn from_ndarray<B, T, D>(&self, backend: &B, view: ArrayView<'_, T, D>) -> Result<NDBuffer<B, T>>
    where
        B: Kernels<Memory = A::Memory>,
        T: Element,
        D: Dimension,
    {
        let shape = view.shape().to_vec();
        if let Some(s) = view.as_slice() {
            return self.from_slice(backend, &shape, s);
        }
        self.from_slice(backend, &shape, &gpubuf_buffer::c_order_vec(&view)?)
    }
}
