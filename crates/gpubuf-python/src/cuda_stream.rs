//! Foreign CUDA streams as gpubuf streams: the stream argument of dolphin's `Bufferizer`,
//! given as CuPy, pycuda, numba or CUDA Python do.
//!
//! A stream is read from, in this order: an int (the raw `CUstream`), the
//! `__cuda_stream__()` protocol (CUDA Python, cuda.core: a `(version, handle)` pair),
//! CuPy's `.ptr`, pycuda's and numba's `.handle` (an int, or a ctypes pointer with
//! `.value`). The handle is checked to belong to the backend's context before gpubuf
//! wraps it (borrowed: gpubuf never destroys it); the object that owns it is kept alive by
//! whoever keeps the gpubuf stream.

use crate::errors::{invalid, to_py};
use gpubuf::{Device, Error};
use pyo3::prelude::*;

/// The raw handle of a stream object, as the module docs list.
///
/// # Errors
/// `InvalidArgumentError` for an object that is none of these.
pub fn handle(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    let as_int = |v: &Bound<'_, PyAny>| -> Option<usize> {
        if v.is_instance_of::<pyo3::types::PyBool>() {
            return None;
        }
        v.extract::<usize>()
            .ok()
            .or_else(|| v.getattr("value").ok()?.extract::<Option<usize>>().ok().map(|h| h.unwrap_or(0)))
    };
    if let Some(h) = as_int(obj) {
        return Ok(h);
    }
    if let Ok(proto) = obj.call_method0("__cuda_stream__") {
        if let Some(h) = proto.extract::<(usize, usize)>().ok().map(|(_, h)| h) {
            return Ok(h);
        }
        return Err(invalid("__cuda_stream__() must return a (version, handle) pair of ints"));
    }
    for attr in ["ptr", "handle"] {
        if let Some(h) = obj.getattr(attr).ok().as_ref().and_then(as_int) {
            return Ok(h);
        }
    }
    Err(invalid(format!(
        "a CUDA stream is an int handle or an object with __cuda_stream__, .ptr (CuPy) or .handle (pycuda, numba), \
         not {}",
        obj.get_type().name().map(|n| n.to_string()).unwrap_or_default()
    )))
}

/// A gpubuf stream of `device` (CUDA) over the foreign stream `obj`.
///
/// # Errors
/// `InvalidArgumentError` as [`handle`]; `DeviceMismatchError` off CUDA or for a stream of
/// another context.
pub fn foreign(device: &Device, obj: &Bound<'_, PyAny>) -> PyResult<gpubuf::device::Stream> {
    let raw = handle(obj)?;
    let Some(cuda) = device.as_cuda() else {
        return Err(to_py(Error::DeviceMismatch(format!(
            "a CUDA stream was given, but the backend is {}: pass backend=gpubuf.Backend(\"cuda\") or none",
            device.kind().name()
        ))));
    };
    let cuda = cuda.clone();
    let stream = obj.py().detach(move || -> gpubuf::Result<_> {
        use gpubuf::cuda::cudarc::driver::sys;
        cuda.context().bind_to_thread().map_err(|e| Error::invalid(e.to_string()))?;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: cuStreamGetCtx only reads the handle; an invalid one is an error code
        // (the caller's object owns a stream by the protocols above).
        let r = unsafe { sys::cuStreamGetCtx(raw as sys::CUstream, &mut ctx) };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(Error::invalid(format!(
                "cuStreamGetCtx({raw:#x}) failed: {r:?}: not a live CUDA stream"
            )));
        }
        if ctx != cuda.context().cu_ctx() {
            return Err(Error::DeviceMismatch("the stream belongs to another CUDA context".into()));
        }
        // SAFETY: a live stream of this context (checked above); the caller keeps its
        // owner alive while the gpubuf stream is used (the bufferizer holds the object),
        // and gpubuf orders its own work on it.
        let borrowed = unsafe { cuda.context().wrap_borrowed_stream(raw as sys::CUstream) };
        cuda.stream_from_cudarc(borrowed)
    });
    Ok(gpubuf::device::Stream::Cuda(stream.map_err(to_py)?))
}
