//! ndarray interop: borrow CPU memory as an `ArrayView` without copying.

use crate::borrow::Mode;
use crate::memory::CpuMemory;
use crate::CpuBackend;
use gpubuf_buffer::Buffer;
use gpubuf_core::{DeviceMemory, Element, Error, Layout, Result};
use ndarray::{ArrayViewD, ArrayViewMutD, Axis, IxDyn, ShapeBuilder};
use std::ops::Range;

mod sealed {
    use crate::memory::CpuMemory;

    /// The bytes a view may address: the allocation, and the byte range of it.
    pub trait Region {
        /// The allocation, the region's first byte in it and the region's length in bytes.
        fn region(&self) -> (&CpuMemory, usize, usize);
    }
}

/// CPU memory that [`with_array`] and [`with_array_mut`] can lend to ndarray, and where
/// their layout is measured from:
///
/// * a [`Buffer`] on the CPU backend: from the buffer's first byte, and the view must stay
///   inside the buffer (a pool block, a slice of a larger allocation);
/// * a whole [`CpuMemory`] allocation: from the allocation's first byte.
///
/// The `Arc<CpuMemory>` of a buffer (`buffer.memory()`) is deliberately not accepted: it
/// is the whole allocation, and a layout meant for the buffer would be measured from the
/// wrong byte whenever the buffer does not start the allocation. For an `NDBuffer`, use
/// [`CpuView`](crate::CpuView) (`nd.view(|a| ..)`), which applies its own layout.
///
/// ```compile_fail
/// # use gpubuf_buffer::NDBuffer;
/// # use gpubuf_cpu::{with_array_mut, CpuBackend};
/// # let cpu = CpuBackend::new();
/// # let b = NDBuffer::<_, f64>::zeros(&cpu, &[4]).unwrap();
/// // The allocation, not the buffer: refused at compile time.
/// with_array_mut::<f64, _>(b.buffer().memory(), b.layout(), |mut a| a *= 2.0);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be viewed as an ndarray: pass the `Buffer` (`nd.buffer()`), not its memory",
    note = "`buffer.memory()` is the whole allocation and ignores the buffer's offset; for an NDBuffer, \
            `use gpubuf::cpu::CpuView` and call `nd.view(|a| ..)` / `nd.view_mut(|a| ..)`"
)]
pub trait CpuStorage: sealed::Region {}

impl sealed::Region for CpuMemory {
    fn region(&self) -> (&CpuMemory, usize, usize) {
        (self, 0, self.len())
    }
}
impl CpuStorage for CpuMemory {}

impl sealed::Region for Buffer<CpuBackend> {
    fn region(&self) -> (&CpuMemory, usize, usize) {
        (self.memory(), self.offset(), self.len())
    }
}
impl CpuStorage for Buffer<CpuBackend> {}

/// A non-empty view re-expressed with non-negative strides: the elements it spans (from its
/// lowest storage index to one past its highest, counted from the allocation's start), its
/// shape, the absolute strides, and the axes to invert afterwards.
type Positive = (Range<usize>, Vec<usize>, Vec<usize>, Vec<usize>);

/// Checks `layout` against the region (`start` bytes into the allocation, `len` bytes
/// long); returns `None` for an empty view (it addresses nothing, whatever its offset and
/// strides), else the view with non-negative strides, its span counted from the
/// allocation's start.
fn positive<T: Element>(start: usize, len: usize, layout: &Layout) -> Result<Option<Positive>> {
    // Whole elements only: a trailing partial element (a byte buffer viewed as wider
    // elements) is never addressed, since the view must fit in `len / size` elements.
    let size = std::mem::size_of::<T>().max(1);
    if start % size != 0 {
        return Err(Error::invalid(format!(
            "buffer offset {start} is not a multiple of the {size}-byte element"
        )));
    }
    layout.check_fits(len / size)?;
    let Some(span) = layout.span()? else { return Ok(None) };
    // Inside the region, which lies inside its allocation: no overflow.
    let elements = start / size + span.start..start / size + span.end;
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
    Ok(Some((elements, layout.shape().to_vec(), strides, flips)))
}

