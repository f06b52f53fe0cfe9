//! ndarray interop: borrow a CPU allocation as an `ArrayView` without copying.

use crate::memory::CpuMemory;
use gpubuf_core::{DeviceMemory, Element, Error, Layout, Result};
use ndarray::{ArrayViewD, ArrayViewMutD, Axis, IxDyn, ShapeBuilder};

/// A non-empty view re-expressed with non-negative strides: the element where it starts
/// (its lowest storage index), its shape, the absolute strides, and the axes to invert
/// afterwards.
type Positive = (usize, Vec<usize>, Vec<usize>, Vec<usize>);

/// Checks `layout` against the allocation; returns `None` for an empty view (it addresses
/// nothing, whatever its offset and strides), else the view with non-negative strides.
fn positive<T: Element>(mem: &CpuMemory, layout: &Layout) -> Result<Option<Positive>> {
    // Whole elements only: a trailing partial element (a byte buffer viewed as wider
    // elements) is never addressed, since the view must fit in `len / size` elements.
    let size = std::mem::size_of::<T>().max(1);
    layout.check_fits(mem.len() / size)?;
    let Some(span) = layout.span()? else { return Ok(None) };
    // The lowest element is where the view starts once every negative axis is inverted.
    // Axes of length 1 never move: stride 0 there, so no stride past isize::MAX reaches
    // ndarray (which reads strides as isize).
    let strides = layout
        .shape()
        .iter()
        .zip(layout.strides())
        .map(|(&n, s)| if n > 1 { s.unsigned_abs() } else { 0 })
        .collect();
    let flips = (0..layout.ndim()).filter(|&ax| layout.strides()[ax] < 0).collect();
    Ok(Some((span.start, layout.shape().to_vec(), strides, flips)))
}

/// Runs `f` on a zero-copy view of `layout` in `mem`, holding the allocation's lock.
///
/// # Errors
/// [`Error::OutOfBounds`] when the layout reaches outside the allocation;
/// [`Error::InvalidArgument`] when called from inside a closure that already holds `mem`
/// (see [`CpuMemory::with_bytes`]).
pub fn with_array<T: Element, R>(
    mem: &CpuMemory,
    layout: &Layout,
    f: impl FnOnce(ArrayViewD<'_, T>) -> R,
) -> Result<R> {
    let Some((start, shape, strides, flips)) = positive::<T>(mem, layout)? else {
        // Empty: no pointer is formed, but the lock is still taken, as for any view.
        let view = ArrayViewD::from_shape(IxDyn(layout.shape()), &[])
            .map_err(|e| Error::invalid(format!("empty view: {e}")))?;
        return mem.with_bytes(|_| f(view));
    };
    mem.with_bytes(|bytes| {
        let base = bytes.as_ptr() as *const T;
        // SAFETY: `check_fits` proved every element of the view inside the allocation, and
        // `start` is the view's lowest element, so `base.add(start)` stays inside it and
        // every index reached from it with the absolute strides too; every CPU allocation
        // is aligned to at least 8 bytes (64 for the backend's own, `ADOPT_ALIGN` for
        // adopted memory) and no `Element` is wider than 8 bytes, so `T` reads are aligned;
        // the lock is held for the view's lifetime (it does not escape `f`).
        let mut view =
            unsafe { ArrayViewD::from_shape_ptr(IxDyn(&shape).strides(IxDyn(&strides)), base.add(start)) };
        for ax in flips {
            view.invert_axis(Axis(ax));
        }
        f(view)
    })
}

/// Runs `f` on a mutable zero-copy view of `layout` in `mem`, holding the allocation's lock.
///
/// # Errors
/// As [`with_array`], plus [`Error::InvalidArgument`] when the view addresses an element
/// twice (zero or overlapping strides).
pub fn with_array_mut<T: Element, R>(
    mem: &CpuMemory,
    layout: &Layout,
    f: impl FnOnce(ArrayViewMutD<'_, T>) -> R,
) -> Result<R> {
    let Some((start, shape, strides, flips)) = positive::<T>(mem, layout)? else {
        let view = ArrayViewMutD::from_shape(IxDyn(layout.shape()), &mut [])
            .map_err(|e| Error::invalid(format!("empty view: {e}")))?;
        return mem.with_bytes_mut(|_| f(view));
    };
    if !unique_elements(&shape, &strides) {
        return Err(Error::invalid("a mutable view may not address an element twice"));
    }
    mem.with_bytes_mut(|bytes| {
        let base = bytes.as_mut_ptr() as *mut T;
        // SAFETY: as in `with_array`, plus every element is addressed once (checked above)
        // and we hold the only mutable access through the lock.
        let mut view =
            unsafe { ArrayViewMutD::from_shape_ptr(IxDyn(&shape).strides(IxDyn(&strides)), base.add(start)) };
        for ax in flips {
            view.invert_axis(Axis(ax));
        }
        f(view)
    })
}

/// Whether non-negative strides address each element once: sorted by stride, each stride
/// must exceed the reach of all smaller ones (a sufficient condition). The reaches of a
/// view inside its allocation sum to less than its length: the sum never saturates.
fn unique_elements(shape: &[usize], strides: &[usize]) -> bool {
    let mut dims: Vec<(usize, usize)> =
        shape.iter().copied().zip(strides.iter().copied()).filter(|&(n, _)| n > 1).collect();
    dims.sort_by_key(|d| d.1);
    let mut reach = 0usize;
    for (n, s) in dims {
        if s <= reach {
            return false;
        }
        reach = reach.saturating_add((n - 1).saturating_mul(s));
    }
    true
}
