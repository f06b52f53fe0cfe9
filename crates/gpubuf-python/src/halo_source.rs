//! The quantities of a halo exchange from Python: what an object passed as a quantity
//! stands for (a `gpubuf.NDBuffer`, a numpy array, a pace `Quantity`, an object with
//! `__dlpack__`, and on CUDA one with `__cuda_array_interface__`), how a numpy quantity
//! becomes an array on a device (adopted, or uploaded), and the check that two quantities
//! do not share memory through different handles. Used by the transformer, its argument
//! cache and `HaloFields`.

use crate::adopt::adopt;
use crate::backend::PyBackend;
use crate::dtype::{dispatch, from_numpy_dtype, with_dtype, AnyArray, Wrap};
use crate::errors::{invalid, IntoPy};
use crate::ndbuffer::PyNDBuffer;
use gpubuf::{DType, Device, Layout, NDBuffer, Order};
use numpy::{PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;

/// What a quantity object is: a gpubuf array, or the numpy array it stands for.
pub(crate) enum Source<'py> {
    /// A `gpubuf.NDBuffer`'s array, used as it is.
    Gpubuf(AnyArray),
    /// A numpy array (the object itself, its `.data`, or `numpy.from_dlpack` of it).
    Numpy(Bound<'py, PyUntypedArray>),
}

/// The array a quantity object stands for: an `NDBuffer`, a numpy array, an object whose
/// `.data` is one (a pace `Quantity`), or one with `__dlpack__`.
///
/// # Errors
/// `InvalidArgumentError` for any other object; what `numpy.from_dlpack` raises.
pub(crate) fn source<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Source<'py>> {
    if let Ok(nd) = obj.cast::<PyNDBuffer>() {
        return Ok(Source::Gpubuf(nd.get().array.clone()));
    }
    if let Ok(a) = obj.cast::<PyUntypedArray>() {
        return Ok(Source::Numpy(a.clone()));
    }
    if let Ok(a) = obj.getattr("data").and_then(|d| d.cast_into::<PyUntypedArray>().map_err(Into::into)) {
        return Ok(Source::Numpy(a));
    }
    if obj.hasattr("__dlpack__")? {
        let a = obj.py().import("numpy")?.call_method1("from_dlpack", (obj,))?;
        return Ok(Source::Numpy(a.cast_into::<PyUntypedArray>()?));
    }
    Err(invalid("a quantity is a numpy array, an object with a .data array, or a gpubuf.NDBuffer"))
}

/// [`source`], and on a CUDA `device` also an object with `__cuda_array_interface__`, or
/// whose `.data` has one (a pace `Quantity` of CuPy), used in place.
///
/// # Errors
/// As [`source`]; what adopting the CUDA array raises.
pub(crate) fn source_on<'py>(obj: &Bound<'py, PyAny>, device: &Device) -> PyResult<Source<'py>> {
    if device.kind() == gpubuf::BackendKind::Cuda && !obj.is_instance_of::<PyNDBuffer>() {
        let data = obj.getattr("data").ok();
        for o in std::iter::once(obj).chain(data.as_ref()) {
            if o.hasattr("__cuda_array_interface__")? {
                let backend = PyBackend::new(device.clone());
                return Ok(Source::Gpubuf(crate::cuda::import(obj.py(), o, Some(&backend))?));
            }
        }
    }
    source(obj)
}

/// A numpy quantity as an array on `device`: adopted, or uploaded. The second value is
/// the numpy array to write an unpack back into when it was uploaded.
///
/// # Errors
/// `DTypeMismatchError` for another dtype than `dtype`; upload errors.
pub(crate) fn numpy_quantity(
    arr: &Bound<'_, PyUntypedArray>,
    device: &Device,
    dtype: DType,
) -> PyResult<(AnyArray, Option<Py<PyAny>>)> {
    let py = arr.py();
    // The expected dtype first: one comparison on the common path.
    let descr = arr.dtype();
    let same = numpy::PyArrayDescrMethods::is_equiv_to(&descr, &crate::dtype::numpy_dtype(py, dtype));
    let got = if same { dtype } else { from_numpy_dtype(&descr)? };
    if got != dtype {
        return Err(crate::errors::to_py(gpubuf::Error::DTypeMismatch { expected: dtype, got }));
    }
    if let Some(a) = adopt(arr, dtype, device, false)? {
        return Ok((a, None));
    }
    // Strides of partial elements or an unaligned start: read from numpy's own copy.
    let src = crate::dtype::viewable(arr.clone())?;
    let array = with_dtype!(dtype, T => {
        let typed = src.cast::<numpy::PyArrayDyn<T>>()?;
        let ro = typed.try_readonly().map_err(|e| invalid(e.to_string()))?;
        let view = ro.as_array();
        let dev = device.clone();
        py.detach(move || NDBuffer::<Device, T>::from_ndarray(&dev, view)).py()?.wrap_any()
    });
    Ok((array, Some(arr.clone().into_any().unbind())))
}

