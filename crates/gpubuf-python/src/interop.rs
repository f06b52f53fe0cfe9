//! Host addresses and numpy's array interface for arrays on the CPU backend.
//!
//! An address handed to numpy aliases gpubuf's own allocation: the numpy side keeps the
//! `NDBuffer` (and with it the allocation, or its pool block) alive, and the caller must
//! not write through the numpy view while a gpubuf operation on the same array runs on
//! another thread (docs/python.md, "zero-copy rules").

use crate::dtype::{dispatch, numpy_dtype, AnyArray};
use crate::errors::invalid;
use pyo3::exceptions::PyAttributeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// The address of element `[0, 0, ...]` when the array is in host memory (CPU backend);
/// `None` on other backends. For an empty array, an address inside (or at the end of) its
/// allocation.
pub fn host_address(a: &AnyArray) -> Option<usize> {
    dispatch!(a, nd => {
        let memory = nd.buffer().memory();
        let base = memory.as_cpu()?.as_ptr() as usize;
        let start = base.checked_add(nd.buffer().offset())?;
        if nd.size() == 0 {
            return Some(start);
        }
        // The layout lies inside the buffer (checked when the array was made), so these
        // fit; checked all the same.
        let offset = nd.layout().offset().checked_mul(nd.dtype().size())?;
        start.checked_add(offset)
    })
}

/// The strides in bytes.
///
/// # Errors
/// `InvalidArgumentError` when a stride in bytes does not fit in an `isize`.
pub fn byte_strides(a: &AnyArray) -> PyResult<Vec<isize>> {
    // Element sizes are 1 to 8: the cast is exact.
    let item = a.dtype().size() as isize;
    a.strides()
        .iter()
        .map(|&s| s.checked_mul(item).ok_or_else(|| invalid(format!("stride {s} in bytes overflows"))))
        .collect()
}

/// numpy's `__array_interface__` (version 3) for an array on the CPU backend.
///
/// # Errors
/// `AttributeError` on other backends (so numpy and `hasattr` see no interface);
/// `InvalidArgumentError` for strides whose bytes overflow.
pub fn array_interface<'py>(py: Python<'py>, a: &AnyArray) -> PyResult<Bound<'py, PyDict>> {
    let Some(addr) = host_address(a) else {
        return Err(PyAttributeError::new_err(format!(
            "__array_interface__: the array is on the {} backend, not in host memory (use to_numpy())",
            a.device().kind().name()
        )));
    };
    let d = PyDict::new(py);
    d.set_item("version", 3)?;
    d.set_item("shape", PyTuple::new(py, a.shape())?)?;
    d.set_item("typestr", numpy_dtype(py, a.dtype()).getattr("str")?)?;
    d.set_item("data", (addr, false))?;
    d.set_item("strides", PyTuple::new(py, byte_strides(a)?)?)?;
    Ok(d)
}

/// Whether numpy can make an array of `a`'s shape and dtype: its element size times the
/// product of the non-zero extents within `isize` (numpy refuses larger ones, empty arrays
/// included, and rust-numpy does not check its refusal).
///
/// # Errors
/// `InvalidArgumentError` (a `ValueError`, as numpy's own refusal) when it cannot.
pub fn numpy_fits(a: &AnyArray) -> PyResult<()> {
    let bytes = a.shape().iter().filter(|&&n| n > 0).try_fold(a.dtype().size(), |acc, &n| acc.checked_mul(n));
    match bytes.and_then(|b| isize::try_from(b).ok()) {
        Some(_) => Ok(()),
        None => Err(invalid(format!("numpy cannot make an array of shape {:?} (too big)", a.shape()))),
    }
}
