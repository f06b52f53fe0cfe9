//! `gpubuf.Mirror`: glumpy's `GPUData`, a numpy array whose writes are tracked and whose
//! `sync` uploads only the bytes written, through [`gpubuf::Mirror`].
//!
//! A numpy subclass cannot be written with PyO3, so `Mirror` itself is Python
//! (`MIRROR_PY`, compiled when the module is imported): it keeps its data in a plain numpy
//! array and reports every write's byte extent to a [`PyMirrorCore`], which keeps the dirty
//! ranges (merged by the [`DirtyPolicy`]) and owns a `gpubuf::Mirror` of the same bytes as a
//! flat `uint8` array. `sync` copies the dirty host bytes into that mirror, whose own `sync`
//! uploads exactly them; the device array is the mirror's device buffer with the array's
//! shape and dtype.

use crate::backend::device_of;
use crate::backend::PyBackend;
use crate::dtype::{from_numpy_dtype, with_dtype, AnyArray, Wrap};
use crate::errors::{invalid, to_py, IntoPy};
use crate::ndbuffer::PyNDBuffer;
use gpubuf::mirror::RangeSet;
use gpubuf::{DType, Device, DirtyPolicy, Error, Mirror, NDBuffer, Order};
use numpy::{PyArray1, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use parking_lot::Mutex;
use pyo3::ffi::c_str;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// The dirty ranges and the byte mirror of one `gpubuf.Mirror` (private: `gpubuf._MirrorCore`).
#[pyclass(name = "_MirrorCore", module = "gpubuf", frozen)]
pub struct PyMirrorCore {
    /// The host bytes, a flat `uint8` view of the array's own memory.
    host: Py<PyArray1<u8>>,
    /// Held by `sync` (also while it uploads with the GIL released).
    mirror: Mutex<Mirror<Device, u8>>,
    /// Bytes written and not uploaded; never held across a GIL release, so a write on
    /// another thread while `sync` uploads is recorded for the next `sync`.
    dirty: Mutex<RangeSet>,
    /// The mirror's device buffer.
    device: gpubuf::Buffer<Device>,
    policy: DirtyPolicy,
    policy_name: &'static str,
    shape: Vec<usize>,
    dtype: DType,
    nbytes: usize,
}

#[pymethods]
impl PyMirrorCore {
    /// Mirrors the C-contiguous numpy array ``host`` on ``backend``, uploading it whole;
    /// ``policy`` is ``"hull"`` (glumpy: one range) or ``"exact"``.
    #[new]
    #[pyo3(signature = (host, backend = None, policy = "hull"))]
    fn new(
        py: Python<'_>,
        host: &Bound<'_, PyUntypedArray>,
        backend: Option<&PyBackend>,
        policy: &str,
    ) -> PyResult<Self> {
        let (policy, policy_name) = match policy {
            "hull" => (DirtyPolicy::hull(), "hull"),
            "exact" => (DirtyPolicy::exact(), "exact"),
            other => return Err(invalid(format!("policy {other:?} is neither \"hull\" nor \"exact\""))),
        };
        let dtype = from_numpy_dtype(&host.dtype())?;
        if !host.is_c_contiguous() {
            return Err(invalid("a mirror's host array must be C-contiguous"));
        }
        let shape = host.shape().to_vec();
        let nbytes =
            host.len().checked_mul(dtype.size()).ok_or_else(|| invalid("the array's size overflows"))?;
        let flat = host.call_method1("reshape", (-1,))?.call_method1("view", ("uint8",))?;
        let flat = flat.cast_into::<PyArray1<u8>>()?;
        let device = device_of(backend);
        let mirror = {
            let ro = flat.try_readonly().map_err(|e| invalid(e.to_string()))?;
            let view = ro.as_array();
            py.detach(move || Mirror::new(&device, view, policy, None)).py()?
        };
        Ok(PyMirrorCore {
            host: flat.unbind(),
            device: mirror.device().buffer().clone(),
            mirror: Mutex::new(mirror),
            dirty: Mutex::new(RangeSet::default()),
            policy,
            policy_name,
            shape,
            dtype,
            nbytes,
        })
    }

    /// Marks the host bytes ``start..stop`` as written.
    ///
    /// Raises ``OutOfBoundsError`` for a range outside the array (nothing is marked).
    fn mark(&self, start: usize, stop: usize) -> PyResult<()> {
        let len = self.nbytes;
        if start > stop || stop > len {
            return Err(to_py(Error::OutOfBounds { what: "mirror bytes".into(), start, end: stop, len }));
        }
        self.dirty.lock().insert(start..stop, self.policy);
        Ok(())
    }

    /// The byte ranges written and not uploaded, as ``(start, stop)`` pairs.
    #[getter]
    fn pending(&self) -> Vec<(usize, usize)> {
        self.dirty.lock().ranges().into_iter().map(|r| (r.start, r.end)).collect()
    }

    /// Uploads the pending ranges; returns ``{"ranges": [(start, stop), ...], "bytes": n,
    /// "commands": k}``. On an error the ranges stay pending.
    ///
    /// The pending host bytes are copied into the Rust mirror with the GIL held (no Python
    /// thread writes them meanwhile), then uploaded from there with the GIL released.
    fn sync<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let mut mirror =
            self.mirror.try_lock().ok_or_else(|| invalid("the mirror is syncing on another thread"))?;
        let ranges = {
            let mut dirty = self.dirty.lock();
            let host = self.host.bind(py);
            let ro = host.try_readonly().map_err(|e| invalid(e.to_string()))?;
            let bytes = ro.as_array();
            let ranges = dirty.ranges();
            for r in &ranges {
                let view = mirror.view(std::slice::from_ref(r)).py()?;
                mirror.copy_from(&view, bytes.slice(gpubuf::ndarray::s![r.start..r.end]).into_dyn()).py()?;
            }
            dirty.clear();
            ranges
        };
        let mirror = &mut *mirror;
        let transfer = py.detach(move || mirror.sync());
        let transfer = transfer.map_err(|e| {
            // Still pending: the next sync copies and uploads them again.
            self.dirty.lock().insert_all(ranges, self.policy);
            to_py(e)
        })?;
        let d = PyDict::new(py);
        let ranges: Vec<(usize, usize)> = transfer.ranges.iter().map(|r| (r.start, r.end)).collect();
        d.set_item("ranges", PyList::new(py, ranges)?)?;
        d.set_item("bytes", transfer.bytes)?;
        d.set_item("commands", transfer.commands)?;
        Ok(d)
    }

    /// The device array (shape and dtype of the host array), sharing the mirror's memory.
    #[getter]
    fn device(&self) -> PyResult<PyNDBuffer> {
        let buffer = self.device.clone();
        let array: AnyArray = with_dtype!(self.dtype, T => {
            NDBuffer::<Device, T>::from_buffer(buffer, &self.shape, Order::C).map(T::wrap).py()?
        });
        Ok(PyNDBuffer { array })
    }

    /// The dirty policy's name, ``"hull"`` or ``"exact"``.
    #[getter]
    fn policy(&self) -> &'static str {
        self.policy_name
    }

    /// The backend the data is mirrored on.
    #[getter]
    fn backend(&self) -> PyBackend {
        PyBackend::new(self.device.backend().clone())
    }

    /// The bytes of the array.
    #[getter]
    fn nbytes(&self) -> usize {
        self.nbytes
    }
}

