//! What a numpy array's memory is, read from the array object: its data pointer and
//! `writeable` flag, and the bytes its elements span ([`Span`]), the numbers every
//! zero-copy path (adoption, overlap checks, aligned views) starts from. No Python class
//! and no gpubuf array here.

use gpubuf::cpu::interop::ADOPT_ALIGN;
use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;

/// Where an adoptable array's elements lie: the span's first byte, its length in bytes,
/// the element strides and the offset (in elements) of element `[0, ..., 0]` in the span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    /// First byte of the span.
    pub base: usize,
    /// Bytes from the lowest to the end of the highest addressed element.
    pub len: usize,
    /// Strides in elements.
    pub strides: Vec<isize>,
    /// Element offset of `[0, ..., 0]` from `base`.
    pub offset: usize,
}

/// The span of an array with data pointer `data`, `shape`, byte `strides` and `item`
/// bytes per element; `None` when it cannot be adopted by the CPU backend (empty, strides
/// not whole elements, not on an [`ADOPT_ALIGN`] boundary, or arithmetic that does not
/// fit).
pub fn span(data: usize, shape: &[usize], strides: &[isize], item: usize) -> Option<Span> {
    span_unaligned(data, shape, strides, item).filter(|s| s.base % ADOPT_ALIGN == 0)
}

/// [`span`] without the alignment rule (device memory adopted by the CUDA backend).
pub fn span_unaligned(data: usize, shape: &[usize], strides: &[isize], item: usize) -> Option<Span> {
    if shape.contains(&0) || shape.len() != strides.len() || item == 0 {
        return None;
    }
    let item_i = i128::try_from(item).ok()?;
    let elems = strides
        .iter()
        .map(|&s| (s as i128 % item_i == 0).then(|| isize::try_from(s as i128 / item_i).ok()).flatten())
        .collect::<Option<Vec<isize>>>()?;
    let (base, len, low) = extent(data, shape, strides, item)?;
    let offset = usize::try_from(-low / item_i).ok()?;
    Some(Span { base, len, strides: elems, offset })
}

/// The bytes a non-empty array's elements lie in: `(first byte, length, low)` where `low`
/// (at most 0) is the first byte's distance from element `[0, ..., 0]`; `None` when a
/// number does not fit or the range passes the end of the address space.
fn extent(data: usize, shape: &[usize], strides: &[isize], item: usize) -> Option<(usize, usize, i128)> {
    let (mut low, mut high) = (0i128, 0i128);
    for (&n, &s) in shape.iter().zip(strides) {
        let reach = i128::try_from(s).ok()?.checked_mul(i128::try_from(n).ok()? - 1)?;
        if reach < 0 {
            low = low.checked_add(reach)?;
        } else {
            high = high.checked_add(reach)?;
        }
    }
    let start = i128::try_from(data).ok()?.checked_add(low)?;
    let len = high.checked_sub(low)?.checked_add(i128::try_from(item).ok()?)?;
    let (start, len) = (usize::try_from(start).ok()?, usize::try_from(len).ok()?);
    start.checked_add(len)?;
    Some((start, len, low))
}

/// The address of a numpy array's element `[0, ..., 0]` (numpy's `ctypes.data`, read
/// from the array object without building a ctypes object: this runs for every quantity
/// of every halo call).
pub fn data_ptr(arr: &Bound<'_, PyUntypedArray>) -> usize {
    // SAFETY: `as_array_ptr` points to the live array object `arr` holds a reference to,
    // and `_PyArray_GET_ITEM_DATA` to its fields (as rust-numpy's own `data()` reads them);
    // `data` is a plain pointer value numpy set at creation, read under the GIL.
    unsafe { (*numpy::npyffi::_PyArray_GET_ITEM_DATA(arr.as_array_ptr())).data as usize }
}

/// numpy's `writeable` flag of an array, read from the array object (`arr.flags.writeable`
/// without building a flags object).
pub fn writeable(arr: &Bound<'_, PyUntypedArray>) -> bool {
    // SAFETY: as in `data_ptr`: a read of the live array's `flags` field under the GIL
    // (rust-numpy reads the same field to check writeability).
    let flags = unsafe { (*numpy::npyffi::_PyArray_GET_ITEM_DATA(arr.as_array_ptr())).flags };
    flags & numpy::npyffi::NPY_ARRAY_WRITEABLE != 0
}

/// The span of a numpy array, when it may be adopted (`contiguous_only`: C-contiguous
/// arrays only).
///
/// # Errors
/// Python errors reading the array's flags or data pointer.
pub fn numpy_span(arr: &Bound<'_, PyUntypedArray>, contiguous_only: bool) -> PyResult<Option<Span>> {
    if contiguous_only && !arr.is_c_contiguous() {
        return Ok(None);
    }
    if !writeable(arr) {
        return Ok(None);
    }
    let data = data_ptr(arr);
    let item = numpy::PyArrayDescrMethods::itemsize(&arr.dtype());
    Ok(span(data, arr.shape(), arr.strides(), item))
}

/// The bytes the elements of a numpy array with data pointer `data`, `shape`, byte
/// `strides` and `item` bytes per element lie in, as `(first byte, length)`; `None` when
/// it has no element. Strides need not be whole elements. Numbers that do not fit (no
/// numpy array has them) give the whole address space, so that a caller copies.
pub fn byte_extent(data: usize, shape: &[usize], strides: &[isize], item: usize) -> Option<(usize, usize)> {
    if shape.contains(&0) {
        return None;
    }
    Some(extent(data, shape, strides, item).map_or((0, usize::MAX), |(start, len, _)| (start, len)))
}
