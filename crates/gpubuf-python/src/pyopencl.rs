//! pyopencl's objects as gpubuf's: a `pyopencl.Context` or `pyopencl.CommandQueue` as the
//! OpenCL device over that very context and queue (`OpenClBackend::share_context`), and a
//! block of gpubuf memory handed to pyopencl as a `pyopencl.Buffer` over its `cl_mem`.
//!
//! pyopencl's classes are recognised by their module and name (pyopencl is not imported
//! unless such an object is given), and their handles read from `int_ptr`, pyopencl's own
//! documented way out; pyopencl keeps each object's handle alive while the object lives,
//! and gpubuf retains what it keeps.

use crate::errors::{invalid, IntoPy};
use gpubuf::opencl::ClMemory;
use gpubuf::{Device, Error};
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::PyType;
use std::sync::{Arc, Weak};

/// pyopencl buffers adopted by [`_adopt_cl_mem`] and still in use, by `cl_mem`: adopting
/// one again shares the memory (a `cl_mem` is the memory of one gpubuf object at most).
static ADOPTED: Mutex<Vec<(usize, Weak<ClMemory>)>> = Mutex::new(Vec::new());

/// The live gpubuf memory over an adopted `cl_mem`, if any.
fn adopted(cl_mem: usize) -> Option<Arc<ClMemory>> {
    ADOPTED.lock().iter().find(|(h, _)| *h == cl_mem).and_then(|(_, w)| w.upgrade())
}

/// What a pyopencl object is, for the calls that take one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `pyopencl.Context`.
    Context,
    /// `pyopencl.CommandQueue`.
    Queue,
}

/// pyopencl's class `name`, when pyopencl is imported (a pyopencl object exists only
/// then; it is not imported here).
fn class<'py>(py: Python<'py>, name: &str) -> Option<Bound<'py, PyType>> {
    let modules = py.import("sys").ok()?.getattr("modules").ok()?;
    let cl = modules.get_item("pyopencl").ok()?;
    cl.getattr(name).ok()?.cast_into::<PyType>().ok()
}

/// The pyopencl class of `obj`, if it is a pyopencl context or queue (an instance of
/// pyopencl's own classes, so that its `int_ptr` is a handle pyopencl holds).
pub fn kind_of(obj: &Bound<'_, PyAny>) -> Option<Kind> {
    let py = obj.py();
    let is = |name: &str| class(py, name).is_some_and(|c| obj.is_instance(&c).unwrap_or(false));
    if is("Context") {
        Some(Kind::Context)
    } else if is("CommandQueue") {
        Some(Kind::Queue)
    } else {
        None
    }
}

/// Attribute `attr` of `obj` as pyopencl's class `base` defines it (its descriptor, so a
/// subclass cannot substitute its own value).
fn base_attr<'py>(obj: &Bound<'py, PyAny>, base: &str, attr: &str) -> PyResult<Bound<'py, PyAny>> {
    let cls = class(obj.py(), base).ok_or_else(|| invalid(format!("pyopencl.{base} is not available")))?;
    cls.getattr(attr)?.call_method1("__get__", (obj, &cls))
}

/// The handle of a pyopencl object of class `base` (its `int_ptr`).
fn handle(obj: &Bound<'_, PyAny>, base: &str) -> PyResult<usize> {
    let v: usize = base_attr(obj, base, "int_ptr")
        .and_then(|p| p.extract())
        .map_err(|e| invalid(format!("the pyopencl {base} has no usable int_ptr ({e})")))?;
    if v == 0 {
        return Err(invalid(format!("the pyopencl {base} was released")));
    }
    Ok(v)
}

/// The `cl_mem` of a `pyopencl.Buffer` (an instance of pyopencl's own class, read through
/// its own descriptor).
///
/// # Errors
/// `InvalidArgumentError` for another object or a released buffer.
pub fn buffer_handle(buf: &Bound<'_, PyAny>) -> PyResult<usize> {
    let is_buffer = class(buf.py(), "Buffer").is_some_and(|c| buf.is_instance(&c).unwrap_or(false));
    if !is_buffer {
        return Err(invalid("not a pyopencl.Buffer"));
    }
    handle(buf, "MemoryObjectHolder")
}