/// Makes the `Mirror` class from `MIRROR_PY` and adds it and [`PyMirrorCore`] to `m`.
///
/// # Errors
/// Python errors from compiling the source or adding the classes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyMirrorCore>()?;
    let code = PyModule::from_code(py, MIRROR_PY, c_str!("gpubuf/_mirror.py"), c_str!("gpubuf._mirror"))?;
    code.setattr("_MirrorCore", py.get_type::<PyMirrorCore>())?;
    let cls = code.getattr("Mirror")?;
    cls.setattr("__module__", "gpubuf")?;
    m.add("Mirror", cls)
}

/// The Python source of `gpubuf.Mirror`.
const MIRROR_PY: &std::ffi::CStr = c_str!(
    r#"
import inspect

import numpy as np

# numpy functions that write into their first argument.
_WRITERS = {np.copyto, np.put, np.place, np.putmask, np.fill_diagonal, np.put_along_axis}
# Per numpy function: the position of its ``out`` parameter, None without one, -1 when its
# signature cannot be read (every array argument then counts as written).
_OUT_AT = {}


def _written(func, args, kwargs):
    """The arrays a call of the numpy function ``func`` writes: its first argument for
    ``_WRITERS``, and its ``out`` (keyword or positional)."""
    found = [args[0]] if func in _WRITERS and args else []
    out = kwargs.get("out")
    if out is not None:
        found.extend(out if isinstance(out, tuple) else (out,))
    if func not in _OUT_AT:
        try:
            names = list(inspect.signature(func).parameters)
            _OUT_AT[func] = names.index("out") if "out" in names else None
        except (TypeError, ValueError):
            _OUT_AT[func] = -1
    at = _OUT_AT[func]
    if at == -1:
        found.extend(args)
    elif at is not None and len(args) > at:
        o = args[at]
        found.extend(o if isinstance(o, tuple) else (o,))
    return [a for a in found if isinstance(a, Mirror)]


def _extent(a):
    """The bytes of the memory ``a`` spans, as (low, high) addresses."""
    if a.size == 0:
        return None
    low = high = a.ctypes.data
    for n, s in zip(a.shape, a.strides):
        if s < 0:
            low += (n - 1) * s
        else:
            high += (n - 1) * s
    return low, high + a.itemsize


def _within(a, b):
    """Whether the memory of ``a`` lies inside the memory ``b`` spans (a view of it: live
    allocations do not overlap)."""
    ea, eb = _extent(a), _extent(b)
    return ea is None or (eb is not None and eb[0] <= ea[0] and ea[1] <= eb[1])


class Mirror(np.ndarray):
    """glumpy's ``GPUData``: a numpy array (a copy of ``data``, C order) mirrored on
    ``backend``; writes through indexing, slicing, in-place operators, ufuncs with ``out=``,
    ``fill``, ``sort``, ``numpy.copyto`` (and ``put``, ``place``, ``putmask``,
    ``fill_diagonal``, ``put_along_axis``) mark the bytes they cover, ``pending_data`` is
    their range and ``sync()`` uploads exactly it. ``device`` is the device array, a
    ``gpubuf.NDBuffer``. Views of a mirror are mirrors of the same data; results of
    arithmetic are plain numpy arrays. Writes that bypass the array (through
    ``m.view(numpy.ndarray)``, ``m.flat``, ``m.ctypes``, a buffer export, or the ``out=``
    of another array's method that numpy runs without asking the mirror: ``a.take(i,
    out=m)``, ``a.dot(b, out=m)``, ``compress``, ``choose``, ``argmax``, ``argmin``) are
    not seen: call ``mark_dirty()`` after them. ``copy.copy`` and ``copy.deepcopy`` give
    what pickling gives."""

    def __new__(cls, data, backend=None, policy="hull"):
        host = np.array(data, order="C", copy=True)
        core = _MirrorCore(host, backend, policy)
        obj = host.view(cls)
        obj._core = core
        obj._base = host.ctypes.data
        return obj

    def __array_finalize__(self, obj):
        core = getattr(obj, "_core", None)
        if core is not None and self._inside(obj):
            self._core, self._base = core, obj._base
        else:
            self._core, self._base = None, None

    def _inside(self, obj):
        e = _extent(self)
        if e is None:
            return True
        return obj._base <= e[0] and e[1] <= obj._base + obj._core.nbytes

    def _mark(self, a=None):
        a = self if a is None else a
        if self._core is None:
            return
        e = _extent(a)
        if e is not None:
            self._core.mark(e[0] - self._base, e[1] - self._base)

    def mark_dirty(self):
        """Marks every byte of this (view of the) array as written."""
        self._mark()

    def __setitem__(self, key, value):
        np.ndarray.__setitem__(self.view(np.ndarray), key, value)
        keys = key if isinstance(key, tuple) else (key,)
        if not any(k is Ellipsis for k in keys):
            keys = keys + (Ellipsis,)
        try:
            target = np.ndarray.__getitem__(self.view(np.ndarray), keys)
        except (IndexError, TypeError, ValueError):
            target = None
        if isinstance(target, np.ndarray) and _within(target, self):
            self._mark(target)
        else:
            self._mark()  # fancy indexing: the whole view, conservatively

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        plain = tuple(i.view(np.ndarray) if isinstance(i, Mirror) else i for i in inputs)
        if out is not None:
            kwargs["out"] = tuple(o.view(np.ndarray) if isinstance(o, Mirror) else o for o in out)
        result = getattr(ufunc, method)(*plain, **kwargs)
        written = list(out or ())
        if method == "at":
            written.append(inputs[0])
        for o in written:
            if isinstance(o, Mirror):
                o._mark()
        if out is None:
            return result
        return out[0] if len(out) == 1 else tuple(out)

    def __array_function__(self, func, types, args, kwargs):
        result = super().__array_function__(func, types, args, kwargs)
        for a in _written(func, args, kwargs):
            a._mark()
        return result

    def partition(self, *args, **kwargs):
        self.view(np.ndarray).partition(*args, **kwargs)
        self._mark()

    def byteswap(self, inplace=False):
        out = self.view(np.ndarray).byteswap(inplace)
        if inplace:
            self._mark()
            return self
        return out

    def setfield(self, *args, **kwargs):
        self.view(np.ndarray).setfield(*args, **kwargs)
        self._mark()

    def resize(self, *args, **kwargs):
        raise ValueError("a mirror's size is fixed: make a new Mirror")

    def fill(self, value):
        self.view(np.ndarray).fill(value)
        self._mark()

    def copy(self, order="C"):
        """A plain numpy copy (not mirrored)."""
        return self.view(np.ndarray).copy(order)

    def sort(self, *args, **kwargs):
        self.view(np.ndarray).sort(*args, **kwargs)
        self._mark()

    def put(self, *args, **kwargs):
        self.view(np.ndarray).put(*args, **kwargs)
        self._mark()

    @property
    def pending_data(self):
        """glumpy's ``pending_data``: the ``(start, stop)`` byte range written and not
        uploaded (with ``policy="exact"`` the hull of the pending ranges), or None."""
        ranges = self._owner().pending
        return (ranges[0][0], ranges[-1][1]) if ranges else None

    @property
    def pending_ranges(self):
        """Every pending ``(start, stop)`` byte range (one with ``policy="hull"``)."""
        return self._owner().pending

    def sync(self):
        """Uploads the pending bytes (of the whole mirrored array) through gpubuf's mirror;
        returns ``{"ranges", "bytes", "commands"}``. Raises as the upload does; the bytes
        stay pending then."""
        return self._owner().sync()

    @property
    def device(self):
        """The device array of the whole mirrored data, a ``gpubuf.NDBuffer``."""
        return self._owner().device

    def _owner(self):
        if self._core is None:
            raise ValueError("this array is not a view of a mirror's data")
        return self._core

    def __reduce__(self):
        """Pickles as a mirror of a copy of this array's data, on a backend of the same
        name (``Backend`` pickles so) with the same policy, its unsynced ranges still
        pending; an array that is not a view of a mirror's data pickles as a plain array."""
        data = np.array(self.view(np.ndarray), order="C", copy=True)
        if self._core is None:
            return (np.array, (data,))
        pending = []
        e = _extent(self)
        if e is not None and self.flags.c_contiguous:
            low, high = e[0] - self._base, e[1] - self._base
            pending = [(max(a, low) - low, min(b, high) - low) for a, b in self._core.pending if a < high and b > low]
        return (Mirror, (data, self._core.backend, self._core.policy), {"pending": pending})

    def __reduce_ex__(self, protocol):
        return self.__reduce__()

    def __copy__(self):
        """``copy.copy``: what pickling gives (a new mirror of a copy of the data, its
        unsynced ranges pending), on the same backend."""
        made, args, *state = self.__reduce__()
        if made is Mirror:
            args = (args[0], self._core.backend, args[2])
        obj = made(*args)
        if state:
            obj.__setstate__(state[0])
        return obj

    def __deepcopy__(self, memo):
        """``copy.deepcopy``: as ``copy.copy``."""
        return self.__copy__()

    def __setstate__(self, state):
        for start, stop in state.get("pending", ()):
            self._core.mark(start, stop)
"#
);
