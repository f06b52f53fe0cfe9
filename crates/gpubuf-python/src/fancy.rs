//! numpy's advanced indexing on `gpubuf.NDBuffer`: integer arrays, lists and boolean
//! masks in a key (orthogonal or coordinate, any order, repeats, mixed with slices).
//! numpy resolves the key to flat indices on the host (`gpubuf._fancy`, over zero-strided
//! views, so with numpy's own rules and errors); the elements move on the device with one
//! copy plan (`NDBuffer::take`, `NDBuffer::put`).

use crate::dtype::{dispatch, AnyArray, Wrap};
use crate::errors::IntoPy;
use crate::gil::GilAllocator;
use crate::ndbuffer::PyNDBuffer;
use crate::region::Value;
use gpubuf::{Error, MemoryPool, NDBuffer, Order};
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
        if item.is_instance_of::<PyList>()
            || item.is_instance_of::<PyBool>()
            || item.cast::<PyNDBuffer>().is_ok()
        {
            return Ok(true);
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
fn flat_indices(shape: &[usize], key: &Bound<'_, PyAny>) -> PyResult<(Vec<usize>, Vec<usize>)> {
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

/// A new C-ordered array of `nd`'s dtype and device.
fn empty_like<T: Wrap>(nd: &NDBuffer<gpubuf::Device, T>, shape: &[usize]) -> gpubuf::Result<AnyArray> {
    NDBuffer::<gpubuf::Device, T>::empty(nd.backend(), shape, Order::C).map(T::wrap)
}

/// `array[key] = value` for an advanced `key`: `value` is converted and broadcast to the
/// selection's shape as a basic assignment converts it (into a new device array), then
/// scattered on the device; of repeated indices the last value is written, as numpy's.
///
/// # Errors
/// As [`get`] and `region::set`; nothing is written when the value cannot be converted.
pub fn set(
    array: &AnyArray,
    key: &Bound<'_, PyAny>,
    value: Value<'_, '_>,
    pool: Option<&MemoryPool<GilAllocator>>,
) -> PyResult<()> {
    let py = key.py();
    let (flat, shape) = flat_indices(array.shape(), key)?;
    let tmp = dispatch!(array, nd => empty_like(nd, &shape)).py()?;
    crate::region::set(&tmp, PyEllipsis::get(py).as_any(), value, pool)?;
    let n = flat.len();
    let (dst, src) = (array.clone(), tmp);
    py.detach(move || {
        macro_rules! arm {
            ($($v:ident),*) => {
                match (&dst, &src) {
                    $((AnyArray::$v(d), AnyArray::$v(s)) => s.reshape(&[n]).and_then(|s| d.put(&flat, &s)),)*
                    _ => Err(Error::DTypeMismatch { expected: dst.dtype(), got: src.dtype() }),
                }
            };
        }
        arm!(U8, I32, U32, I64, I8, I16, U16, U64, F16, F32, F64, Bool)
    })
    .py()
}
