//! `gpubuf.HaloBuffer`: a halo transformer's pack or unpack buffer with pace-util's
//! `Buffer` surface (`array`, `assign_from`, `assign_to`, `finalize_memory_transfer`), the
//! object pace's `HaloUpdater` hands to MPI (`Isend(get_pack_buffer().array)`,
//! `Irecv(get_unpack_buffer().array)`).
//!
//! What `.array` is depends on where the buffer lives:
//! - CPU: a numpy view of the buffer's own memory (no copy).
//! - CUDA: `cupy.asarray` of the buffer when CuPy is importable (no copy), else the 1-d
//!   `NDBuffer` itself (`__cuda_array_interface__`, `__dlpack__`).
//! - OpenCL: a host numpy copy, the *mirror*, kept coherent with the device: `.array`
//!   downloads the device data into it when the device was written since (a pack,
//!   `receive`), and hands it out; once handed out the mirror is the buffer's data, and the
//!   transformer uploads it before it reads the buffer (an unpack, `loopback`). The same
//!   numpy array object is returned each time, so a reference taken before a receive (MPI's
//!   `Irecv`) is the one uploaded. Handing out `ndbuffer` (the device array) makes the
//!   device the buffer's data again: the mirror is uploaded first, then refreshed from the
//!   device at the next `.array`.

use crate::dtype::{parse_dtype, AnyArray};
use crate::errors::{invalid, to_py};
use crate::ndbuffer::PyNDBuffer;
use gpubuf::{Backend as _, BackendKind};
use numpy::PyUntypedArray;
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::{PyEllipsis, PySlice, PyTuple};

/// Where the buffer's data is for Python.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Host memory: `.array` is a view.
    Host,
    /// CUDA device memory: `.array` is a device array.
    Cuda,
    /// Device memory numpy cannot view: `.array` is the mirror.
    Mirrored,
}

/// The host copy of a mirrored buffer.
#[derive(Default)]
struct Mirror {
    /// The numpy array handed out as `.array`, once made.
    host: Option<Py<PyAny>>,
    /// Whether the mirror holds the buffer's data (handed out since the device was last
    /// written): the device is then refreshed from it before it is read.
    current: bool,
}

/// A halo transformer's pack or unpack buffer (1-d, ``buffer_size`` elements) with
/// pace-util's ``Buffer`` surface: ``array``, ``assign_from``, ``assign_to``,
/// ``finalize_memory_transfer``; and ``to_numpy()``, ``numpy.asarray(b)``, ``ndbuffer``
/// (the device array), ``size``, ``shape``, ``dtype``, ``backend``.
///
/// ``array`` is on the CPU a numpy view of the buffer's memory; on CUDA a CuPy array over
/// it (the ``NDBuffer`` itself without CuPy); on OpenCL a host numpy copy kept coherent with
/// the device (refreshed after a pack, uploaded before an unpack; the same numpy object
/// every time). Read it after ``get_pack_buffer()``/``get_unpack_buffer()``, as pace does.
#[pyclass(name = "HaloBuffer", module = "gpubuf", frozen)]
pub struct PyHaloBuffer {
    nd: Py<PyNDBuffer>,
    place: Place,
    mirror: Mutex<Mirror>,
}

