//! Native bridges of the CPU backend: ndarray views of [`NDBuffer`]s without a copy, and
//! host memory (`Vec<T>`, ndarray `Array`) adopted as gpubuf memory without a copy.
//!
//! # Contracts
//! * **Views** ([`view`], [`view_mut`]) run a closure while the bytes the view spans are
//!   borrowed, for reading or for writing (see [`CpuMemory::with_bytes`]): the view cannot
//!   outlive the closure, and a backend call from inside it that would write those bytes
//!   (or, from a mutable view, touch them at all) fails with [`Error::InvalidArgument`]
//!   instead of aliasing the view. The buffer's own byte offset is applied, so two arrays
//!   carved from one allocation (a pool segment) each see, and borrow, their own elements:
//!   reading one while writing the other, nested or from two threads, works.
//! * **Adoption** ([`adopt_vec`], [`adopt_array`]) takes ownership: the `Vec`'s allocation
//!   becomes the [`CpuMemory`] and is freed exactly once, with the `Vec`'s own layout, when
//!   the last view of the returned array drops. CPU kernels read elements of up to
//!   [`ADOPT_ALIGN`] bytes at element-aligned offsets, so an allocation is adopted when its
//!   address is a multiple of [`ADOPT_ALIGN`] (every `Vec` of 8-byte elements, and every
//!   `Vec` from the system allocator on 64-bit Linux, macOS and Windows); otherwise it is
//!   copied once into a fresh 64-byte aligned allocation ([`is_adoptable`] tells which).
//!   gpubuf's own allocations are 64-byte aligned for cache lines: adopted ones may be
//!   slower, never wrong.
//! * The CPU backend runs work at submission, so adopted memory brings no ordering to join.
//!
//! The CPU's "user kernel" is a closure over views; [`par_chunks_mut`] splits an output
//! view along an axis over rayon.

use crate::memory::CpuMemory;
use crate::{with_array, with_array_mut, CpuBackend};
use gpubuf_buffer::{Buffer, NDBuffer};
use gpubuf_core::{checked_size, Element, Error, Layout, Result};
use ndarray::{Array, ArrayViewD, ArrayViewMutD, Axis, Dimension};
use rayon::prelude::*;
use std::mem::{size_of, ManuallyDrop};
use std::ptr::NonNull;

/// The address alignment an adopted allocation needs (the largest element alignment a
/// CPU kernel relies on).
pub const ADOPT_ALIGN: usize = 8;

/// The layout to view: `nd`'s own, or for an empty view (which addresses nothing, whatever
/// its offset and strides) one with no offset, so that it never fails to fit.
fn viewed<T: Element>(nd: &NDBuffer<CpuBackend, T>) -> Result<Layout> {
    if nd.layout().size() == 0 {
        return Layout::new(nd.shape().to_vec(), vec![0; nd.ndim()], 0);
    }
    Ok(nd.layout().clone())
}

