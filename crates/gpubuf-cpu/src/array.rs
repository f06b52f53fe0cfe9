//! ndarray interop: borrow a CPU allocation as an `ArrayView` without copying.

use crate::memory::CpuMemory;
use gpubuf_core::{DeviceMemory, Element, Error, Layout, Result};
use ndarray::{ArrayViewD, ArrayViewMutD, Axis, IxDyn, ShapeBuilder};

/// A view re-expressed with non-negative strides: the element where it starts, its shape,
/// the absolute strides, and the axes to invert afterwards.
type Positive = (usize, Vec<usize>, Vec<usize>, Vec<usize>);

/// Checks `layout` against the allocation and returns it with non-negative strides.
fn positive<T: Element>(mem: &CpuMemory, layout: &Layout) -> Result<Positive> {
    let size = std::mem::size_of::<T>();
    if mem.len() % size != 0 {
        return Err(Error::invalid(format!(
            "allocation of {} bytes is not whole {size}-byte elements",
            mem.len()
        )));
    }
    layout.check_fits(mem.len() / size)?;
    let mut start = layout.offset() as isize;
    let mut strides = Vec::with_capacity(layout.ndim());
    let mut flips = Vec::new();
    for (ax, (&n, &s)) in layout.shape().iter().zip(layout.strides()).enumerate() {
        if s < 0 && n > 0 {
            start += (n as isize - 1) * s;
            flips.push(ax);
        }
        strides.push(s.unsigned_abs());
    }
    Ok((start.max(0) as usize, layout.shape().to_vec(), strides, flips))
}

/// Runs `f` on a zero-copy view of `layout` in `mem`, holding the allocation's lock.
///
/// # Errors
/// [`Error::OutOfBounds`] when the layout reaches outside the allocation.
pub fn with_array<T: Element, R>(
    mem: &CpuMemory,
    layout: &Layout,
    f: impl FnOnce(ArrayViewD<'_, T>) -> R,
) -> Result<R> {
    let (start, shape, strides, flips) = positive::<T>(mem, layout)?;
    Ok(mem.with_bytes(|bytes| {
        let base = bytes.as_ptr() as *const T;
        // SAFETY: `check_fits` proved every element of the view inside the allocation;
        // the allocation is aligned to 64 bytes so `T` reads are aligned; the lock is held
        // for the view's lifetime (it does not escape `f`).
        let mut view =
            unsafe { ArrayViewD::from_shape_ptr(IxDyn(&shape).strides(IxDyn(&strides)), base.add(start)) };
        for ax in flips {
            view.invert_axis(Axis(ax));
        }
        f(view)
    }))
}

/// Runs `f` on a mutable zero-copy view of `layout` in `mem`, holding the allocation's lock.
///
/// # Errors
/// [`Error::OutOfBounds`] when the layout reaches outside the allocation;
/// [`Error::InvalidArgument`] when the view addresses an element twice (zero or overlapping strides).
pub fn with_array_mut<T: Element, R>(
    mem: &CpuMemory,
    layout: &Layout,
    f: impl FnOnce(ArrayViewMutD<'_, T>) -> R,
) -> Result<R> {
    let (start, shape, strides, flips) = positive::<T>(mem, layout)?;
    if !unique_elements(&shape, &strides) {
        return Err(Error::invalid("a mutable view may not address an element twice"));
    }
    Ok(mem.with_bytes_mut(|bytes| {
        let base = bytes.as_mut_ptr() as *mut T;
        // SAFETY: as in `with_array`, plus every element is addressed once (checked above)
        // and we hold the only mutable access through the lock.
        let mut view =
            unsafe { ArrayViewMutD::from_shape_ptr(IxDyn(&shape).strides(IxDyn(&strides)), base.add(start)) };
        for ax in flips {
            view.invert_axis(Axis(ax));
        }
        f(view)
    }))
}

/// Whether non-negative strides address each element once: sorted by stride, each stride
/// must exceed the reach of all smaller ones (a sufficient condition).
fn unique_elements(shape: &[usize], strides: &[usize]) -> bool {
    let mut dims: Vec<(usize, usize)> =
        shape.iter().copied().zip(strides.iter().copied()).filter(|&(n, _)| n > 1).collect();
    dims.sort_by_key(|d| d.1);
    let mut reach = 0usize;
    for (n, s) in dims {
        if s <= reach {
            return false;
        }
        reach += (n - 1) * s;
    }
    true
}
