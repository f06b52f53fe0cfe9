//! Reshapes, dtype views and transposes of `gpubuf.NDBuffer` (`reshape` with a `-1`
//! extent, `view(dtype)`, `transpose` axes; numpy's rules), as zarr's codecs use them on
//! the arrays they encode.

use crate::dtype::{dispatch, AnyArray, Wrap};
use crate::errors::{invalid, to_py, IntoPy};
use gpubuf::{Device, Error, NDBuffer, Order};
use pyo3::prelude::*;

/// `shape` with at most one `-1` resolved against `size` elements.
///
/// # Errors
/// `InvalidArgumentError` for a second `-1` or another negative extent;
/// `ShapeMismatchError` when no extent makes the sizes agree.
pub fn resolve_shape(shape: &[i128], size: usize, from: &[usize]) -> PyResult<Vec<usize>> {
    let mismatch = || {
        let got = shape.iter().map(|&n| usize::try_from(n).unwrap_or(usize::MAX)).collect();
        to_py(Error::ShapeMismatch { expected: from.to_vec(), got })
    };
    let mut known: usize = 1;
    let mut unknown = None;
    for (k, &n) in shape.iter().enumerate() {
        if n == -1 && unknown.is_none() {
            unknown = Some(k);
        } else {
            let n = usize::try_from(n).map_err(|_| invalid(format!("extent {n} in a reshape")))?;
            known = known.checked_mul(n).ok_or_else(mismatch)?;
        }
    }
    let mut out: Vec<usize> = shape.iter().map(|&n| usize::try_from(n).unwrap_or(0)).collect();
    if let Some(k) = unknown {
        if known == 0 || size % known != 0 {
            return Err(mismatch());
        }
        out[k] = size / known;
    } else if known != size {
        return Err(mismatch());
    }
    Ok(out)
}

/// The bytes of a C-contiguous `array` seen as `dtype` (numpy's `view(dtype)`): the last
/// axis scales by the ratio of the element sizes; no copy.
///
/// # Errors
/// `InvalidArgumentError` when the array is not C-contiguous, its last axis's bytes do
/// not divide into the new elements (a 0-d array needs equal sizes) or its first byte is
/// not a multiple of the new element size from its buffer's start; layout errors.
pub fn reinterpret(array: &AnyArray, dtype: gpubuf::DType) -> PyResult<AnyArray> {
    let from = array.dtype().size();
    let to = dtype.size();
    let shape = array.shape();
    let mut new_shape = shape.to_vec();
    match new_shape.last_mut() {
        Some(last) => {
            let bytes = last.checked_mul(from).ok_or_else(|| invalid("the last axis is too long"))?;
            if bytes % to != 0 {
                return Err(invalid(format!(
                    "the last axis ({bytes} bytes) does not divide into {to}-byte elements"
                )));
            }
            *last = bytes / to;
        }
        None if from != to => {
            return Err(invalid("a 0-d array can only be viewed as a dtype of the same size"))
        }
        None => {}
    }
    dispatch!(array, nd => {
        if !nd.is_c_contiguous() && nd.size() > 0 {
            return Err(invalid("view(dtype) needs a C-contiguous array (copy() it first)"));
        }
        let (start, end) = if nd.size() == 0 {
            (0, 0)
        } else {
            let start = nd.layout().offset().checked_mul(from).ok_or_else(|| invalid("offset"))?;
            (start, start.checked_add(nd.nbytes()).ok_or_else(|| invalid("offset"))?)
        };
        let bytes = nd.buffer().slice(start..end).py()?;
        crate::dtype::with_dtype!(dtype, U => {
            NDBuffer::<Device, U>::from_buffer(bytes, &new_shape, Order::C).map(U::wrap).py()
        })
    })
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
