//! What a numpy array's memory is, read from the array object: its data pointer and
//! `writeable` flag, and the bytes its elements span ([`Span`]), the numbers every
//! zero-copy path (adoption, overlap checks, aligned views) starts from. No Python class
//! and no gpubuf array here.

pub use gpubuf::cpu::span::{byte_extent, span, span_unaligned, Span};
use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;

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
