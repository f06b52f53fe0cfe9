//! What numpy and zarr call on an array besides moving data (zarr's `NDArrayLike`):
//! elementwise `==` and `!=`, the `all` and `any` reductions and `astype`.
//!
//! They compute with numpy on the host values of the array: on the CPU backend the
//! memory itself (no copy), elsewhere one read of the array. An array result goes back to
//! the array's backend as a `gpubuf.NDBuffer` (a comparison is a `bool` array), so code
//! written for numpy (`np.all(a == 0)`, `a.astype("f4")`) keeps working on any backend.

use crate::backend::PyBackend;
use crate::dtype::parse_dtype;
use crate::errors::invalid;
use crate::ndbuffer::PyNDBuffer;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The values of `obj` as numpy when it is a `gpubuf.NDBuffer`, else `obj` itself.
fn host<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    match obj.cast::<PyNDBuffer>() {
        Ok(a) => PyNDBuffer::to_numpy(a),
        Err(_) => Ok(obj.clone()),
    }
}

/// `result` (what numpy computed for `slf`) as gpubuf's: a numpy array (or numpy scalar,
/// as a 0-d array) uploaded to `slf`'s backend; anything else (`NotImplemented`, a Python
/// scalar) unchanged.
fn on_backend<'py>(slf: &Bound<'py, PyNDBuffer>, result: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = slf.py();
    let np = py.import("numpy")?;
    let is_array =
        result.is_instance(&np.getattr("ndarray")?)? || result.is_instance(&np.getattr("generic")?)?;
    if !is_array {
        return Ok(result);
    }
    let backend = PyBackend::new(slf.get().array.device().clone());
    let array = np.call_method1("asarray", (result,))?;
    Ok(Bound::new(py, PyNDBuffer::from_numpy(py, &array, Some(&backend), None)?)?.into_any())
}

/// `slf <op> other` computed by numpy on host values, the result on `slf`'s backend.
fn compare<'py>(
    slf: &Bound<'py, PyNDBuffer>,
    other: &Bound<'py, PyAny>,
    op: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let r = host(slf.as_any())?.call_method1(op, (host(other)?,))?;
    on_backend(slf, r)
}

/// A reduction (`all` or `any`) over `axis`: a Python bool for a full reduction, else a
/// bool array on `slf`'s backend.
fn reduce<'py>(
    slf: &Bound<'py, PyNDBuffer>,
    name: &str,
    axis: Option<&Bound<'py, PyAny>>,
    out: Option<&Bound<'py, PyAny>>,
    keepdims: bool,
    where_: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    if out.is_some_and(|o| !o.is_none()) {
        return Err(invalid(format!("{name}(out=...) is not supported: use the returned array")));
    }
    let py = slf.py();
    let kwargs = PyDict::new(py);
    kwargs.set_item("axis", axis)?;
    kwargs.set_item("keepdims", keepdims)?;
    if let Some(w) = where_ {
        kwargs.set_item("where", host(w)?)?;
    }
    let r = host(slf.as_any())?.call_method(name, (), Some(&kwargs))?;
    let np = py.import("numpy")?;
    if r.is_instance(&np.getattr("ndarray")?)? {
        return on_backend(slf, r);
    }
    Ok(pyo3::types::PyBool::new(py, r.is_truthy()?).to_owned().into_any())
}

#[pymethods]
impl PyNDBuffer {
    /// Elementwise ``a == other`` (numpy's broadcasting and type rules): a ``bool`` array
    /// on this array's backend. ``other`` is a scalar, a numpy array or a
    /// ``gpubuf.NDBuffer`` (of any backend). Computed on host values (on the CPU backend
    /// in place; elsewhere the array is read once). ``np.all(a == 0)`` works as on numpy.
    fn __eq__<'py>(slf: &Bound<'py, Self>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        compare(slf, other, "__eq__")
    }

    /// Elementwise ``a != other``, as ``__eq__``.
    fn __ne__<'py>(slf: &Bound<'py, Self>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        compare(slf, other, "__ne__")
    }

    /// Whether every element is true (nonzero), as numpy's ``ndarray.all``: a Python
    /// ``bool`` when ``axis`` is None, else a ``bool`` array on this backend. ``where``
    /// masks as numpy's. Computed on host values. Raises ``InvalidArgumentError`` for
    /// ``out`` (not supported), numpy's ``AxisError`` for an axis out of range.
    #[pyo3(signature = (axis = None, out = None, keepdims = false, *, r#where = None))]
    fn all<'py>(
        slf: &Bound<'py, Self>,
        axis: Option<&Bound<'py, PyAny>>,
        out: Option<&Bound<'py, PyAny>>,
        keepdims: bool,
        r#where: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        reduce(slf, "all", axis, out, keepdims, r#where)
    }

    /// Whether any element is true (nonzero), as ``all``.
    #[pyo3(signature = (axis = None, out = None, keepdims = false, *, r#where = None))]
    fn any<'py>(
        slf: &Bound<'py, Self>,
        axis: Option<&Bound<'py, PyAny>>,
        out: Option<&Bound<'py, PyAny>>,
        keepdims: bool,
        r#where: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        reduce(slf, "any", axis, out, keepdims, r#where)
    }

    /// The values converted to ``dtype`` (numpy's casting rules, ``casting`` as numpy's),
    /// as a new array on this backend; with ``copy=False`` and the same dtype, this array
    /// itself. The same dtype copies on the device (C order); a conversion runs on host
    /// values and keeps numpy's ``order`` (``"K"`` keeps an F-contiguous array F). Raises ``DTypeMismatchError`` for a dtype gpubuf has no
    /// type for, numpy's ``TypeError`` for a cast ``casting`` forbids.
    #[pyo3(signature = (dtype, order = "K", casting = "unsafe", subok = true, copy = true))]
    fn astype<'py>(
        slf: &Bound<'py, Self>,
        dtype: &Bound<'py, PyAny>,
        order: &str,
        casting: &str,
        subok: bool,
        copy: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = subok;
        if !matches!(order, "K" | "A" | "C" | "F") {
            return Err(invalid(format!("order is 'K', 'A', 'C' or 'F', not {order:?}")));
        }
        let target = parse_dtype(dtype)?;
        let this = slf.get();
        if target == this.array.dtype() {
            if !copy {
                return Ok(slf.clone().into_any());
            }
            if order != "F" {
                return Ok(Bound::new(slf.py(), this.copy(slf.py())?)?.into_any());
            }
        }
        let kwargs = PyDict::new(slf.py());
        kwargs.set_item("casting", casting)?;
        kwargs.set_item("order", order)?;
        let r = PyNDBuffer::to_numpy(slf)?.call_method("astype", (dtype,), Some(&kwargs))?;
        on_backend(slf, r)
    }
}
