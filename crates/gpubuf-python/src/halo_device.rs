//! The device a halo transformer builds on (`HaloDataTransformer.get`): `backend=`, else
//! the process-wide default (`HaloDataTransformer.set_default_backend`), else, as pace-util
//! chooses its transformer, what the numpy-like module names (numpy: a new CPU device;
//! CuPy: the CUDA device).

use crate::backend::PyBackend;
use crate::errors::{invalid, IntoPy};
use gpubuf::Device;
use pyo3::exceptions::PyNotImplementedError;
use pyo3::prelude::*;

/// The device of every `HaloDataTransformer.get` without `backend=` (None: from the
/// numpy-like module).
static DEFAULT_BACKEND: parking_lot::Mutex<Option<Device>> = parking_lot::Mutex::new(None);

/// The default device of `HaloDataTransformer.get`.
pub(crate) fn default_backend() -> Option<Device> {
    DEFAULT_BACKEND.lock().clone()
}

/// Sets the default device of `HaloDataTransformer.get`, returning the previous one.
pub(crate) fn set_default_backend(device: Option<Device>) -> Option<Device> {
    std::mem::replace(&mut *DEFAULT_BACKEND.lock(), device)
}

/// A `backend` argument: a `gpubuf.Backend`, a backend's name (opened here), or None.
///
/// # Errors
/// `InvalidArgumentError` for another object or an unknown name; `BackendUnavailableError`.
pub(crate) fn backend_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Device>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    if let Ok(b) = obj.cast::<PyBackend>() {
        return Ok(Some(b.get().device.clone()));
    }
    let name: String =
        obj.extract().map_err(|_| invalid("backend is a gpubuf.Backend, a backend's name, or None"))?;
    obj.py().detach(move || name.parse::<Device>()).py().map(Some)
}

/// The device `get` builds on: `backend`; else the default ([`set_default_backend`]);
/// else, as pace-util chooses its transformer from the numpy-like module, a new CPU device
/// for numpy (or None) and the CUDA device for CuPy.
pub(crate) fn device_for(np_module: &Bound<'_, PyAny>, backend: Option<Device>) -> PyResult<Device> {
    if let Some(d) = backend.or_else(default_backend) {
        return Ok(d);
    }
    let py = np_module.py();
    let np = py.import("numpy")?;
    if np_module.is_none() || np_module.is(&np) {
        return Ok(Device::cpu());
    }
    let name = np_module.getattr("__name__").ok().and_then(|n| n.extract::<String>().ok());
    if name.as_deref() == Some("cupy") {
        return py.detach(Device::cuda).py();
    }
    Err(PyNotImplementedError::new_err(format!(
        "numpy module {} has no transformer without backend=: pass backend=gpubuf.Backend(...)",
        np_module.repr().map(|r| r.to_string()).unwrap_or_default()
    )))
}