/// Runs `f` on a zero-copy view of `layout` in `storage` (a [`Buffer`], the layout measured
/// from its first byte, or a whole [`CpuMemory`]), with the bytes the view spans (from its
/// lowest element to its highest) borrowed for reading. Views of other bytes of the same
/// allocation (another array of a pool segment, a disjoint slice) may be taken meanwhile,
/// mutable ones too, from inside `f` or from other threads.
///
/// For an `NDBuffer`, [`CpuView::view`](crate::CpuView::view) does this with its own
/// layout.
///
/// ```
/// use gpubuf_buffer::Buffer;
/// use gpubuf_core::{Layout, Order};
/// use gpubuf_cpu::{with_array, CpuBackend};
///
/// let cpu = CpuBackend::new();
/// let bytes: Vec<u8> = (0..8i32).flat_map(|v| v.to_le_bytes()).collect();
/// let second_half = Buffer::from_bytes(&cpu, &bytes)?.slice(16..32)?;
/// let l = Layout::contiguous(&[2, 2], Order::C)?;
/// // Measured from the buffer's first byte: elements 4..8 of the allocation.
/// assert_eq!(with_array::<i32, _>(&second_half, &l, |a| a.sum())?, 4 + 5 + 6 + 7);
/// # Ok::<(), gpubuf_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::OutOfBounds`] when the layout reaches outside the buffer (or allocation);
/// [`Error::InvalidArgument`] when the buffer's offset is not whole elements; when called
/// from inside a closure that holds a write borrow of any byte the view spans; or when
/// another thread holds one and this thread holds bytes ordered after the view's first
/// byte, so that waiting could deadlock (see [`CpuMemory::with_bytes`]). Otherwise a
/// conflicting borrow of another thread is waited for.
pub fn with_array<T: Element, R>(
    storage: &(impl CpuStorage + ?Sized),
    layout: &Layout,
    f: impl FnOnce(ArrayViewD<'_, T>) -> R,
) -> Result<R> {
    let (mem, offset, len) = storage.region();
    let Some((elements, shape, strides, flips)) = positive::<T>(offset, len, layout)? else {
        // Empty: no pointer is formed and no byte is borrowed.
        let view = ArrayViewD::from_shape(IxDyn(layout.shape()), &[])
            .map_err(|e| Error::invalid(format!("empty view: {e}")))?;
        return Ok(f(view));
    };
    let size = std::mem::size_of::<T>().max(1);
    // Inside the allocation (checked by `positive`): no overflow.
    let (first, last) = (elements.start * size, elements.end * size);
    let _borrow = mem.borrow(first, last - first, Mode::Shared)?;
    let base = mem.as_ptr() as *const T;
    // SAFETY: `check_fits` proved every element of the view inside the region, which lies
    // inside the allocation (a `Buffer`'s range is checked when it is made), and
    // `elements.start` is the view's lowest element counted from the allocation's first
    // byte (the region's offset is whole elements), so `base.add(elements.start)` stays
    // inside it and every index reached from it with the absolute strides lies in
    // `elements`; every CPU allocation is aligned to at least 8 bytes (64 for the backend's
    // own, `ADOPT_ALIGN` for adopted memory) and no `Element` is wider than 8 bytes, so `T`
    // reads are aligned; the bytes of `elements` are borrowed for reading until `_borrow`
    // drops, after `f`, so no writer touches them while the view (which does not escape
    // `f`) lives. The pointer comes from the allocation itself, not from a slice of other
    // bytes, so views of disjoint ranges held elsewhere do not alias it.
    let mut view = unsafe {
        ArrayViewD::from_shape_ptr(IxDyn(&shape).strides(IxDyn(&strides)), base.add(elements.start))
    };
    for ax in flips {
        view.invert_axis(Axis(ax));
    }
    Ok(f(view))
}

/// Runs `f` on a mutable zero-copy view of `layout` in `storage` (as in [`with_array`]),
/// with the bytes the view spans borrowed for writing: no other view or operation reaches
/// them meanwhile, while the allocation's other bytes stay free to borrow.
///
/// # Errors
/// As [`with_array`], plus [`Error::InvalidArgument`] when the view addresses an element
/// twice (zero or overlapping strides); the borrow conflicts of [`with_array`] count any
/// borrow (read or write) of a byte the view spans.
pub fn with_array_mut<T: Element, R>(
    storage: &(impl CpuStorage + ?Sized),
    layout: &Layout,
    f: impl FnOnce(ArrayViewMutD<'_, T>) -> R,
) -> Result<R> {
    let (mem, offset, len) = storage.region();
    let Some((elements, shape, strides, flips)) = positive::<T>(offset, len, layout)? else {
        let view = ArrayViewMutD::from_shape(IxDyn(layout.shape()), &mut [])
            .map_err(|e| Error::invalid(format!("empty view: {e}")))?;
        return Ok(f(view));
    };
    if !unique_elements(&shape, &strides) {
        return Err(Error::invalid("a mutable view may not address an element twice"));
    }
    let size = std::mem::size_of::<T>().max(1);
    let (first, last) = (elements.start * size, elements.end * size);
    let _borrow = mem.borrow(first, last - first, Mode::Exclusive)?;
    let base = mem.as_ptr() as *mut T;
    // SAFETY: as in `with_array`, plus every element is addressed once (checked above) and
    // the bytes of `elements` are borrowed for writing until `_borrow` drops: no other
    // reference or operation, on any thread, reaches them while the view lives.
    let mut view = unsafe {
        ArrayViewMutD::from_shape_ptr(IxDyn(&shape).strides(IxDyn(&strides)), base.add(elements.start))
    };
    for ax in flips {
        view.invert_axis(Axis(ax));
    }
    Ok(f(view))
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
