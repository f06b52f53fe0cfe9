//! `gpubuf.NDBuffer`: an n-d array on any backend, with numpy in and out.

pub use crate::args::shape_arg;
pub use crate::backend::device_of;
use crate::backend::PyBackend;
use crate::dtype::{dispatch, numpy_dtype, parse_dtype, with_dtype, AnyArray, Wrap};
use crate::errors::{invalid, IntoPy};
use crate::interop;
use crate::region::Value;
use gpubuf::{DType, Device, NDBuffer, Order};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// An n-d array of one dtype on one backend's device.
///
/// ``shape``, ``dtype`` (a numpy dtype), ``strides`` (bytes, as numpy's) and ``backend``
/// describe it. ``to_numpy()`` and ``NDBuffer.from_numpy()`` move data between numpy and
/// the device. On the CPU backend ``to_numpy()`` is a view of the same memory (also
/// through ``numpy.asarray(a)``, ``__array_interface__`` and ``__dlpack__``); elsewhere it
/// is a copy. Copies run with the GIL released.
#[pyclass(name = "NDBuffer", module = "gpubuf", frozen)]
pub struct PyNDBuffer {
    /// The array.
    pub array: AnyArray,
}

/// An array handed to Python is a `gpubuf.NDBuffer`: functions and other classes return
/// [`AnyArray`] and need not name this class.
impl<'py> IntoPyObject<'py> for AnyArray {
    type Target = PyNDBuffer;
    type Output = Bound<'py, PyNDBuffer>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyNDBuffer>> {
        Bound::new(py, PyNDBuffer { array: self })
    }
}

impl PyNDBuffer {
    /// `self[key] = value`, staging from `pool` when given.
    fn assign(
        &self,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        pool: Option<&gpubuf::MemoryPool<crate::gil::GilAllocator>>,
    ) -> PyResult<()> {
        let value = match value.cast::<PyNDBuffer>() {
            Ok(v) => Value::Array(v.get().array.clone()),
            Err(_) => Value::Object(value),
        };
        crate::region::set(&self.array, key, value, pool)
    }

    /// An empty array of `dtype`, zero-filled when `zero`.
    fn create(py: Python<'_>, shape: Vec<usize>, dtype: DType, device: Device, zero: bool) -> PyResult<Self> {
        let array = py
            .detach(move || {
                with_dtype!(dtype, T => {
                    let nd = if zero {
                        NDBuffer::<Device, T>::zeros(&device, &shape)
                    } else {
                        NDBuffer::<Device, T>::empty(&device, &shape, Order::C)
                    };
                    nd.map(T::wrap)
                })
            })
            .py()?;
        Ok(PyNDBuffer { array })
    }
}

#[pymethods]
impl PyNDBuffer {
    /// The numpy array ``array`` (or anything ``numpy.asarray`` takes) on ``backend``
    /// (default: a new CPU device).
    ///
    /// On the CPU backend a C- or F-contiguous, writeable numpy array whose data starts on
    /// an 8-byte boundary is shared, not copied: the result is a view of the same memory
    /// (writes show on both sides) and keeps the numpy array alive. Anything else is copied
    /// in C order, or F order for an F-contiguous array (its memory order is kept).
    /// ``copy=True`` always copies; ``copy=False`` raises
    /// ``InvalidArgumentError`` when the array cannot be shared.
    ///
    /// Raises ``DTypeMismatchError`` for a dtype gpubuf has no type for,
    /// ``OutOfMemoryError`` when the device cannot hold it.
    #[staticmethod]
    #[pyo3(signature = (array, backend = None, copy = None))]
    pub(crate) fn from_numpy(
        py: Python<'_>,
        array: &Bound<'_, PyAny>,
        backend: Option<&PyBackend>,
        copy: Option<bool>,
    ) -> PyResult<Self> {
        // An F-contiguous numpy array keeps its memory order: its transpose (C-contiguous)
        // goes through, and the result is transposed back (shared on the CPU like a C one).
        let np = py.import("numpy")?;
        if array.is_instance(&np.getattr("ndarray")?)? && array.getattr("ndim")?.extract::<usize>()? > 1 {
            let flags = array.getattr("flags")?;
            if flags.getattr("f_contiguous")?.is_truthy()? && !flags.getattr("c_contiguous")?.is_truthy()? {
                let t = crate::adopt::from_numpy(py, &array.getattr("T")?, device_of(backend), copy)?;
                return Ok(PyNDBuffer {
                    array: dispatch!(t, nd => nd.transpose(None).map(Wrap::wrap)).py()?,
                });
            }
        }
        Ok(PyNDBuffer { array: crate::adopt::from_numpy(py, array, device_of(backend), copy)? })
    }

