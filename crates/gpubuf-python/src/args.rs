//! Python arguments that are numbers: shapes (an int or a sequence of ints) and axes
//! (numpy's negative axes counted from the end), checked before they reach gpubuf.

use crate::errors::invalid;
use pyo3::prelude::*;

/// A shape from an int or a sequence of ints.
///
/// # Errors
/// `InvalidArgumentError` for a negative or non-integer extent.
pub fn shape_arg(obj: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    if let Ok(n) = obj.extract::<i128>() {
        return Ok(vec![extent(n)?]);
    }
    let items: Vec<Bound<'_, PyAny>> =
        obj.extract().map_err(|_| invalid("a shape is an int or a sequence of ints"))?;
    items
        .iter()
        .map(|i| extent(i.extract::<i128>().map_err(|_| invalid("a shape is an int or a sequence of ints"))?))
        .collect()
}

fn extent(n: i128) -> PyResult<usize> {
    usize::try_from(n).map_err(|_| invalid(format!("extent {n} is negative or does not fit in memory")))
}

/// Axes as numpy takes them: a sequence of ints, `-ndim..ndim` (negative ones counted
/// from the end).
///
/// # Errors
/// `InvalidArgumentError` for anything else.
pub fn axes_arg(obj: &Bound<'_, PyAny>, ndim: usize) -> PyResult<Vec<usize>> {
    let bad = || invalid(format!("axes are a sequence of ints in -{ndim}..{ndim}"));
    let items: Vec<i128> = obj.extract().map_err(|_| bad())?;
    let n = i128::try_from(ndim).map_err(|_| bad())?;
    items
        .into_iter()
        .map(|a| usize::try_from(if a < 0 { a + n } else { a }).ok().filter(|&a| a < ndim).ok_or_else(bad))
        .collect()
}

/// A byte count from Python: an int in ``0..2**64`` that fits this machine.
///
/// # Errors
/// `InvalidArgumentError` for anything else (a negative size among them).
pub fn bytes_arg(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    // The common case in one C call (the pool's hit path); anything else (negative, huge,
    // not an int) takes the path that names it.
    if let Ok(n) = obj.extract::<u64>() {
        if let Ok(n) = usize::try_from(n) {
            return Ok(n);
        }
    }
    let py = obj.py();
    let n: i128 = obj.extract().map_err(|e: PyErr| {
        if e.is_instance_of::<pyo3::exceptions::PyOverflowError>(py) {
            crate::errors::invalid("the size is above this machine's address space")
        } else if e.is_instance_of::<pyo3::exceptions::PyTypeError>(py) {
            crate::errors::invalid("a size in bytes is an int")
        } else {
            e // raised by the object's own `__index__`: the caller's error, kept
        }
    })?;
    usize::try_from(n).map_err(|_| {
        crate::errors::invalid(format!("size {n} is negative or above this machine's address space"))
    })
}