/// The OpenCL device over the context (and queue) of a pyopencl object, or None when `obj`
/// is not a pyopencl context or queue.
///
/// # Errors
/// `BackendUnavailableError` when gpubuf's OpenCL loader does not list the device;
/// `InvalidArgumentError` for an out-of-order queue or a released object.
pub fn device_of(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Option<Device>> {
    let Some(kind) = kind_of(obj) else { return Ok(None) };
    let (context, queue) = match kind {
        Kind::Context => (handle(obj, "Context")?, 0),
        Kind::Queue => {
            let context = base_attr(obj, "CommandQueue", "context")?;
            if kind_of(&context) != Some(Kind::Context) {
                return Err(invalid("the queue's context is not a pyopencl.Context"));
            }
            (handle(&context, "Context")?, handle(obj, "CommandQueue")?)
        }
    };
    let device = py
        .detach(move || {
            // SAFETY: both handles come from live pyopencl objects (`obj` is borrowed for
            // this call), which hold their references until they are released; the
            // backend retains its own.
            unsafe { gpubuf::opencl::OpenClBackend::share_context(context as *mut _, queue as *mut _) }
        })
        .map(Device::from)
        .py()?;
    Ok(Some(device))
}

/// The `cl_mem` under a block of `device` memory, for pyopencl.
///
/// # Errors
/// `DeviceMismatchError` off OpenCL.
pub fn cl_mem(memory: &gpubuf::device::Memory) -> PyResult<usize> {
    raw_cl_mem(memory).ok_or_else(not_opencl)
}

/// The `cl_mem` handle of OpenCL memory, None off OpenCL (no Python involved).
pub fn raw_cl_mem(memory: &gpubuf::device::Memory) -> Option<usize> {
    memory.as_opencl().map(|m| m.raw() as usize)
}

/// The `DeviceMismatchError` for memory of another backend than OpenCL.
pub fn not_opencl() -> PyErr {
    crate::errors::to_py(Error::DeviceMismatch("pyopencl takes OpenCL memory, not this backend's".into()))
}

/// A `pyopencl.Buffer` over `cl_mem` (pyopencl retains its own reference).
///
/// # Errors
/// `ImportError` without pyopencl; pyopencl's own errors.
pub fn buffer<'py>(py: Python<'py>, cl_mem: usize) -> PyResult<Bound<'py, PyAny>> {
    py.import("pyopencl")?.getattr("Buffer")?.call_method1("from_int_ptr", (cl_mem, true))
}

/// A gpubuf array over the memory of ``buffer``, a ``pyopencl.Buffer`` (no copy):
/// ``owner`` is the pyopencl queue or context whose device the array gets
/// (``Backend.from_pyopencl``), then the layout in bytes. The handle is read from the
/// pyopencl object (gpubuf retains it), never taken as a number.
///
/// Raises ``InvalidArgumentError`` for an object that is not a pyopencl buffer, a layout
/// outside the buffer or strides that are not whole elements, a read-only buffer or one
/// gpubuf's own memory holds (use that array), ``DeviceMismatchError`` for a buffer of
/// another context.
///
/// # Errors
/// As the docstring says.
#[pyfunction]
pub fn _adopt_pyopencl(
    py: Python<'_>,
    owner: &Bound<'_, PyAny>,
    buffer: &Bound<'_, PyAny>,
    shape: Vec<usize>,
    strides: Vec<isize>,
    dtype: &Bound<'_, PyAny>,
    offset: usize,
) -> PyResult<crate::dtype::AnyArray> {
    use crate::dtype::{parse_dtype, with_dtype, Wrap};
    let d = parse_dtype(dtype)?;
    let device = device_of(py, owner)?.ok_or_else(|| invalid("the owner is a pyopencl queue or context"))?;
    let layout = crate::dtype::byte_layout(shape, &strides, offset, d)?;
    let int_ptr = buffer_handle(buffer)?;
    let cl = device.as_opencl().cloned().ok_or_else(|| invalid("the owner's device is not OpenCL"))?;
    let memory = match adopted(int_ptr) {
        Some(m) => m,
        None => {
            let m: Arc<ClMemory> = py
                .detach(move || {
                    // SAFETY: `int_ptr` is the handle of a live pyopencl buffer the caller
                    // holds for this call (pyopencl keeps its reference while the object
                    // lives); gpubuf retains its own, which the memory releases.
                    unsafe { cl.share_raw(int_ptr as gpubuf::opencl::opencl3::types::cl_mem) }
                })
                .py()?
                .into();
            let mut live = ADOPTED.lock();
            live.retain(|(_, w)| w.strong_count() > 0);
            live.push((int_ptr, Arc::downgrade(&m)));
            m
        }
    };
    if device.as_opencl().is_none_or(|b| b.context().get() as usize != memory.context_handle()) {
        return Err(crate::errors::to_py(Error::DeviceMismatch(
            "the buffer belongs to another OpenCL context than the owner's".into(),
        )));
    }
    let buffer = gpubuf::Buffer::from_memory(&device, gpubuf::device::Memory::OpenCl(memory));
    Ok(with_dtype!(d, T => {
        gpubuf::NDBuffer::<Device, T>::from_buffer_layout(buffer, layout).map(T::wrap).py()?
    }))
}
