//! DLPack export (`__dlpack__`, `__dlpack_device__`) of arrays in host memory (`kDLCPU`)
//! and CUDA device memory (`kDLCUDA`), and `gpubuf.from_dlpack`.
//!
//! The capsule is the legacy (unversioned) `"dltensor"` one, which every consumer accepts.
//! It holds a clone of the array (one reference count on its allocation or pool block),
//! released by the tensor's deleter: by the consumer once it is done, or by the capsule's
//! destructor when no consumer took it. A deleter running while the interpreter finalizes
//! (at exit) leaks the holder instead ([`crate::ffi_guard`]); no panic leaves either.
//!
//! The pure parts (the device tuple, the `stream` argument's meaning, building and reading
//! the tensor struct) are here and run on any machine; what needs the CUDA driver (the
//! stream dependency of an export, the adoption of an imported capsule) is in
//! `dlpack_cuda.rs`. Capsules are built only over an array's own memory (`__dlpack__`):
//! nothing reachable from Python wraps an address it is given in a capsule.

use crate::backend::PyBackend;
use crate::dtype::AnyArray;
use crate::errors::invalid;
use crate::interop::host_address;
use gpubuf::DType;
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use std::ffi::c_void;

pub use crate::dlpack_tensor::{
    read_tensor, ConsumerStream, DLManagedTensor, Tensor, DL_CPU, DL_CUDA, NAME, USED,
};
use crate::dlpack_tensor::{DLDataType, DLDevice, DLTensor};

/// What one exported tensor owns; `managed` first, so a pointer to it is one to the holder.
#[repr(C)]
struct Holder {
    managed: DLManagedTensor,
    shape: Vec<i64>,
    strides: Vec<i64>,
    _keep: Box<dyn std::any::Any + Send>,
}

/// Frees the holder of a tensor this module exported, attached to the interpreter so that
/// the Python objects it holds are released now (whichever thread the consumer deletes
/// from); leaks it when the interpreter is finalizing or gone (at exit). No panic leaves
/// it.
///
/// # Safety
/// `m` is null or the `managed` field of a `Holder` leaked by [`capsule`], not yet deleted.
unsafe extern "C" fn deleter(m: *mut DLManagedTensor) {
    crate::ffi_guard::no_unwind(|| {
        if !m.is_null() {
            // SAFETY: by the contract, `m` points to the first field of a leaked
            // `Box<Holder>` (repr(C), so the addresses agree) that nothing else frees.
            let holder = unsafe { Box::from_raw(m.cast::<Holder>()) };
            crate::ffi_guard::drop_attached(holder);
        }
    });
}

/// The capsule's destructor: deletes the tensor unless a consumer took it (and renamed the
/// capsule to `"used_dltensor"`). No panic leaves it.
///
/// # Safety
/// Called by Python with the GIL held, on a capsule made by [`capsule`].
unsafe extern "C" fn destructor(capsule: *mut pyo3::ffi::PyObject) {
    crate::ffi_guard::no_unwind(|| {
        // SAFETY: `capsule` is a live capsule object (the destructor's contract); IsValid
        // checks its name without raising.
        if unsafe { pyo3::ffi::PyCapsule_IsValid(capsule, NAME.as_ptr()) } != 1 {
            return;
        }
        // SAFETY: the capsule is valid under NAME (checked above), so this returns its
        // pointer: the `DLManagedTensor` leaked by `capsule`, never deleted (an unused
        // capsule).
        unsafe {
            let m = pyo3::ffi::PyCapsule_GetPointer(capsule, NAME.as_ptr()).cast::<DLManagedTensor>();
            if let Some(delete) = m.as_ref().and_then(|t| t.deleter) {
                delete(m);
            }
        }
    });
}

fn dl_dtype(d: DType) -> DLDataType {
    let code = match d {
        DType::I8 | DType::I16 | DType::I32 | DType::I64 => 0,
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => 1,
        DType::F16 | DType::F32 | DType::F64 => 2,
        // kDLBool, one byte per value.
        DType::Bool => 6,
        // kDLComplex: 64 bits for complex64, 128 for complex128.
        DType::Complex64 | DType::Complex128 => 5,
    };
    // Element sizes are 1 to 16 bytes.
    DLDataType { code, bits: (d.size() * 8) as u8, lanes: 1 }
}

