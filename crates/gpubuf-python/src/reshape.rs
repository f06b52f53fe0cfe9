//! Reshapes and dtype views of `gpubuf.NDBuffer` as Python passes them: the rules are
//! numpy's, kept in the Rust crates ([`gpubuf::Layout::infer_shape`] for a `-1` extent,
//! `NDBuffer::reshape` for view or copy, `NDBuffer::view_as` for `view(dtype)`); here are
//! only the integer conversion and the dtype dispatch.

use crate::dtype::{dispatch, with_dtype, AnyArray, Wrap};
use crate::errors::{invalid, IntoPy};
use pyo3::prelude::*;

/// `shape` (Python ints, at most one `-1`) resolved against `array`'s size.
///
/// # Errors
/// `InvalidArgumentError` for a second `-1` or another negative extent;
/// `ShapeMismatchError` when no extent makes the sizes agree.
pub fn resolve_shape(array: &AnyArray, shape: &[i128]) -> PyResult<Vec<usize>> {
    let dims = shape
        .iter()
        .map(|&n| isize::try_from(n).map_err(|_| invalid(format!("extent {n} in a reshape"))))
        .collect::<PyResult<Vec<isize>>>()?;
    dispatch!(array, nd => nd.layout().infer_shape(&dims)).map_err(|e| match e {
        gpubuf::Error::ShapeMismatch { expected, .. } => crate::errors::reshape_mismatch(&expected, shape),
        e => crate::errors::to_py(e),
    })
}

/// The bytes of a C-contiguous `array` seen as `dtype` (numpy's `view(dtype)`); no copy.
///
/// # Errors
/// `InvalidArgumentError` as `NDBuffer::view_as`.
pub fn reinterpret(array: &AnyArray, dtype: gpubuf::DType) -> PyResult<AnyArray> {
    dispatch!(array, nd => with_dtype!(dtype, U => nd.view_as::<U>().map(U::wrap))).py()
}

/// Whether numpy's `order` means Fortran order for `array`: `"C"` no, `"F"` yes, `"A"`
/// (and `"K"` where `keep`, for `ravel`) when the array is F-contiguous and not
/// C-contiguous.
///
/// # Errors
/// `InvalidArgumentError` for another order.
pub fn fortran_order(array: &AnyArray, order: &str, keep: bool) -> PyResult<bool> {
    let f_only = || dispatch!(array, nd => nd.layout().is_f_contiguous() && !nd.layout().is_c_contiguous());
    match order {
        "C" => Ok(false),
        "F" => Ok(true),
        "A" => Ok(f_only()),
        "K" if keep => Ok(f_only()),
        _ => Err(invalid(format!(
            "order is 'C', 'F' or 'A'{}, not {order:?}",
            if keep { " or 'K'" } else { "" }
        ))),
    }
}

/// `array` reshaped to `shape` in Fortran order when `fortran`, else C order
/// (`NDBuffer::reshape_order`).
///
/// # Errors
/// `ShapeMismatch` and copy errors, as `NDBuffer::reshape_order`.
pub fn reshape_in(array: &AnyArray, shape: &[usize], fortran: bool) -> gpubuf::Result<AnyArray> {
    let order = if fortran { gpubuf::Order::F } else { gpubuf::Order::C };
    dispatch!(array, nd => nd.reshape_order(shape, order).map(Wrap::wrap))
}
