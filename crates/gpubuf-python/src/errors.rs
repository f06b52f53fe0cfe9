//! gpubuf's [`Error`] as Python exceptions: one class per variant, each also a subclass of
//! the built-in exception with the same meaning (`OutOfMemoryError` is a `MemoryError`,
//! `ShapeMismatchError` a `ValueError`, ...), all under `gpubuf.GpubufError`.
//!
//! The classes are made at module import (`type(name, bases, namespace)`, since one class
//! with two bases is beyond `create_exception!`) and kept for the life of the process.

use gpubuf::{Error, PoolStats};
use pyo3::exceptions::{PyException, PyIndexError, PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use pyo3::IntoPyObjectExt;

/// Each exception class: its name, its built-in base (besides `GpubufError`) and its docstring.
const CLASSES: [(&str, Base, &str); 12] = [
    ("OutOfMemoryError", Base::Memory, "The device or the pool's limit could not provide the bytes; retrying after freeing memory may succeed. Attributes: requested, available (None when unknown), pool (the pool's counters as a dict, or None)."),
    ("ShapeMismatchError", Base::Value, "An array's shape is not the one the operation needs. Attributes: expected, got."),
    ("LengthMismatchError", Base::Value, "A length (of bytes or a list) is not the one the operation needs. Attributes: expected, got."),
    ("DTypeMismatchError", Base::Type, "An array's element type is not the one the operation needs (or numpy's dtype has no gpubuf counterpart). Attributes: expected, got."),
    ("CapacityError", Base::Value, "A fixed-capacity container cannot take more elements."),
    ("OutOfBoundsError", Base::Index, "An index or byte range lies outside the object it addresses."),
    ("InvalidPlanError", Base::Value, "A copy plan is malformed."),
    ("InvalidArgumentError", Base::Value, "An argument is invalid for a reason no more specific class covers."),
    ("BackendUnavailableError", Base::Runtime, "The backend is not compiled in or cannot run on this machine. Attributes: backend, reason."),
    ("DeviceMismatchError", Base::Value, "Two objects that must live on the same device do not."),
    ("BuildError", Base::Runtime, "A kernel failed to compile. Attributes: backend, log."),
    ("DriverError", Base::Runtime, "The driver or runtime returned an error code. Attributes: backend, code."),
];

/// The built-in exception a class also derives from.
#[derive(Clone, Copy)]
enum Base {
    Memory,
    Value,
    Type,
    Index,
    Runtime,
}

/// `GpubufError` followed by the classes of [`CLASSES`], in that order.
static TYPES: PyOnceLock<Vec<Py<PyType>>> = PyOnceLock::new();

/// Makes the exception classes and adds them to `m`.
///
/// # Errors
/// Python errors from making the classes or adding them.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let types = TYPES.get_or_try_init(py, || make(py))?;
    m.add("GpubufError", types[0].bind(py))?;
    for ((name, _, _), ty) in CLASSES.iter().zip(&types[1..]) {
        m.add(*name, ty.bind(py))?;
    }
    Ok(())
}

fn make(py: Python<'_>) -> PyResult<Vec<Py<PyType>>> {
    let type_ = py.get_type::<PyType>();
    let new_class = |name: &str, bases: Bound<'_, PyTuple>, doc: &str| -> PyResult<Py<PyType>> {
        let ns = PyDict::new(py);
        ns.set_item("__module__", "gpubuf")?;
        ns.set_item("__doc__", doc)?;
        Ok(type_.call1((name, bases, ns))?.cast_into::<PyType>()?.unbind())
    };
    let root = new_class(
        "GpubufError",
        PyTuple::new(py, [py.get_type::<PyException>()])?,
        "Base class of every error gpubuf raises.",
    )?;
    let mut out = vec![root.clone_ref(py)];
    for (name, base, doc) in CLASSES {
        let builtin = match base {
            Base::Memory => py.get_type::<PyMemoryError>(),
            Base::Value => py.get_type::<PyValueError>(),
            Base::Type => py.get_type::<PyTypeError>(),
            Base::Index => py.get_type::<PyIndexError>(),
            Base::Runtime => py.get_type::<PyRuntimeError>(),
        };
        let bases = PyTuple::new(py, [root.bind(py).clone(), builtin])?;
        out.push(new_class(name, bases, doc)?);
    }
    Ok(out)
}

/// The class for `name` (one of [`CLASSES`] or `GpubufError`).
fn class<'py>(py: Python<'py>, name: &str) -> Option<Bound<'py, PyType>> {
    let types = TYPES.get(py)?;
    let at = CLASSES.iter().position(|(n, _, _)| *n == name).map_or(0, |i| i + 1);
    types.get(at).map(|t| t.bind(py).clone())
}