/// A `"dltensor"` capsule of a tensor at `data` on `device` (`(device_type, device_id)`)
/// with `shape`, element `strides` and element type `d`, which owns `keep` until the
/// tensor is deleted.
///
/// # Errors
/// `InvalidArgumentError` for more axes than DLPack's `int32`, extents or strides that do
/// not fit in `int64`, or strides of another length than the shape; Python's error when
/// the capsule cannot be made.
pub fn capsule<'py>(
    py: Python<'py>,
    d: DType,
    shape: &[usize],
    strides: &[isize],
    data: u64,
    device: (i32, i32),
    keep: Box<dyn std::any::Any + Send>,
) -> PyResult<Bound<'py, PyAny>> {
    let ndim = i32::try_from(shape.len()).map_err(|_| invalid("too many axes for DLPack"))?;
    if strides.len() != shape.len() {
        return Err(invalid(format!("{} strides for {} axes", strides.len(), shape.len())));
    }
    let too_large = |_| invalid("an extent or stride does not fit in DLPack's int64");
    let mut shape: Vec<i64> =
        shape.iter().map(|&n| i64::try_from(n)).collect::<Result<_, _>>().map_err(too_large)?;
    let mut strides: Vec<i64> =
        strides.iter().map(|&s| i64::try_from(s)).collect::<Result<_, _>>().map_err(too_large)?;
    let tensor = DLTensor {
        data: data as usize as *mut c_void,
        device: DLDevice { device_type: device.0, device_id: device.1 },
        ndim,
        dtype: dl_dtype(d),
        shape: shape.as_mut_ptr(),
        strides: strides.as_mut_ptr(),
        byte_offset: 0,
    };
    let managed =
        DLManagedTensor { dl_tensor: tensor, manager_ctx: std::ptr::null_mut(), deleter: Some(deleter) };
    // Moving the Vecs into the box keeps their heap buffers (and the pointers above) valid.
    let holder = Box::into_raw(Box::new(Holder { managed, shape, strides, _keep: keep }));
    // SAFETY: `holder` was just leaked and is valid; the context points back at it.
    unsafe { (*holder).managed.manager_ctx = holder.cast::<c_void>() };
    // SAFETY: the pointer is non-null, the name a static C string, the destructor matches
    // the capsule's contract. With the GIL held (`py`).
    let capsule =
        unsafe { pyo3::ffi::PyCapsule_New(holder.cast::<c_void>(), NAME.as_ptr(), Some(destructor)) };
    if capsule.is_null() {
        // SAFETY: no capsule owns the holder: delete it here, once.
        unsafe { deleter(holder.cast::<DLManagedTensor>()) };
        return Err(PyErr::fetch(py));
    }
    // SAFETY: PyCapsule_New returned a new, owned reference.
    Ok(unsafe { Bound::from_owned_ptr(py, capsule) })
}

/// The meaning of `__dlpack__`'s `stream` for an array on `device_type`, after the array
/// API's rules: on the CPU only None; on CUDA None is the legacy default stream (1), 1 and
/// 2 the legacy and per-thread default streams, -1 no synchronisation, a larger int a
/// stream pointer; 0 is refused (ambiguous).
///
/// # Errors
/// `BufferError` for a stream on the CPU (only None is accepted there);
/// `InvalidArgumentError` for 0, an int below -1 or above `u64::MAX`, or a non-int.
pub fn consumer_stream(device_type: i32, stream: Option<&Bound<'_, PyAny>>) -> PyResult<ConsumerStream> {
    let stream = stream.filter(|s| !s.is_none());
    if device_type != DL_CUDA {
        return match stream {
            None => Ok(ConsumerStream::NoSync),
            Some(_) => Err(PyBufferError::new_err("DLPack export of host memory takes stream=None")),
        };
    }
    let Some(s) = stream else { return Ok(ConsumerStream::Cuda(1)) };
    if s.is_instance_of::<pyo3::types::PyBool>() {
        return Err(invalid("a DLPack stream is None or an int"));
    }
    let n: i128 = s.extract().map_err(|_| invalid("a DLPack stream is None or an int"))?;
    match n {
        -1 => Ok(ConsumerStream::NoSync),
        0 => Err(invalid(
            "DLPack stream 0 is ambiguous (use 1 for the legacy default stream, 2 for the per-thread one)",
        )),
        n => u64::try_from(n)
            .map(ConsumerStream::Cuda)
            .map_err(|_| invalid(format!("DLPack stream {n} is neither -1 nor a stream handle"))),
    }
}

/// The DLPack device of an array: `(kDLCPU, 0)` in host memory, `(kDLCUDA, ordinal)` on
/// a CUDA device, `None` elsewhere (OpenCL).
pub fn device_of(a: &AnyArray) -> Option<(i32, i32)> {
    if host_address(a).is_some() {
        return Some((DL_CPU, 0));
    }
    crate::dlpack_cuda::ordinal(a).and_then(|o| i32::try_from(o).ok()).map(|o| (DL_CUDA, o))
}

fn unsupported(a: &AnyArray) -> PyErr {
    PyBufferError::new_err(format!(
        "DLPack export of arrays on the {} backend is not supported (use to_numpy())",
        a.device().kind().name()
    ))
}

/// `__dlpack_device__`.
///
/// # Errors
/// `BufferError` for an array neither in host memory nor on CUDA.
pub fn device(a: &AnyArray) -> PyResult<(i32, i32)> {
    device_of(a).ok_or_else(|| unsupported(a))
}

