//! The CUDA half of DLPack: the stream dependency of an export (the consumer's stream
//! waits for an event recorded on the array's backend's default stream, where gpubuf
//! queues its copies) and the zero-copy import of a `kDLCUDA` capsule.
//!
//! On import gpubuf is the consumer: it passes its default stream as `stream` (a null
//! handle as 1, the legacy default stream), checks the tensor's device against the
//! backend's, takes the capsule (renaming it `used_dltensor`) and adopts the memory; the
//! tensor's deleter runs, with the GIL held, when the last gpubuf view is gone, and the
//! producer object is kept alive until then (both are leaked when that happens while the
//! interpreter finalizes, at exit).

use crate::backend::PyBackend;
use crate::dlpack_tensor::{read_tensor, ConsumerStream, DLManagedTensor, DL_CUDA, USED};
use crate::dtype::{dispatch, with_dtype, AnyArray, Wrap};
use crate::errors::{invalid, IntoPy};
use crate::numpy_mem::span_unaligned;
use gpubuf::cuda::cudarc::driver::sys::{cuStreamWaitEvent, CUresult};
use gpubuf::{Backend, BackendKind, Device, NDBuffer, Order};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The CUDA ordinal of an array's memory, `None` off CUDA.
pub fn ordinal(a: &AnyArray) -> Option<usize> {
    dispatch!(a, nd => nd.buffer().memory().as_cuda().map(|m| m.device_ordinal()))
}

/// Makes the consumer's stream wait for the work queued so far on the default stream of
/// the array's backend (nothing for [`ConsumerStream::NoSync`], or when it is that stream).
///
/// # Errors
/// `InvalidArgumentError` for an array off CUDA; `DriverError` when the driver refuses
/// the event or the wait (a handle that is not a stream of the array's context).
pub fn order_for_consumer(a: &AnyArray, wait: ConsumerStream) -> PyResult<()> {
    let ConsumerStream::Cuda(handle) = wait else { return Ok(()) };
    let cuda = dispatch!(a, nd => nd.backend().as_cuda().cloned())
        .ok_or_else(|| invalid("the array is not on the CUDA backend"))?;
    let stream = Backend::default_stream(&cuda);
    if stream.raw() as usize as u64 == handle {
        return Ok(());
    }
    let event = Backend::record_event(&cuda, stream).py()?;
    cuda.context().bind_to_thread().map_err(|e| invalid(e.to_string()))?;
    // SAFETY: `event` is a live event of this context (recorded above, alive until this
    // function returns; the wait captures its state when enqueued). `handle` is the
    // consumer's stream of this context, or 1 / 2 (the driver's legacy and per-thread
    // default streams), as the DLPack protocol requires of the consumer; the call only
    // enqueues a wait and reports an invalid handle as an error.
    let r = unsafe { cuStreamWaitEvent(handle as usize as _, event.raw(), 0) };
    if r != CUresult::CUDA_SUCCESS {
        return Err(crate::errors::to_py(gpubuf::Error::Driver {
            backend: BackendKind::Cuda,
            code: r as i64,
            message: format!("cuStreamWaitEvent on the consumer's stream {handle:#x}: {r:?}"),
        }));
    }
    Ok(())
}

/// A consumed tensor: its deleter runs (with the GIL held) when this drops, then the
/// producer object is released. When the interpreter is finalizing or gone (the last view
/// dropped at exit), both are leaked: the producer's deleter may need Python.
struct Taken {
    managed: *mut DLManagedTensor,
    producer: Option<Py<PyAny>>,
}

// SAFETY: the pointer is used once, in `drop`, to call the producer's deleter with the GIL
// held (from whichever thread drops the last view), which the DLPack protocol allows: the
// consumer owns the tensor after renaming the capsule. Nothing else reads it.
unsafe impl Send for Taken {}
// SAFETY: no `&Taken` method touches the pointer.
unsafe impl Sync for Taken {}

impl Drop for Taken {
    fn drop(&mut self) {
        let (m, producer) = (self.managed, self.producer.take());
        crate::ffi_guard::no_unwind(|| {
            if !crate::ffi_guard::python_alive() {
                std::mem::forget(producer);
                return;
            }
            Python::attach(|_py| {
                // SAFETY: `m` is the tensor of the capsule this module renamed to
                // `used_dltensor` (so no one else deletes it); deleted here, once.
                unsafe {
                    if let Some(delete) = m.as_ref().and_then(|t| t.deleter) {
                        delete(m);
                    }
                }
                drop(producer);
            });
        });
    }
}

