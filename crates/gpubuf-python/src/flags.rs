//! `gpubuf.Flags`: an array's memory-layout flags, as numpy's `ndarray.flags` gives them.

use crate::dtype::dispatch;
use crate::ndbuffer::PyNDBuffer;
use pyo3::prelude::*;

/// The layout flags of a ``gpubuf.NDBuffer`` (``a.flags``), by attribute
/// (``c_contiguous``, ``f_contiguous``, ``owndata``, ``writeable``) or by numpy's key
/// (``a.flags["C_CONTIGUOUS"]``). A snapshot: it does not follow later changes.
#[pyclass(name = "Flags", module = "gpubuf", frozen)]
pub struct PyFlags {
    /// Elements in C (row-major) order with no gaps.
    #[pyo3(get)]
    c_contiguous: bool,
    /// Elements in Fortran (column-major) order with no gaps.
    #[pyo3(get)]
    f_contiguous: bool,
    /// Always False: an array shares its allocation with its views, as a view does in numpy.
    #[pyo3(get)]
    owndata: bool,
    /// Always True: gpubuf arrays are writeable.
    #[pyo3(get)]
    writeable: bool,
}

#[pymethods]
impl PyFlags {
    /// A flag by numpy's name (``"C_CONTIGUOUS"``, ``"C"``, ``"F_CONTIGUOUS"``, ``"F"``,
    /// ``"OWNDATA"``, ``"O"``, ``"WRITEABLE"``, ``"W"``). Raises ``KeyError`` for another.
    fn __getitem__(&self, key: &str) -> PyResult<bool> {
        Ok(match key {
            "C_CONTIGUOUS" | "C" | "CONTIGUOUS" => self.c_contiguous,
            "F_CONTIGUOUS" | "F" | "FORTRAN" => self.f_contiguous,
            "OWNDATA" | "O" => self.owndata,
            "WRITEABLE" | "W" => self.writeable,
            _ => return Err(pyo3::exceptions::PyKeyError::new_err(key.to_string())),
        })
    }

    fn __repr__(&self) -> String {
        let b = |v: bool| if v { "True" } else { "False" };
        format!(
            "  C_CONTIGUOUS : {}\n  F_CONTIGUOUS : {}\n  OWNDATA : {}\n  WRITEABLE : {}",
            b(self.c_contiguous),
            b(self.f_contiguous),
            b(self.owndata),
            b(self.writeable)
        )
    }
}

#[pymethods]
impl PyNDBuffer {
    /// The layout flags (``gpubuf.Flags``), as numpy's ``ndarray.flags``.
    #[getter]
    fn flags(&self) -> PyFlags {
        let (c, f) =
            dispatch!(&self.array, nd => (nd.layout().is_c_contiguous(), nd.layout().is_f_contiguous()));
        PyFlags { c_contiguous: c, f_contiguous: f, owndata: false, writeable: true }
    }

    /// The values as ``bytes`` in ``order`` (``"C"``, ``"F"``, ``"A"``: F for an
    /// F-contiguous array, else C; ``"K"`` as numpy's), as numpy's ``ndarray.tobytes``: the
    /// array is read from the device once.
    #[pyo3(signature = (order = "C"))]
    fn tobytes<'py>(slf: &Bound<'py, Self>, order: &str) -> PyResult<Bound<'py, PyAny>> {
        if !matches!(order, "C" | "F" | "A" | "K") {
            return Err(crate::errors::invalid(format!("order is 'C', 'F', 'A' or 'K', not {order:?}")));
        }
        // The host copy of a device array is C-ordered: 'A' is resolved on this array.
        let order = match order {
            "A" if slf.get().flags().f_contiguous && !slf.get().flags().c_contiguous => "F",
            "A" => "C",
            other => other,
        };
        PyNDBuffer::to_numpy(slf)?.call_method1("tobytes", (order,))
    }
}