/// Runs `f` on a zero-copy ndarray view of `nd` (strides, flips and offsets as in `nd`).
///
/// ```
/// use gpubuf_buffer::NDBuffer;
/// use gpubuf_cpu::{interop, CpuBackend};
///
/// let cpu = CpuBackend::new();
/// let a = NDBuffer::<_, i32>::from_slice(&cpu, &[2, 3], &[1, 2, 3, 4, 5, 6])?;
/// let col_sums = interop::view(&a.transpose(None)?, |v| v.sum_axis(ndarray::Axis(1)))?;
/// assert_eq!(col_sums.iter().copied().collect::<Vec<_>>(), vec![5, 7, 9]);
/// # Ok::<(), gpubuf_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::InvalidArgument`] when the buffer's offset is not whole elements, or when called
/// from inside a closure that holds a write borrow of bytes this view spans (a `view_mut`
/// of an overlapping array); [`Error::OutOfBounds`] when the layout leaves the buffer.
pub fn view<T: Element, R>(
    nd: &NDBuffer<CpuBackend, T>,
    f: impl FnOnce(ArrayViewD<'_, T>) -> R,
) -> Result<R> {
    with_array(nd.buffer(), &viewed(nd)?, f)
}

/// Runs `f` on a mutable zero-copy ndarray view of `nd`.
///
/// # Errors
/// As [`view`], plus [`Error::InvalidArgument`] when the view addresses an element twice
/// (a broadcast), or when called from inside a closure that holds any borrow of bytes this
/// view spans (a read view of the same or an overlapping array).
pub fn view_mut<T: Element, R>(
    nd: &NDBuffer<CpuBackend, T>,
    f: impl FnOnce(ArrayViewMutD<'_, T>) -> R,
) -> Result<R> {
    with_array_mut(nd.buffer(), &viewed(nd)?, f)
}

/// Whether [`adopt_vec`] would take `data`'s allocation without copying it.
pub fn is_adoptable<T>(data: &[T]) -> bool {
    !data.is_empty() && size_of::<T>() > 0 && (data.as_ptr() as usize) % ADOPT_ALIGN == 0
}

/// The `Vec`'s pointer, carried to the thread that frees it.
struct VecPtr<T>(*mut T);

// SAFETY: the pointer is only used once, by the release closure, to rebuild and free the
// `Vec` that was handed over; `T: Element` is `Send + Sync` plain data.
unsafe impl<T: Element> Send for VecPtr<T> {}
// SAFETY: as above; shared references to it do nothing.
unsafe impl<T: Element> Sync for VecPtr<T> {}

impl<T> VecPtr<T> {
    /// The pointer (a method, so the closure captures the whole `Send` wrapper).
    fn get(&self) -> *mut T {
        self.0
    }
}

/// The whole of `data` as a buffer: its own allocation when adoptable, else a copy.
fn adopt_buffer<T: Element>(cpu: &CpuBackend, data: Vec<T>) -> Result<Buffer<CpuBackend>> {
    if !is_adoptable(&data) {
        return Buffer::from_bytes(cpu, bytemuck::cast_slice(&data));
    }
    let mut data = ManuallyDrop::new(data);
    let (ptr, len, cap) = (data.as_mut_ptr(), data.len(), data.capacity());
    // A Vec never holds more than isize::MAX bytes: this product does not overflow.
    let bytes = len * size_of::<T>();
    let base = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| Error::invalid("null Vec pointer"))?;
    let owned = VecPtr(ptr);
    let release = Box::new(move || {
        // SAFETY: `owned`, `cap` come from the `Vec` handed over above, which was never
        // dropped (ManuallyDrop); this closure runs once (CpuMemory's drop). Length 0: the
        // elements are plain data with nothing to drop.
        drop(unsafe { Vec::from_raw_parts(owned.get(), 0, cap) });
    });
    // SAFETY: the pointer is aligned to ADOPT_ALIGN (is_adoptable) and valid for `bytes`
    // bytes of initialised plain data until `release` frees it; the Vec was consumed, so
    // nothing else reaches those bytes.
    let memory = unsafe { CpuMemory::adopted(base, bytes, release) };
    Ok(Buffer::from_memory(cpu, memory))
}

/// Adopts `data` as a C-order array of `shape`, without a copy when [`is_adoptable`].
///
/// ```
/// use gpubuf_cpu::{interop, CpuBackend};
///
/// let cpu = CpuBackend::new();
/// let a = interop::adopt_vec(&cpu, vec![1.0f64, 2.0, 3.0, 4.0], &[2, 2])?;
/// assert_eq!(a.transpose(None)?.to_vec()?, vec![1.0, 3.0, 2.0, 4.0]);
/// # Ok::<(), gpubuf_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::ShapeMismatch`] when `data.len()` is not the size of `shape` (`data` is dropped
/// then); allocation errors when it must be copied.
pub fn adopt_vec<T: Element>(
    cpu: &CpuBackend,
    data: Vec<T>,
    shape: &[usize],
) -> Result<NDBuffer<CpuBackend, T>> {
    if checked_size(shape)? != data.len() {
        return Err(Error::ShapeMismatch { expected: shape.to_vec(), got: vec![data.len()] });
    }
    let layout = Layout::contiguous(shape, gpubuf_core::Order::C)?;
    NDBuffer::from_buffer_layout(adopt_buffer(cpu, data)?, layout)
}

/// Adopts an owned ndarray array with its strides (negative ones included) and offset,
/// without a copy when its allocation [`is_adoptable`].
///
/// # Errors
/// [`Error::InvalidArgument`] when its layout cannot be described (never for an array
/// ndarray built); allocation errors when it must be copied.
pub fn adopt_array<T: Element, D: Dimension>(
    cpu: &CpuBackend,
    array: Array<T, D>,
) -> Result<NDBuffer<CpuBackend, T>> {
    let shape = array.shape().to_vec();
    let strides = array.strides().to_vec();
    let (data, offset) = array.into_raw_vec_and_offset();
    let layout = Layout::new(shape, strides, offset.unwrap_or(0))?;
    NDBuffer::from_buffer_layout(adopt_buffer(cpu, data)?, layout)
}

/// The CPU's user kernel: runs `f(first, chunk)` over rayon for consecutive chunks of
/// `chunk` indices along `axis` of `out` (the last one may be shorter), `first` being the
/// chunk's first index along `axis`. Use it inside [`view_mut`]. The rayon workers get
/// the calling thread's borrows lent: from inside `f`, a backend call that conflicts with
/// a borrow the caller holds (the arrays being viewed) is the same re-entrancy error as on
/// the calling thread, never a wait on a borrow that cannot be released.
///
/// ```
/// use gpubuf_buffer::NDBuffer;
/// use gpubuf_cpu::{interop, CpuBackend};
/// use ndarray::Axis;
///
/// let cpu = CpuBackend::new();
/// let a = interop::adopt_vec(&cpu, (0..12u8).map(f32::from).collect(), &[3, 4])?; // no copy
/// let out = NDBuffer::<_, f32>::zeros(&cpu, &[3, 4])?;
/// interop::view(&a, |x| {
///     interop::view_mut(&out, |o| {
///         interop::par_chunks_mut(o, 0, 1, |i, mut rows| {
///             rows.assign(&(&x.slice_axis(Axis(0), (i..i + 1).into()) * 2.0))
///         })
///     })
/// })???;
/// assert_eq!(out.get(&[2, 3])?, 22.0);
/// # Ok::<(), gpubuf_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::InvalidArgument`] when `axis` is out of range or `chunk` is zero.
pub fn par_chunks_mut<T: Element>(
    mut out: ArrayViewMutD<'_, T>,
    axis: usize,
    chunk: usize,
    f: impl Fn(usize, ArrayViewMutD<'_, T>) + Sync,
) -> Result<()> {
    if axis >= out.ndim() || chunk == 0 {
        return Err(Error::invalid(format!(
            "par_chunks_mut: axis {axis} of {} axes, chunk {chunk} (must be positive)",
            out.ndim()
        )));
    }
    let parts: Vec<_> = out.axis_chunks_iter_mut(Axis(axis), chunk).enumerate().collect();
    // Sequential under Miri, as the copy kernels (`kernels::PARALLEL`).
    if crate::kernels::PARALLEL {
        // The workers run on behalf of this thread, which holds the view's borrow while it
        // waits for them: they get its borrows lent, so a closure that calls back into the
        // same bytes gets the re-entrancy error instead of waiting for ever.
        let held = crate::borrow::held_now();
        parts.into_par_iter().for_each(|(k, part)| crate::borrow::lending(&held, || f(k * chunk, part)));
    } else {
        parts.into_iter().for_each(|(k, part)| f(k * chunk, part));
    }
    Ok(())
}
