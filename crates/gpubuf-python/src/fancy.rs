//! numpy's advanced indexing on `gpubuf.NDBuffer`: integer arrays, lists and boolean
//! masks in a key (orthogonal or coordinate, any order, repeats, mixed with slices).
//! numpy resolves the key to flat indices on the host (`gpubuf._fancy`, over zero-strided
//! views, so with numpy's own rules and errors); the elements move on the device with one
//! copy plan (`NDBuffer::take`, `NDBuffer::put`). `region` routes advanced keys here and
//! converts assigned values (this module imports neither `region` nor `ndbuffer`).

use crate::dtype::{dispatch, AnyArray, Wrap};
use crate::errors::IntoPy;
use gpubuf::{Error, NDBuffer, Order};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyEllipsis, PyInt, PyList, PySlice, PyTuple};

/// Whether `key` uses advanced indexing: a list, a numpy array (but a 0-d integer one),
/// a `gpubuf.NDBuffer` or a boolean among its items.
///
/// # Errors
/// Python's, reading an array's dtype.
pub fn is_fancy(key: &Bound<'_, PyAny>) -> PyResult<bool> {
    let items: Vec<Bound<'_, PyAny>> = match key.cast::<PyTuple>() {
        Ok(t) => t.iter().collect(),
        Err(_) => vec![key.clone()],
    };
    for item in &items {
        let basic = (item.is_instance_of::<PyInt>() && !item.is_instance_of::<PyBool>())
            || item.is_instance_of::<PySlice>()
            || item.is_none()
            || item.is(PyEllipsis::get(key.py()));
        if basic {
            continue;
        }
        if item.is_instance_of::<PyList>() || item.is_instance_of::<PyBool>() {
            return Ok(true);
        }
        let t = item.get_type();
        if t.name()?.to_cow()? == "NDBuffer" && t.module()?.to_cow()? == "gpubuf" {
            return Ok(true); // a gpubuf index array
        }
        if let Ok(a) = item.cast::<numpy::PyUntypedArray>() {
            use numpy::{PyArrayDescrMethods, PyUntypedArrayMethods};
            if a.ndim() > 0 || a.dtype().kind() == b'b' {
                return Ok(true);
            }
        }
        if item.get_type().name()?.to_cow()? == "bool" {
            return Ok(true); // numpy's bool scalar
        }
    }
    Ok(false)
}

/// The flat indices `key` selects in an array of `shape`, and the selection's shape.
///
/// # Errors
/// numpy's, for a key it refuses.
pub fn flat_indices(shape: &[usize], key: &Bound<'_, PyAny>) -> PyResult<(Vec<usize>, Vec<usize>)> {
    let py = key.py();
    let idx = py.import("gpubuf._fancy")?.call_method1("flat_indices", (PyTuple::new(py, shape)?, key))?;
    let out_shape: Vec<usize> = idx.getattr("shape")?.extract()?;
    let flat: Vec<i64> = idx.call_method0("ravel")?.call_method0("tolist")?.extract()?;
    // numpy checked every index against its axis: they are in 0..size.
    let flat = flat.into_iter().map(|i| usize::try_from(i).unwrap_or(usize::MAX)).collect();
    Ok((flat, out_shape))
}

/// `array[key]` for an advanced `key`: a new C-contiguous array of the selection, gathered
/// on the device.
///
/// # Errors
/// numpy's `IndexError` for an index outside its axis or a mask of another shape;
/// allocation and driver errors.
pub fn get(array: &AnyArray, key: &Bound<'_, PyAny>) -> PyResult<AnyArray> {
    let (flat, shape) = flat_indices(array.shape(), key)?;
    let array = array.clone();
    key.py()
        .detach(
            move || dispatch!(array, nd => nd.take(&flat).and_then(|t| t.reshape(&shape)).map(Wrap::wrap)),
        )
        .py()
}

/// A new C-ordered array of `array`'s dtype and device, of `shape`.
///
/// # Errors
/// Allocation errors.
pub fn empty_like(array: &AnyArray, shape: &[usize]) -> PyResult<AnyArray> {
    fn typed<T: Wrap>(nd: &NDBuffer<gpubuf::Device, T>, shape: &[usize]) -> gpubuf::Result<AnyArray> {
        NDBuffer::<gpubuf::Device, T>::empty(nd.backend(), shape, Order::C).map(T::wrap)
    }
    dispatch!(array, nd => typed(nd, shape)).py()
}

/// Scatters `values` (C-contiguous, of the selection's shape and `array`'s dtype) to the
/// flat indices `flat` of `array` on the device; of repeated indices the last value wins.
///
/// # Errors
/// `DTypeMismatchError` for values of another dtype; allocation and driver errors.
pub fn put(py: Python<'_>, array: &AnyArray, flat: Vec<usize>, values: AnyArray) -> PyResult<()> {
    let n = flat.len();
    let dst = array.clone();
    py.detach(move || {
        macro_rules! arm {
            ($($v:ident),*) => {
                match (&dst, &values) {
                    $((AnyArray::$v(d), AnyArray::$v(s)) => s.reshape(&[n]).and_then(|s| d.put(&flat, &s)),)*
                    _ => Err(Error::DTypeMismatch { expected: dst.dtype(), got: values.dtype() }),
                }
            };
        }
        arm!(U8, I32, U32, I64, I8, I16, U16, U64, F16, F32, F64, Bool, C64, C128)
    })
    .py()
}
