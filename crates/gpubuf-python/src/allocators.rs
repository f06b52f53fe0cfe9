//! `gpubuf.ImmediateAllocator` and `gpubuf.DeferredAllocator`: pyopencl's allocator
//! classes. Each is made over a `gpubuf.Backend`, or as pyopencl's over a
//! `pyopencl.CommandQueue` (immediate) or `pyopencl.Context` (deferred), whose very
//! context and queue it then allocates in ([`crate::pyopencl`]). Called with a size, an
//! allocator returns new memory as pyopencl's do (None for 0 bytes): a `pyopencl.Buffer`
//! for an allocator made from pyopencl objects, a uint8 `NDBuffer` otherwise.
//! `MemoryPool` reads the device and the flavour.

use crate::args::bytes_arg;
use crate::backend::PyBackend;
use crate::dtype::{AnyArray, Wrap};
use crate::errors::{invalid, IntoPy};
use crate::pyopencl::{self, Kind};
use gpubuf::{Allocator, Buffer, Device, NDBuffer, Order};
use pyo3::prelude::*;

/// pyopencl's ``mem_flags.READ_WRITE``, the only flags gpubuf's memory has.
const READ_WRITE: u64 = 1;

/// The device of an allocator's first argument, and whether it came from pyopencl.
fn source(py: Python<'_>, obj: &Bound<'_, PyAny>, want: Kind, class: &str) -> PyResult<(Device, bool)> {
    if let Ok(b) = obj.cast::<PyBackend>() {
        return Ok((b.get().device.clone(), false));
    }
    let wanted = match want {
        Kind::Queue => "CommandQueue",
        Kind::Context => "Context",
    };
    match pyopencl::kind_of(obj) {
        Some(k) if k == want => match pyopencl::device_of(py, obj)? {
            Some(d) => Ok((d, true)),
            None => Err(invalid(format!("{class} takes a gpubuf.Backend or a pyopencl.{wanted}"))),
        },
        _ => Err(invalid(format!(
            "{class} takes a gpubuf.Backend or a pyopencl.{wanted}, not {}",
            obj.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        ))),
    }
}

/// pyopencl's ``mem_flags`` argument: gpubuf's memory is read-write, so only
/// ``READ_WRITE`` (or nothing) is taken.
fn flags(mem_flags: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    let Some(f) = mem_flags.filter(|f| !f.is_none()) else { return Ok(()) };
    let v: i128 = f.extract().map_err(|_| invalid("mem_flags is an int (pyopencl.mem_flags)"))?;
    if v == i128::from(READ_WRITE) {
        Ok(())
    } else {
        Err(invalid(format!(
            "mem_flags {v:#x}: gpubuf's allocators make READ_WRITE memory only (mem_flags.READ_WRITE)"
        )))
    }
}

/// What calling an allocator returns: None for 0 bytes, else new memory.
fn call(
    py: Python<'_>,
    device: &Device,
    from_cl: bool,
    immediate: bool,
    size: &Bound<'_, PyAny>,
) -> PyResult<Py<PyAny>> {
    let bytes = bytes_arg(size)?;
    if bytes == 0 {
        return Ok(py.None());
    }
    let dev = device.clone();
    let mem = py
        .detach(move || if immediate { dev.allocate_immediate(bytes) } else { dev.allocate(bytes) })
        .py()?;
    if from_cl {
        let handle = pyopencl::cl_mem(&mem)?;
        // pyopencl's Buffer retains the handle; gpubuf's reference goes with `mem`.
        let out = pyopencl::buffer(py, handle)?;
        drop(mem);
        return Ok(out.unbind());
    }
    let buffer = Buffer::from_memory(device, mem);
    let array: AnyArray =
        NDBuffer::<Device, u8>::from_buffer(buffer, &[bytes], Order::C).map(u8::wrap).py()?;
    Ok(array.into_pyobject(py)?.into_any().unbind())
}

/// pyopencl's ``ImmediateAllocator(queue, mem_flags=READ_WRITE)``: memory exists when the
/// call returns. ``queue`` is a ``pyopencl.CommandQueue`` (its context and queue are used)
/// or a ``gpubuf.Backend``. ``allocator(size)`` returns a ``pyopencl.Buffer`` (a uint8
/// ``NDBuffer`` for a backend), None for 0 bytes; ``OutOfMemoryError`` when the device has
/// no room.
#[pyclass(name = "ImmediateAllocator", module = "gpubuf", frozen)]
pub struct PyImmediateAllocator {
    pub(crate) device: Device,
    /// Made from pyopencl objects: blocks go to pyopencl as its buffers.
    pub(crate) pyopencl: bool,
}

#[pymethods]
impl PyImmediateAllocator {
    #[new]
    #[pyo3(signature = (queue, mem_flags = None))]
    fn new(py: Python<'_>, queue: &Bound<'_, PyAny>, mem_flags: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        flags(mem_flags)?;
        let (device, pyopencl) = source(py, queue, Kind::Queue, "ImmediateAllocator")?;
        Ok(PyImmediateAllocator { device, pyopencl })
    }

    fn __call__(&self, py: Python<'_>, size: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        call(py, &self.device, self.pyopencl, true, size)
    }

    /// The backend allocated from.
    #[getter]
    fn backend(&self) -> PyBackend {
        PyBackend::new(self.device.clone())
    }
}

/// pyopencl's ``DeferredAllocator(context, mem_flags=READ_WRITE)``: the device may back
/// the memory on first use. ``context`` is a ``pyopencl.Context`` or a
/// ``gpubuf.Backend``; calls as ``ImmediateAllocator``'s.
#[pyclass(name = "DeferredAllocator", module = "gpubuf", frozen)]
pub struct PyDeferredAllocator {
    pub(crate) device: Device,
    /// Made from pyopencl objects: blocks go to pyopencl as its buffers.
    pub(crate) pyopencl: bool,
}

#[pymethods]
impl PyDeferredAllocator {
    #[new]
    #[pyo3(signature = (context, mem_flags = None))]
    fn new(
        py: Python<'_>,
        context: &Bound<'_, PyAny>,
        mem_flags: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        flags(mem_flags)?;
        let (device, pyopencl) = source(py, context, Kind::Context, "DeferredAllocator")?;
        Ok(PyDeferredAllocator { device, pyopencl })
    }

    fn __call__(&self, py: Python<'_>, size: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        call(py, &self.device, self.pyopencl, false, size)
    }

    /// The backend allocated from.
    #[getter]
    fn backend(&self) -> PyBackend {
        PyBackend::new(self.device.clone())
    }
}
