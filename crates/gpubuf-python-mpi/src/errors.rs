//! gpubuf's errors raised as the classes of `gpubuf._gpubuf` (`InvalidArgumentError`,
//! `ShapeMismatchError`, ...), so that `except gpubuf.GpubufError` catches what
//! `gpubuf.mpi` raises as it catches the rest of gpubuf.

use gpubuf_core::Error;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

/// The class name of `e` in `gpubuf._gpubuf`.
fn class_name(e: &Error) -> &'static str {
    match e {
        Error::OutOfMemory { .. } => "OutOfMemoryError",
        Error::ShapeMismatch { .. } => "ShapeMismatchError",
        Error::LengthMismatch { .. } => "LengthMismatchError",
        Error::DTypeMismatch { .. } => "DTypeMismatchError",
        Error::Capacity { .. } => "CapacityError",
        Error::OutOfBounds { .. } => "OutOfBoundsError",
        Error::InvalidPlan(_) => "InvalidPlanError",
        Error::InvalidArgument(_) => "InvalidArgumentError",
        Error::BackendUnavailable { .. } => "BackendUnavailableError",
        Error::DeviceMismatch(_) => "DeviceMismatchError",
        Error::Build { .. } => "BuildError",
        Error::Driver { .. } => "DriverError",
        _ => "GpubufError",
    }
}

fn build(py: Python<'_>, e: &Error) -> PyResult<PyErr> {
    let class = py.import("gpubuf._gpubuf")?.getattr(class_name(e))?;
    let value = class.call1((e.to_string(),))?;
    let (expected, got) = match e {
        Error::ShapeMismatch { expected, got } => (expected.into_py_any(py)?, got.into_py_any(py)?),
        Error::LengthMismatch { expected, got, .. } => (expected.into_py_any(py)?, got.into_py_any(py)?),
        Error::DTypeMismatch { expected, got } => {
            (expected.name().into_py_any(py)?, got.name().into_py_any(py)?)
        }
        _ => return Ok(PyErr::from_value(value)),
    };
    value.setattr("expected", expected)?;
    value.setattr("got", got)?;
    Ok(PyErr::from_value(value))
}

/// `e` as the Python exception of its class (a `RuntimeError` with its message should
/// `gpubuf._gpubuf` fail to import).
pub fn to_py(e: Error) -> PyErr {
    Python::attach(|py| build(py, &e).unwrap_or_else(|_| PyRuntimeError::new_err(e.to_string())))
}

/// Converts gpubuf results at the boundary.
pub trait IntoPy<T> {
    /// The result with gpubuf's error raised as its Python class.
    ///
    /// # Errors
    /// The Python exception of the gpubuf error.
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for gpubuf_core::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// An `InvalidArgumentError` with `msg`.
pub fn invalid(msg: impl Into<String>) -> PyErr {
    to_py(Error::invalid(msg))
}