    /// An uninitialised array (zeros on the CPU) of ``shape`` and ``dtype`` on ``backend``.
    #[staticmethod]
    #[pyo3(signature = (shape, dtype = None, backend = None))]
    fn empty(
        py: Python<'_>,
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
        backend: Option<&PyBackend>,
    ) -> PyResult<Self> {
        let d = dtype.map_or(Ok(DType::F64), parse_dtype)?;
        Self::create(py, shape_arg(shape)?, d, device_of(backend), false)
    }

    /// An array of zeros of ``shape`` and ``dtype`` (default float64) on ``backend``.
    #[staticmethod]
    #[pyo3(signature = (shape, dtype = None, backend = None))]
    fn zeros(
        py: Python<'_>,
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
        backend: Option<&PyBackend>,
    ) -> PyResult<Self> {
        let d = dtype.map_or(Ok(DType::F64), parse_dtype)?;
        Self::create(py, shape_arg(shape)?, d, device_of(backend), true)
    }

    /// The array as numpy: on the CPU a view of the same memory (writes show on both
    /// sides; the view keeps this array alive), elsewhere a copy, F-ordered for an
    /// F-contiguous array and C-ordered otherwise.
    pub(crate) fn to_numpy<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let this = slf.get();
        if interop::host_address(&this.array).is_some() {
            return py.import("numpy")?.call_method1("asarray", (slf,));
        }
        let array = this.array.clone();
        interop::numpy_fits(&array)?;
        // An F-contiguous array comes back F-ordered: its transpose is read as C and
        // transposed back, so the memory order is kept (numpy's `.T`, no copy).
        let fortran =
            dispatch!(&array, nd => nd.layout().is_f_contiguous() && !nd.layout().is_c_contiguous());
        let array =
            if fortran { dispatch!(array, nd => nd.transpose(None).map(Wrap::wrap)).py()? } else { array };
        let shape = PyTuple::new(py, array.shape())?;
        let out = dispatch!(array, nd => {
            // One axis across the boundary (rust-numpy takes at most 32), numpy's shape after.
            let flat = py.detach(move || nd.to_vec()).py()?;
            numpy::PyArray1::from_vec(py, flat).call_method1("reshape", (shape,))
        })?;
        if fortran {
            return out.getattr("T");
        }
        Ok(out)
    }

    /// A copy of the array on ``backend`` (contiguous, C order).
    fn to_backend(&self, py: Python<'_>, backend: &PyBackend) -> PyResult<Self> {
        let (array, target) = (self.array.clone(), backend.device.clone());
        let array = py.detach(move || dispatch!(array, nd => nd.to_backend(&target).map(Wrap::wrap))).py()?;
        Ok(PyNDBuffer { array })
    }

    /// A contiguous copy on the same backend.
    pub(crate) fn copy(&self, py: Python<'_>) -> PyResult<Self> {
        let array = self.array.clone();
        let array = py.detach(move || dispatch!(array, nd => nd.copy().map(Wrap::wrap))).py()?;
        Ok(PyNDBuffer { array })
    }

    /// ``a[key]``: the view ``key`` selects (ints, slices with any step, ``...`` and
    /// ``None``, numpy's basic indexing), sharing this array's memory. An integer for every
    /// axis gives a 0-d array. A key with integer arrays, lists or boolean masks (numpy's
    /// advanced indexing, with numpy's rules) gives a new array, gathered on the device.
    ///
    /// Raises ``OutOfBoundsError`` (an ``IndexError``) for an index outside its axis or
    /// more indices than axes (numpy's ``IndexError`` for an advanced key),
    /// ``InvalidArgumentError`` for a zero step, a second ``...`` or another type.
    fn __getitem__(&self, key: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(PyNDBuffer { array: crate::region::get(&self.array, key)? })
    }

    /// ``a[key] = value``: ``set_region(key, value)`` with a fresh staging array.
    fn __setitem__(&self, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.assign(key, value, None)
    }

    /// Writes ``value`` into the region ``key`` selects (as ``__getitem__``): an
    /// ``NDBuffer`` of the same dtype and shape is copied on the device; a scalar is
    /// converted as numpy's own assignment converts it (``OverflowError`` for an int past
    /// the dtype) and fills the region on the device; anything else is taken by
    /// ``numpy.asarray`` in this array's dtype, an array (broadcast to the region's shape
    /// as ``numpy.broadcast_to`` does) uploaded once: straight into
    /// a contiguous region, else into a staging array (from ``pool``, a ``MemoryPool`` of
    /// this device, when given) that one scatter writes into the region. A value that
    /// shares memory with this array (a numpy view of it, the numpy array it adopted,
    /// another array over the same bytes) is copied first, as numpy does. An advanced key
    /// (integer arrays, lists, masks) takes the value converted the same way to the
    /// selection's shape and scatters it on the device (of repeated indices the last
    /// value wins, as in numpy). Runs with the GIL released.
    ///
    /// Raises as ``__getitem__``; ``DTypeMismatchError`` for an ``NDBuffer`` of another
    /// dtype; ``ShapeMismatchError`` when the value does not broadcast to the region;
    /// ``DeviceMismatchError`` for an array or pool of another device.
    #[pyo3(signature = (key, value, pool = None))]
    fn set_region(
        &self,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        pool: Option<&crate::pool::PyMemoryPool>,
    ) -> PyResult<()> {
        self.assign(key, value, pool.map(|p| p.pool()))
    }

    /// Sets every element to ``value`` (on the device).
    fn fill(&self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let all = pyo3::types::PyEllipsis::get(value.py());
        self.assign(all.as_any(), value, None)
    }

    /// The same elements with another ``shape`` (ints or one sequence; one extent may be
    /// -1), read and placed in ``order`` (numpy's: ``"C"`` row-major, ``"F"``
    /// column-major, ``"A"`` F when the array is F-contiguous and not C-contiguous): a view
    /// when the array is contiguous in that order, else a copy.
    ///
    /// Raises ``ShapeMismatchError`` when the sizes differ, ``InvalidArgumentError`` for
    /// another order.
    #[pyo3(signature = (*shape, order = "C"))]
    fn reshape(&self, py: Python<'_>, shape: &Bound<'_, PyTuple>, order: &str) -> PyResult<Self> {
        let ints = || invalid("a shape is ints or one sequence of ints");
        let dims: Vec<i128> = match shape.len() {
            1 => {
                let one = shape.get_item(0)?;
                match one.extract::<i128>() {
                    Ok(n) => vec![n],
                    Err(_) => one.extract().map_err(|_| ints())?,
                }
            }
            _ => shape.extract().map_err(|_| ints())?,
        };
        let new = crate::reshape::resolve_shape(&self.array, &dims)?;
        let fortran = crate::reshape::fortran_order(&self.array, order, false)?;
        let array = self.array.clone();
        let array = py.detach(move || crate::reshape::reshape_in(&array, &new, fortran)).py()?;
        Ok(PyNDBuffer { array })
    }

    /// The elements as a 1-d array in ``order`` (``"C"``, ``"F"``, ``"A"`` as
    /// ``reshape``; ``"K"`` memory order, F for an F-contiguous array, else C): a view when
    /// contiguous in that order, else a copy.
    #[pyo3(signature = (order = "C"))]
    fn ravel(&self, py: Python<'_>, order: &str) -> PyResult<Self> {
        let n = self.size();
        let fortran = crate::reshape::fortran_order(&self.array, order, true)?;
        let array = self.array.clone();
        let array = py.detach(move || crate::reshape::reshape_in(&array, &[n], fortran)).py()?;
        Ok(PyNDBuffer { array })
    }

    /// A view with the axes permuted (``None`` reverses them, numpy's ``.T``; a negative
    /// axis counts from the end, as in numpy). No copy.
    ///
    /// Raises ``InvalidArgumentError`` when ``axes`` is not a permutation.
    #[pyo3(signature = (axes = None))]
    fn transpose(&self, axes: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let axes = axes
            .filter(|a| !a.is_none())
            .map(|a| crate::args::axes_arg(a, self.array.shape().len()))
            .transpose()?;
        let array = dispatch!(&self.array, nd => nd.transpose(axes.as_deref()).map(Wrap::wrap)).py()?;
        Ok(PyNDBuffer { array })
    }

    /// The bytes of this C-contiguous array seen as ``dtype`` (numpy's ``view``): the last
    /// axis scales by the ratio of the element sizes. No copy.
    ///
    /// Raises ``InvalidArgumentError`` for a strided array, a last axis whose bytes do
    /// not divide into the new elements, or a first byte inside an element of the new
    /// dtype (numpy allows such unaligned views; gpubuf's arrays start on a whole element);
    /// ``DTypeMismatchError`` for a dtype gpubuf lacks.
    fn view(&self, dtype: &Bound<'_, PyAny>) -> PyResult<Self> {
        let d = parse_dtype(dtype)?;
        Ok(PyNDBuffer { array: crate::reshape::reinterpret(&self.array, d)? })
    }

    /// The extents, as a tuple.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.array.shape())
    }

    /// The element type, as a ``numpy.dtype``.
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> Bound<'py, numpy::PyArrayDescr> {
        numpy_dtype(py, self.array.dtype())
    }

    /// The strides in bytes (numpy's convention; negative for flipped axes).
    #[getter]
    fn strides<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, interop::byte_strides(&self.array)?)
    }

    /// The number of axes.
    #[getter]
    fn ndim(&self) -> usize {
        self.array.shape().len()
    }

    /// The number of elements.
    #[getter]
    fn size(&self) -> usize {
        dispatch!(&self.array, nd => nd.size())
    }

    /// The bytes of the elements (``size * itemsize``).
    #[getter]
    fn nbytes(&self) -> usize {
        dispatch!(&self.array, nd => nd.nbytes())
    }

    /// The bytes of one element.
    #[getter]
    fn itemsize(&self) -> usize {
        self.array.dtype().size()
    }

    /// The backend the array lives on.
    #[getter]
    fn backend(&self) -> PyBackend {
        PyBackend::new(self.array.device().clone())
    }

    /// numpy's array interface (version 3), on the CPU backend only: ``numpy.asarray(a)``
    /// is then a view of the same memory. Raises ``AttributeError`` on other backends.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        interop::array_interface(py, &self.array)
    }

    /// The CUDA array interface (version 3), on the CUDA backend only: the device
    /// pointer, shape, typestr, strides in bytes (None when C-contiguous) and the stream
    /// gpubuf's copies run on (consumers wait on it). Raises ``AttributeError`` on other
    /// backends, so ``hasattr(a, "__cuda_array_interface__")`` is False there.
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        crate::cuda::export(py, &self.array)
    }

    /// An array over the device memory of any object with ``__cuda_array_interface__``
    /// (CuPy, PyTorch, Numba arrays) on ``backend`` (default: the default CUDA device),
    /// without a copy: the object is kept alive while the array (or a view of it) lives,
    /// and its ``stream`` is synchronised first.
    ///
    /// Raises ``InvalidArgumentError`` for an object without the interface, a malformed,
    /// read-only or masked one, or a backend that is not CUDA; ``DTypeMismatchError``;
    /// ``BackendUnavailableError`` when no CUDA device can run.
    #[staticmethod]
    #[pyo3(signature = (obj, backend = None))]
    fn from_cuda_array_interface(
        py: Python<'_>,
        obj: &Bound<'_, PyAny>,
        backend: Option<&PyBackend>,
    ) -> PyResult<Self> {
        Ok(PyNDBuffer { array: crate::cuda::import(py, obj, backend)? })
    }

    /// DLPack export (CPU and CUDA backends): a capsule that shares this array's memory.
    /// On CUDA, ``stream`` is the consumer's stream, made to wait for gpubuf's queued work
    /// (None: the legacy default stream, 1 legacy, 2 per-thread, -1 no synchronisation,
    /// above: a ``CUstream`` pointer); on the CPU it must be None.
    ///
    /// Raises ``BufferError`` on backends it cannot express, for another ``dl_device``,
    /// ``copy=True`` or a stream on the CPU; ``InvalidArgumentError`` for stream 0 or a
    /// value that is no stream.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<&Bound<'py, PyAny>>,
        dl_device: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = max_version;
        crate::dlpack::export(py, &self.array, stream, dl_device, copy)
    }

    /// The DLPack device: ``(1, 0)`` (kDLCPU) on the CPU backend, ``(2, ordinal)``
    /// (kDLCUDA) on CUDA. Raises ``BufferError`` on backends DLPack export does not cover.
    fn __dlpack_device__(&self) -> PyResult<(i32, i32)> {
        crate::dlpack::device(&self.array)
    }

    /// numpy's ``__array__`` protocol, for backends without ``__array_interface__``:
    /// a copy (``copy=False`` raises ``ValueError`` there, as numpy 2 asks).
    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__<'py>(
        slf: &Bound<'py, Self>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let on_host = interop::host_address(&slf.get().array).is_some();
        if copy == Some(false) && !on_host {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "this array is not in host memory: numpy needs a copy",
            ));
        }
        let a = Self::to_numpy(slf)?;
        let a = match dtype {
            Some(d) => a.call_method1("astype", (d,))?,
            None => a,
        };
        if copy == Some(true) && on_host {
            return a.call_method0("copy");
        }
        Ok(a)
    }

    fn __len__(&self) -> PyResult<usize> {
        self.array
            .shape()
            .first()
            .copied()
            .ok_or_else(|| pyo3::exceptions::PyTypeError::new_err("len() of a 0-d array"))
    }

    /// Pickles as ``NDBuffer.from_numpy(values, backend)``: the values are read back to a
    /// numpy array (C order) and uploaded to the backend of the same name when unpickled.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let values = slf.call_method0("to_numpy")?;
        let backend = slf.getattr("backend")?;
        let args = PyTuple::new(slf.py(), [values, backend])?;
        Ok((slf.get_type().getattr("from_numpy")?, args))
    }

    fn __repr__(&self) -> String {
        format!(
            "gpubuf.NDBuffer(shape={:?}, dtype={}, backend={:?})",
            self.array.shape(),
            self.array.dtype().name(),
            self.array.device().kind().name()
        )
    }
}