/// Before an unpack writes back into numpy arrays it uploaded (`targets`): each must be
/// writeable, and no two may share bytes (their copies are written back one after the
/// other, so the last would win where they overlap; adopted arrays are checked by
/// [`check_disjoint`]). Checked before anything runs, so a refused call writes nothing.
///
/// # Errors
/// `InvalidArgumentError` for a read-only array or two that overlap.
pub(crate) fn check_write_back(py: Python<'_>, targets: &[&Py<PyAny>]) -> PyResult<()> {
    let mut spans: Vec<(usize, usize, usize)> = Vec::with_capacity(targets.len());
    for t in targets {
        let Ok(a) = t.bind(py).cast::<PyUntypedArray>() else { continue };
        if !crate::numpy_mem::writeable(a) {
            return Err(invalid("a quantity is a read-only numpy array: nothing was unpacked"));
        }
        let item = numpy::PyArrayDescrMethods::itemsize(&a.dtype());
        let data = crate::numpy_mem::data_ptr(a);
        let Some((start, len)) = crate::numpy_mem::byte_extent(data, a.shape(), a.strides(), item) else {
            continue;
        };
        let id = a.as_ptr() as usize;
        let overlap = spans.iter().any(|&(other, s, l)| {
            other != id && len > 0 && l > 0 && start < s.saturating_add(l) && s < start.saturating_add(len)
        });
        if overlap {
            return Err(invalid(
                "two quantities are numpy arrays over the same bytes (overlapping views): their \
                 halos would overwrite each other; nothing was unpacked",
            ));
        }
        spans.push((id, start, len));
    }
    Ok(())
}

/// Wrapping into [`AnyArray`] as a method, for use inside `with_dtype!`.
trait WrapAny {
    fn wrap_any(self) -> AnyArray;
}

impl<T: Wrap> WrapAny for NDBuffer<Device, T> {
    fn wrap_any(self) -> AnyArray {
        T::wrap(self)
    }
}

/// A 1-d view of `len` elements of dtype `d` over `buf`.
pub(crate) fn buffer_array(buf: gpubuf::Buffer<Device>, d: DType, len: usize) -> PyResult<AnyArray> {
    let layout = Layout::contiguous(&[len], Order::C).py()?;
    with_dtype!(d, T => NDBuffer::<Device, T>::from_buffer_layout(buf, layout).map(T::wrap).py())
}

/// The bytes of the host memory of each distinct CPU allocation among `arrays`; two
/// distinct allocations over the same bytes (a numpy array adopted twice, a gpubuf array
/// brought back through numpy) would be written as if they were unrelated.
///
/// # Errors
/// `InvalidArgumentError` when two distinct allocations overlap.
pub(crate) fn check_disjoint(arrays: &[&AnyArray]) -> PyResult<()> {
    use gpubuf::DeviceMemory;
    let mut seen: Vec<(usize, usize, usize)> = Vec::new();
    for a in arrays {
        let (id, start, len) = dispatch!(a, nd => {
            let m = nd.buffer().memory();
            match m.as_cpu() {
                Some(c) => (m.id(), c.as_ptr() as usize, m.len()),
                None => continue,
            }
        });
        if seen.iter().any(|&(i, _, _)| i == id) {
            continue;
        }
        for &(i, s, l) in &seen {
            if i != id && start < s.saturating_add(l) && s < start.saturating_add(len) {
                return Err(invalid(
                    "two quantities share memory through different handles (an array adopted twice): \
                     pass the same array object for both",
                ));
            }
        }
        seen.push((id, start, len));
    }
    Ok(())
}