/// `gpubuf.from_dlpack` of an object whose `__dlpack_device__` is kDLCUDA.
///
/// # Errors
/// `InvalidArgumentError` for a `backend` that is not CUDA, a capsule that is not a
/// kDLCUDA `"dltensor"`, or strides that leave the address space; `DeviceMismatchError`
/// for another device than the backend's; as [`read_tensor`]; the CUDA backend's errors
/// adopting the range; what the producer's `__dlpack__` raises.
pub fn import(py: Python<'_>, obj: &Bound<'_, PyAny>, backend: Option<&PyBackend>) -> PyResult<AnyArray> {
    let device = match backend {
        Some(b) => b.device.clone(),
        None => py.detach(Device::cuda).py()?,
    };
    let Some(cuda) = device.as_cuda().cloned() else {
        return Err(invalid("a CUDA DLPack array is adopted by a CUDA backend"));
    };
    let raw = Backend::default_stream(&cuda).raw() as usize as u64;
    let kwargs = PyDict::new(py);
    kwargs.set_item("stream", if raw == 0 { 1 } else { raw })?;
    let cap = obj.call_method("__dlpack__", (), Some(&kwargs))?;
    let m = crate::dlpack_tensor::capsule_tensor(&cap)?;
    // SAFETY: the pointer of a valid, unconsumed "dltensor" capsule, alive while `cap` is.
    let t = unsafe { read_tensor(m) }?;
    if t.device.0 != DL_CUDA {
        return Err(invalid(format!("the capsule's device type is {}, not kDLCUDA", t.device.0)));
    }
    let own = cuda.context().ordinal();
    if usize::try_from(t.device.1) != Ok(own) {
        return Err(crate::errors::to_py(gpubuf::Error::DeviceMismatch(format!(
            "the DLPack tensor is on CUDA device {}, the backend on device {own}",
            t.device.1
        ))));
    }
    if t.shape.contains(&0) {
        // Nothing to share; the capsule stays unconsumed and its destructor deletes it.
        return Ok(
            with_dtype!(t.dtype, T => NDBuffer::<Device, T>::empty(&device, &t.shape, Order::C).map(T::wrap).py()?),
        );
    }
    let item = t.dtype.size();
    let bytes: Vec<isize> = t
        .strides
        .iter()
        .map(|&s| s.checked_mul(item as isize).ok_or_else(|| invalid("a DLPack stride in bytes overflows")))
        .collect::<PyResult<_>>()?;
    let addr =
        usize::try_from(t.data).map_err(|_| invalid("the DLPack address does not fit this machine"))?;
    let span = span_unaligned(addr, &t.shape, &bytes, item)
        .ok_or_else(|| invalid("the DLPack tensor leaves the address space"))?;
    // Take the tensor: from here on this module deletes it (through `Taken`), also when
    // the adoption fails.
    // SAFETY: `cap` is a live capsule (GIL held); SetName only changes its name.
    if unsafe { pyo3::ffi::PyCapsule_SetName(cap.as_ptr(), USED.as_ptr()) } != 0 {
        return Err(PyErr::fetch(py));
    }
    let guard: Box<dyn std::any::Any + Send + Sync> =
        Box::new(Taken { managed: m, producer: Some(obj.clone().unbind()) });
    let (base, len) = (span.base as u64, span.len);
    let buffer = py
        .detach(move || {
            // SAFETY: `base .. base + len` spans the tensor's elements (its data pointer,
            // byte offset, shape and strides), device memory of this device (checked
            // above; adopt_ptr checks it is one allocation) that the producer keeps valid
            // until the deleter runs, which `guard` does when the last view drops. The
            // producer ordered its work before gpubuf's default stream (the `stream`
            // passed to `__dlpack__`).
            unsafe { cuda.adopt_ptr(base, len, guard) }
        })
        .py()?;
    crate::cuda::adopted_array(&device, buffer, t.dtype, t.shape, span.strides, span.offset)
}
