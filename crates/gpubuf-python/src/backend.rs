//! `gpubuf.Backend` (a [`Device`]: the backend chosen at run time) and `gpubuf.backends()`.

use crate::errors::IntoPy;
use gpubuf::{Backend as _, BackendKind, Device};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A device of one backend, chosen by name at run time: ``Backend("cpu")``,
/// ``Backend("opencl")`` or ``Backend("cuda")`` (any case). Opening one that was not
/// compiled in or cannot run here raises ``BackendUnavailableError``; an unknown name
/// raises ``InvalidArgumentError``. ``GPUBUF_OPENCL_DEVICE`` and ``GPUBUF_CUDA_DEVICE``
/// choose the device. Each ``Backend("cpu")`` is a device of its own; arrays and pools of
/// one backend cannot be mixed with another's (``DeviceMismatchError``).
#[pyclass(name = "Backend", module = "gpubuf", frozen)]
pub struct PyBackend {
    /// The device.
    pub device: Device,
}

impl PyBackend {
    /// Wraps a device.
    pub fn new(device: Device) -> Self {
        PyBackend { device }
    }
}

#[pymethods]
impl PyBackend {
    #[new]
    #[pyo3(signature = (name = "cpu"))]
    fn py_new(py: Python<'_>, name: &str) -> PyResult<Self> {
        let name = name.to_string();
        // Opening a GPU context can take a while: other Python threads run meanwhile.
        let device = py.detach(move || name.parse::<Device>()).py()?;
        Ok(PyBackend { device })
    }

    /// The OpenCL backend over a ``pyopencl.Context`` or ``pyopencl.CommandQueue``: the
    /// same ``cl_context`` (no second context), and for a queue that queue as its default
    /// stream (for a context, a new queue of gpubuf's). While such a backend is alive, the
    /// same context and queue give it again. Memory of the two libraries then passes
    /// between them without copies (``gpubuf.pyopencl``).
    ///
    /// Raises ``InvalidArgumentError`` for another object, an out-of-order queue or a
    /// released one, ``BackendUnavailableError`` when gpubuf's OpenCL loader does not list
    /// the device.
    #[staticmethod]
    fn from_pyopencl(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        match crate::pyopencl::device_of(py, obj)? {
            Some(device) => Ok(PyBackend { device }),
            None => Err(crate::errors::invalid(format!(
                "Backend.from_pyopencl takes a pyopencl.Context or pyopencl.CommandQueue, not {}",
                obj.get_type().name().map(|n| n.to_string()).unwrap_or_default()
            ))),
        }
    }

    /// The backend's name: ``"cpu"``, ``"opencl"`` or ``"cuda"``.
    #[getter]
    fn name(&self) -> &'static str {
        self.device.kind().name()
    }

    /// The device's name, vendor, driver version, memory (bytes) and compute units, as a dict.
    #[getter]
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let info = self.device.info();
        let d = PyDict::new(py);
        d.set_item("backend", info.backend.name())?;
        d.set_item("name", info.name)?;
        d.set_item("vendor", info.vendor)?;
        d.set_item("version", info.version)?;
        d.set_item("total_memory", info.total_memory)?;
        d.set_item("compute_units", info.compute_units)?;
        Ok(d)
    }

    /// Waits until all work queued on the device is done.
    ///
    /// Raises ``DriverError`` when the device reports a failure.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        let device = self.device.clone();
        py.detach(move || device.synchronize(device.default_stream())).py()
    }

    /// Whether ``other`` is the same device (arrays of the two may be mixed).
    fn same_device(&self, other: &PyBackend) -> bool {
        self.device.same_device(&other.device)
    }

    fn __repr__(&self) -> String {
        format!("gpubuf.Backend({:?}) on {}", self.device.kind().name(), self.device.info().name)
    }

    /// Pickles as ``Backend(name)``: unpickled, it opens the backend of that name in the
    /// process that loads it (for OpenCL the device ``GPUBUF_OPENCL_DEVICE`` picks there).
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> (Bound<'py, pyo3::types::PyType>, (&'static str,)) {
        (slf.get_type(), (slf.get().device.kind().name(),))
    }
}

/// Every backend with whether it was compiled in and can run here: a list of dicts with
/// ``name``, ``compiled``, ``available``, ``devices`` (names) and ``reason`` (why not,
/// or None).
///
/// # Errors
/// Python errors from building the dicts.
#[pyfunction]
pub fn backends(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    let status = py.detach(gpubuf::status);
    let mut out = Vec::with_capacity(status.len());
    for s in status {
        let d = PyDict::new(py);
        d.set_item("name", s.kind.name())?;
        d.set_item("compiled", s.compiled)?;
        match s.devices {
            Ok(devs) => {
                d.set_item("available", !devs.is_empty())?;
                d.set_item("devices", devs.into_iter().map(|i| i.name).collect::<Vec<_>>())?;
                d.set_item("reason", py.None())?;
            }
            Err(e) => {
                d.set_item("available", false)?;
                d.set_item("devices", Vec::<String>::new())?;
                d.set_item("reason", e.to_string())?;
            }
        }
        out.push(d);
    }
    Ok(out)
}

/// The names of the backends that can run here, in the order ``cpu``, ``opencl``, ``cuda``.
#[pyfunction]
pub fn available_backends(py: Python<'_>) -> Vec<&'static str> {
    py.detach(|| {
        BackendKind::ALL
            .into_iter()
            .filter(|&k| gpubuf::devices(k).is_ok_and(|d| !d.is_empty()))
            .map(|k| k.name())
            .collect()
    })
}

/// The device of `backend`, or a new CPU device.
pub fn device_of(backend: Option<&PyBackend>) -> Device {
    backend.map_or_else(Device::cpu, |b| b.device.clone())
}