/// The class name and the attributes of `e`.
/// An exception's attributes: names and values.
type Attrs = Vec<(&'static str, Py<PyAny>)>;

fn describe(py: Python<'_>, e: &Error) -> PyResult<(&'static str, Attrs)> {
    use pyo3::IntoPyObjectExt;
    Ok(match e {
        Error::OutOfMemory { requested, available, pool } => {
            let stats = match pool {
                Some(p) => Some(stats_dict(py, p)?.into_any().unbind()),
                None => None,
            };
            (
                "OutOfMemoryError",
                vec![
                    ("requested", requested.into_py_any(py)?),
                    ("available", available.into_py_any(py)?),
                    ("pool", stats.into_py_any(py)?),
                ],
            )
        }
        Error::ShapeMismatch { expected, got } => (
            "ShapeMismatchError",
            vec![("expected", expected.into_py_any(py)?), ("got", got.into_py_any(py)?)],
        ),
        Error::LengthMismatch { expected, got, .. } => (
            "LengthMismatchError",
            vec![("expected", expected.into_py_any(py)?), ("got", got.into_py_any(py)?)],
        ),
        Error::DTypeMismatch { expected, got } => (
            "DTypeMismatchError",
            vec![("expected", expected.name().into_py_any(py)?), ("got", got.name().into_py_any(py)?)],
        ),
        Error::Capacity { .. } => ("CapacityError", vec![]),
        Error::OutOfBounds { .. } => ("OutOfBoundsError", vec![]),
        Error::InvalidPlan(_) => ("InvalidPlanError", vec![]),
        Error::InvalidArgument(_) => ("InvalidArgumentError", vec![]),
        Error::BackendUnavailable { backend, reason } => (
            "BackendUnavailableError",
            vec![("backend", backend.name().into_py_any(py)?), ("reason", reason.into_py_any(py)?)],
        ),
        Error::DeviceMismatch(_) => ("DeviceMismatchError", vec![]),
        Error::Build { backend, log } => {
            ("BuildError", vec![("backend", backend.name().into_py_any(py)?), ("log", log.into_py_any(py)?)])
        }
        Error::Driver { backend, code, .. } => (
            "DriverError",
            vec![("backend", backend.name().into_py_any(py)?), ("code", code.into_py_any(py)?)],
        ),
        // Variants added later are still gpubuf errors.
        _ => ("GpubufError", vec![]),
    })
}

/// Builds the Python exception for `e`: its class, its message (`str(e)`) and attributes.
fn build(py: Python<'_>, e: &Error) -> PyResult<PyErr> {
    let (name, attrs) = describe(py, e)?;
    let Some(ty) = class(py, name) else {
        // The module was never initialised (not reachable from Python).
        return Ok(PyRuntimeError::new_err(e.to_string()));
    };
    let value = ty.call1((e.to_string(),))?;
    for (k, v) in attrs {
        value.setattr(k, v)?;
    }
    Ok(PyErr::from_value(value))
}

/// `e` as a Python exception of its class. Should building it fail (no memory for the
/// message), that failure is raised instead: it is an exception too.
pub fn to_py(e: Error) -> PyErr {
    Python::attach(|py| build(py, &e).unwrap_or_else(|failed| failed))
}

/// Converts gpubuf results at the boundary: `.map_err(to_py)` in one word.
pub trait IntoPy<T> {
    /// The result with gpubuf's error raised as its Python class.
    ///
    /// # Errors
    /// The Python exception of the gpubuf error.
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for gpubuf::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// An instance of gpubuf's class `name` with message `msg` and the attributes `attrs`
/// makes, as a Python exception. Should building it fail (no memory for the message),
/// that failure is raised instead: it is an exception too.
fn raised_as(
    name: &str,
    msg: String,
    attrs: impl FnOnce(Python<'_>) -> PyResult<Vec<(&'static str, Py<PyAny>)>>,
) -> PyErr {
    Python::attach(|py| {
        let make = || -> PyResult<PyErr> {
            let ty = class(py, name).ok_or_else(|| PyRuntimeError::new_err("gpubuf is not initialised"))?;
            let value = ty.call1((msg,))?;
            for (k, v) in attrs(py)? {
                value.setattr(k, v)?;
            }
            Ok(PyErr::from_value(value))
        };
        make().unwrap_or_else(|failed| failed)
    })
}

/// A `ShapeMismatchError` for a reshape of an array of shape `expected` into the shape the
/// user asked for, `got` (its `-1` kept, as numpy reports it).
pub fn reshape_mismatch(expected: &[usize], got: &[i128]) -> PyErr {
    let size: u128 = expected.iter().map(|&n| n as u128).product();
    let msg =
        format!("shape mismatch: cannot reshape an array of shape {expected:?} (size {size}) into {got:?}");
    raised_as("ShapeMismatchError", msg, |py| {
        Ok(vec![("expected", expected.to_vec().into_py_any(py)?), ("got", got.to_vec().into_py_any(py)?)])
    })
}

/// A `DTypeMismatchError` for a numpy dtype gpubuf has no element type for (`got`, its
/// name); `expected` is None.
pub fn unsupported_dtype(got: &str) -> PyErr {
    let msg = format!(
        "numpy dtype {got} has no gpubuf element type (int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, float32, float64, complex64, complex128, bool)"
    );
    raised_as("DTypeMismatchError", msg, |py| {
        Ok(vec![("expected", py.None()), ("got", got.into_py_any(py)?)])
    })
}

/// An [`Error::InvalidArgument`] raised as `InvalidArgumentError`.
pub fn invalid(msg: impl Into<String>) -> PyErr {
    to_py(Error::invalid(msg))
}

/// The pool's counters as a dict (also ``OutOfMemoryError.pool``).
///
/// # Errors
/// Python errors from building the dict.
pub fn stats_dict<'py>(py: Python<'py>, s: &PoolStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("active_blocks", s.active_blocks)?;
    d.set_item("active_bytes", s.active_bytes)?;
    d.set_item("held_blocks", s.held_blocks)?;
    d.set_item("held_bytes", s.held_bytes)?;
    d.set_item("managed_bytes", s.managed_bytes)?;
    d.set_item("peak_managed_bytes", s.peak_managed_bytes)?;
    d.set_item("peak_active_bytes", s.peak_active_bytes)?;
    d.set_item("hits", s.hits)?;
    d.set_item("misses", s.misses)?;
    d.set_item("limit", s.limit)?;
    Ok(d)
}