/// `__dlpack__`: a capsule sharing the array's memory. On CUDA the consumer's `stream`
/// is made to wait for the work gpubuf queued on the array's backend (an event recorded
/// on its default stream), unless it is -1.
///
/// # Errors
/// `BufferError` for an array neither in host memory nor on CUDA, a `dl_device` other
/// than the array's, `copy=True`, or a stream for host memory; `InvalidArgumentError` for
/// a malformed stream or more axes than DLPack's `int32`; CUDA driver errors.
pub fn export<'py>(
    py: Python<'py>,
    a: &AnyArray,
    stream: Option<&Bound<'py, PyAny>>,
    dl_device: Option<&Bound<'py, PyAny>>,
    copy: Option<bool>,
) -> PyResult<Bound<'py, PyAny>> {
    let Some(dev) = device_of(a) else { return Err(unsupported(a)) };
    if let Some(want) = dl_device.filter(|d| !d.is_none()) {
        if want.extract::<(i32, i32)>().ok() != Some(dev) {
            return Err(PyBufferError::new_err("DLPack export to another device is not supported"));
        }
    }
    if copy == Some(true) {
        return Err(PyBufferError::new_err("DLPack export shares memory; copy the array first for a copy"));
    }
    let wait = consumer_stream(dev.0, stream)?;
    let data = if dev.0 == DL_CUDA {
        crate::dlpack_cuda::order_for_consumer(a, wait)?;
        crate::cuda::device_address(a)?
    } else {
        host_address(a).ok_or_else(|| unsupported(a))? as u64
    };
    capsule(py, a.dtype(), a.shape(), a.strides(), data, dev, Box::new(a.clone()))
}

/// An array from any object with ``__dlpack__`` (a numpy array, a PyTorch or CuPy tensor,
/// another gpubuf array) on ``backend``. Host memory (default backend: a new CPU device) is
/// shared without a copy on the CPU backend where ``NDBuffer.from_numpy`` would share it,
/// else copied. CUDA memory (``__dlpack_device__`` kDLCUDA; default backend: the default
/// CUDA device) is adopted without a copy by a CUDA backend of the same device: the
/// capsule is taken (renamed ``used_dltensor``), its deleter runs when the last gpubuf
/// view is gone, and the producer is kept alive until then; the producer orders its work
/// before gpubuf's default stream. An object without ``__dlpack__`` but with
/// ``__cuda_array_interface__`` is adopted as by ``NDBuffer.from_cuda_array_interface``.
///
/// Raises ``InvalidArgumentError`` for a CUDA array and a backend that is not CUDA;
/// ``DeviceMismatchError`` for a CUDA array of another device; ``DTypeMismatchError`` for a
/// dtype gpubuf has no type for.
///
/// # Errors
/// As the docstring says, as `NDBuffer.from_numpy` (or `from_cuda_array_interface`), and
/// whatever ``numpy.from_dlpack(obj)`` raises.
#[pyfunction]
#[pyo3(signature = (obj, backend = None))]
pub fn from_dlpack(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    backend: Option<&PyBackend>,
) -> PyResult<AnyArray> {
    let to_cuda = backend.is_none_or(|b| b.device.as_cuda().is_some());
    if obj.hasattr("__dlpack__")? && obj.hasattr("__dlpack_device__")? {
        let (kind, _): (i32, i32) = obj
            .call_method0("__dlpack_device__")?
            .extract()
            .map_err(|_| invalid("__dlpack_device__ returned no (device_type, device_id) pair of ints"))?;
        if kind == DL_CUDA {
            if !to_cuda {
                return Err(invalid(
                    "a CUDA DLPack array is adopted by a CUDA backend: pass backend=gpubuf.Backend(\"cuda\")",
                ));
            }
            return crate::dlpack_cuda::import(py, obj, backend);
        }
    } else if to_cuda && obj.hasattr("__cuda_array_interface__")? {
        return crate::cuda::import(py, obj, backend);
    }
    let np = py.import("numpy")?;
    let host = np.call_method1("from_dlpack", (obj,))?;
    crate::adopt::from_numpy(py, &host, crate::backend::device_of(backend), None)
}

/// What a consumer reads from an unconsumed ``"dltensor"`` capsule (which stays
/// unconsumed): ``(device, dtype name, shape, element strides, data + byte_offset)``.
///
/// # Errors
/// As [`read_tensor`]; `InvalidArgumentError` for an object that is not such a capsule.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn _read_dlpack_capsule(
    capsule: &Bound<'_, PyAny>,
) -> PyResult<((i32, i32), String, Vec<usize>, Vec<isize>, u64)> {
    let m = crate::dlpack_tensor::capsule_tensor(capsule)?;
    // SAFETY: `capsule_tensor` returned the pointer of a valid, unconsumed "dltensor"
    // capsule that `capsule` keeps alive for this call.
    let t = unsafe { read_tensor(m) }?;
    Ok((t.device, t.dtype.name().to_string(), t.shape, t.strides, t.data))
}

/// What ``__dlpack__`` makes of ``stream`` for an array on ``device_type`` (1 kDLCPU, 2
/// kDLCUDA): None for no synchronisation, else the ``CUstream`` handle made to wait.
///
/// # Errors
/// As [`consumer_stream`].
#[pyfunction]
#[pyo3(signature = (device_type, stream = None))]
pub fn _dlpack_consumer_stream(device_type: i32, stream: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    Ok(match consumer_stream(device_type, stream)? {
        ConsumerStream::NoSync => None,
        ConsumerStream::Cuda(h) => Some(h),
    })
}