/// The number of elements of `shape`, or None past `usize`.
fn elements(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

/// A `ShapeMismatchError`.
fn shape_error(expected: Vec<usize>, got: Vec<usize>) -> PyErr {
    to_py(gpubuf::Error::ShapeMismatch { expected, got })
}

impl PyHaloBuffer {
    /// A buffer over `array` (1-d, the transformer's buffer).
    pub(crate) fn new(py: Python<'_>, array: AnyArray) -> PyResult<Py<Self>> {
        let place = if crate::interop::host_address(&array).is_some() {
            Place::Host
        } else if array.device().kind() == BackendKind::Cuda {
            Place::Cuda
        } else {
            Place::Mirrored
        };
        let nd = Py::new(py, PyNDBuffer { array })?;
        Py::new(py, PyHaloBuffer { nd, place, mirror: Mutex::new(Mirror::default()) })
    }

    fn lock(&self) -> PyResult<parking_lot::MutexGuard<'_, Mirror>> {
        self.mirror.try_lock().ok_or_else(|| invalid("the halo buffer is in use on another thread"))
    }

    /// The device was written (a pack into it, received data): the mirror is stale.
    ///
    /// # Errors
    /// `InvalidArgumentError` while another thread uses the buffer.
    pub(crate) fn device_written(&self) -> PyResult<()> {
        self.lock()?.current = false;
        Ok(())
    }

    /// Before the device reads the buffer: uploads the mirror when it holds the data.
    ///
    /// # Errors
    /// `InvalidArgumentError` while another thread uses the buffer; upload errors.
    pub(crate) fn flush(&self, py: Python<'_>) -> PyResult<()> {
        if self.place != Place::Mirrored {
            return Ok(());
        }
        let m = self.lock()?;
        if let (true, Some(host)) = (m.current, &m.host) {
            self.nd.bind(py).as_any().set_item(PyEllipsis::get(py), host.bind(py))?;
        }
        Ok(())
    }

    /// The mirror, refreshed from the device unless it holds the data already.
    fn mirror<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let mut m = self.lock()?;
        let host = match (&m.host, m.current) {
            (Some(h), true) => h.bind(py).clone(),
            (Some(h), false) => {
                let fresh = PyNDBuffer::to_numpy(self.nd.bind(py))?;
                py.import("numpy")?.call_method1("copyto", (h.bind(py), fresh))?;
                h.bind(py).clone()
            }
            (None, _) => {
                let fresh = PyNDBuffer::to_numpy(self.nd.bind(py))?;
                m.host = Some(fresh.clone().unbind());
                fresh
            }
        };
        m.current = true;
        Ok(host)
    }

    /// The key of `buffer_slice` (None: the whole buffer), the shape of what it selects
    /// (none for an integer) and its number of elements.
    fn region<'py>(
        &self,
        py: Python<'py>,
        key: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyAny>, Vec<usize>, usize)> {
        let key = match key {
            Some(k) if !k.is_none() => k.clone(),
            _ => PySlice::full(py).into_any(),
        };
        let view = crate::region::get(&self.nd.get().array, &key)?;
        let shape = view.shape().to_vec();
        let n = shape.iter().product();
        Ok((key, shape, n))
    }

    /// The element type and shape of an array argument, checked against this buffer's
    /// dtype.
    fn check_array(&self, obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<usize>> {
        let (Ok(dtype), Ok(shape)) = (obj.getattr("dtype"), obj.getattr("shape")) else {
            return Err(invalid(format!(
                "{what} is an array (numpy, CuPy, gpubuf.NDBuffer), not {}",
                type_name(obj)
            )));
        };
        let expected = self.nd.get().array.dtype();
        let got = parse_dtype(&dtype)?;
        if got != expected {
            return Err(to_py(gpubuf::Error::DTypeMismatch { expected, got }));
        }
        shape.extract().map_err(|_| invalid(format!("{what} has no integer shape")))
    }

    /// `obj` as a `gpubuf.NDBuffer` on this buffer's CUDA device, when it is a CUDA array.
    fn cuda_array<'py>(&self, obj: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
        if self.place != Place::Cuda || !obj.hasattr("__cuda_array_interface__")? {
            return Ok(None);
        }
        let backend = crate::backend::PyBackend::new(self.nd.get().array.device().clone());
        let a = crate::cuda::import(obj.py(), obj, Some(&backend))?;
        Ok(Some(Bound::new(obj.py(), PyNDBuffer { array: a })?.into_any()))
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

#[pymethods]
impl PyHaloBuffer {
    /// The buffer as an array MPI can send from and receive into: on the CPU a numpy view
    /// of its memory, on CUDA a CuPy array over it (without CuPy the 1-d ``NDBuffer``), on
    /// OpenCL the coherent host mirror (see the class docs).
    ///
    /// Raises ``InvalidArgumentError`` while another thread uses the buffer.
    #[getter]
    fn array<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let this = slf.get();
        match this.place {
            Place::Host => PyNDBuffer::to_numpy(this.nd.bind(py)),
            Place::Cuda => match py.import("cupy") {
                Ok(cp) => cp.call_method1("asarray", (this.nd.bind(py),)),
                Err(_) => Ok(this.nd.bind(py).clone().into_any()),
            },
            Place::Mirrored => this.mirror(py),
        }
    }

    /// pace's ``Buffer.assign_from``: copies ``source`` (an array of the buffer's dtype
    /// with as many elements as ``buffer_slice`` selects, read in C order; numpy anywhere,
    /// CuPy or any ``__cuda_array_interface__`` array on CUDA, a ``gpubuf.NDBuffer`` of this
    /// device) into the buffer's ``buffer_slice`` (default: all of it).
    ///
    /// Raises ``DTypeMismatchError`` for another dtype (no silent cast),
    /// ``ShapeMismatchError`` for another number of elements, ``InvalidArgumentError`` for
    /// an object that is no array or a bad slice.
    #[pyo3(signature = (source, buffer_slice = None))]
    fn assign_from(
        &self,
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        buffer_slice: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let shape = self.check_array(source, "assign_from's source")?;
        let (key, region, n) = self.region(py, buffer_slice)?;
        // A duck-typed source may claim any shape: its count is checked, never wrapped.
        if elements(&shape) != Some(n) {
            return Err(shape_error(vec![n], shape));
        }
        let flat = if let Some(nd) = self.cuda_array(source)? {
            nd.call_method0("ravel")?
        } else if let Ok(nd) = source.cast::<PyNDBuffer>() {
            let same = nd.get().array.device().same_device(self.nd.get().array.device());
            if same && self.place != Place::Mirrored {
                nd.call_method0("ravel")?
            } else {
                PyNDBuffer::to_numpy(nd)?.call_method1("reshape", (n,))?
            }
        } else {
            let np = py.import("numpy")?;
            np.call_method1("asarray", (source,))?.call_method1("reshape", (n,))?
        };
        // The region's own shape (0-d for an integer key), on every path alike.
        let flat = if region.len() == 1 {
            flat
        } else {
            flat.call_method1("reshape", (PyTuple::new(py, &region)?,))?
        };
        if self.place == Place::Mirrored {
            let m = self.lock()?;
            if let (true, Some(host)) = (m.current, &m.host) {
                // The mirror holds the data: write there (uploaded before the next read).
                return host.bind(py).set_item(key, flat);
            }
        }
        self.nd.bind(py).as_any().set_item(key, flat)?;
        self.device_written()
    }

    /// pace's ``Buffer.assign_to``: copies the buffer's ``buffer_slice`` (default: all) into
    /// ``destination_array`` (a writeable numpy array, or on CUDA a CUDA array, of the
    /// buffer's dtype), in C order; with ``buffer_reshape`` the slice is first reshaped to
    /// that shape, which must then be the destination's.
    ///
    /// Raises ``DTypeMismatchError``, ``ShapeMismatchError`` for another number of elements
    /// or shape, ``InvalidArgumentError`` for an object that is no array or is read-only.
    #[pyo3(signature = (destination_array, buffer_slice = None, buffer_reshape = None))]
    fn assign_to(
        slf: &Bound<'_, Self>,
        destination_array: &Bound<'_, PyAny>,
        buffer_slice: Option<&Bound<'_, PyAny>>,
        buffer_reshape: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let dest_shape = this.check_array(destination_array, "assign_to's destination")?;
        let (key, _, n) = this.region(py, buffer_slice)?;
        let dest_n = elements(&dest_shape);
        if let Some(r) = buffer_reshape.filter(|r| !r.is_none()) {
            let r: Vec<usize> =
                r.extract().map_err(|_| invalid("buffer_reshape is a sequence of non-negative ints"))?;
            if elements(&r) != Some(n) || r != dest_shape {
                return Err(shape_error(dest_shape, r));
            }
        } else if dest_n != Some(n) {
            return Err(shape_error(dest_shape, vec![n]));
        }
        let shape = PyTuple::new(py, &dest_shape)?;
        if let Some(dest) = this.cuda_array(destination_array)? {
            let region = this.nd.bind(py).as_any().get_item(key)?.call_method1("reshape", shape)?;
            return dest.set_item(PyEllipsis::get(py), region);
        }
        let dest = destination_array.cast::<PyUntypedArray>().map_err(|_| {
            invalid(format!(
                "assign_to's destination is a numpy array{}, not {}",
                if this.place == Place::Cuda { " or a CUDA array" } else { "" },
                type_name(destination_array)
            ))
        })?;
        if !crate::numpy_mem::writeable(dest) {
            return Err(invalid("assign_to's destination is read-only"));
        }
        let mirrored = match this.place {
            Place::Mirrored => {
                let m = this.lock()?;
                match (m.current, &m.host) {
                    (true, Some(host)) => Some(host.bind(py).get_item(&key)?),
                    _ => None,
                }
            }
            _ => None,
        };
        let data = match (mirrored, this.place) {
            (Some(d), _) => d,
            (None, Place::Host) => PyNDBuffer::to_numpy(this.nd.bind(py))?.get_item(key)?,
            (None, _) => {
                let region =
                    Bound::new(py, PyNDBuffer { array: crate::region::get(&this.nd.get().array, &key)? })?;
                PyNDBuffer::to_numpy(&region)?
            }
        };
        let np = py.import("numpy")?;
        np.call_method1("copyto", (dest, data.call_method1("reshape", shape)?))?;
        Ok(())
    }

    /// pace's ``Buffer.finalize_memory_transfer``: nothing to wait for, the transformer
    /// hands its buffers out after its queued work completed.
    fn finalize_memory_transfer(&self) {}

    /// The buffer's data as numpy: on the CPU a view, elsewhere a copy (of the mirror when
    /// it holds the data).
    fn to_numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if self.place == Place::Mirrored {
            let m = self.lock()?;
            if let (true, Some(host)) = (m.current, &m.host) {
                return host.bind(py).call_method0("copy");
            }
        }
        PyNDBuffer::to_numpy(self.nd.bind(py))
    }

    /// numpy's ``__array__``: on the CPU a view, on OpenCL the mirror (``array``), on CUDA
    /// a copy.
    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__<'py>(
        slf: &Bound<'py, Self>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let this = slf.get();
        let a = match this.place {
            Place::Mirrored => Self::array(slf)?,
            _ => return this.nd.bind(py).call_method1("__array__", (dtype, copy)),
        };
        let a = match dtype {
            Some(d) => a.call_method1("astype", (d,))?,
            None => a,
        };
        if copy == Some(true) {
            return a.call_method0("copy");
        }
        Ok(a)
    }

    /// The buffer as a 1-d ``gpubuf.NDBuffer`` on the transformer's device (the mirror
    /// uploaded first when it holds the data). Handing it out makes the device array the
    /// buffer's data again, as ``array`` makes the mirror: what is written through it is
    /// what the next unpack reads, and the next ``array`` refreshes the mirror from it.
    #[getter]
    fn ndbuffer(&self, py: Python<'_>) -> PyResult<Py<PyNDBuffer>> {
        self.flush(py)?;
        if self.place == Place::Mirrored {
            self.device_written()?;
        }
        Ok(self.nd.clone_ref(py))
    }

    /// The elements.
    #[getter]
    fn size(&self) -> usize {
        self.nd.get().array.shape().iter().product()
    }

    /// ``(size,)``.
    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.nd.get().array.shape().to_vec()
    }

    /// The element type, as a ``numpy.dtype``.
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> Bound<'py, numpy::PyArrayDescr> {
        crate::dtype::numpy_dtype(py, self.nd.get().array.dtype())
    }

    /// The backend the buffer lives on.
    #[getter]
    fn backend(&self) -> crate::backend::PyBackend {
        crate::backend::PyBackend::new(self.nd.get().array.device().clone())
    }

    fn __len__(&self) -> usize {
        self.size()
    }

    fn __repr__(&self) -> String {
        let a = &self.nd.get().array;
        format!(
            "gpubuf.HaloBuffer(size={}, dtype={}, backend={:?})",
            self.size(),
            a.dtype().name(),
            a.device().kind().name()
        )
    }
}
