//! DLPack export (`__dlpack__`, `__dlpack_device__`) of arrays in host memory, and
//! `gpubuf.from_dlpack`.
//!
//! The capsule is the legacy (unversioned) `"dltensor"` one, which every consumer accepts.
//! It holds a clone of the array (one reference count on its allocation or pool block),
//! released by the tensor's deleter: by the consumer once it is done, or by the capsule's
//! destructor when no consumer took it.

use crate::backend::PyBackend;
use crate::dtype::AnyArray;
use crate::interop::host_address;
use crate::ndbuffer::PyNDBuffer;
use gpubuf::DType;
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use std::ffi::{c_void, CStr};

/// `kDLCPU`.
const DL_CPU: i32 = 1;
const NAME: &CStr = c"dltensor";

#[repr(C)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// What one exported tensor owns; `managed` first, so a pointer to it is one to the holder.
#[repr(C)]
struct Holder {
    managed: DLManagedTensor,
    shape: Vec<i64>,
    strides: Vec<i64>,
    _keep: AnyArray,
}

/// Frees the holder of a tensor this module exported.
///
/// # Safety
/// `m` is the `managed` field of a `Holder` leaked by [`export`], not yet deleted.
unsafe extern "C" fn deleter(m: *mut DLManagedTensor) {
    if !m.is_null() {
        // SAFETY: by the contract, `m` points to the first field of a leaked `Box<Holder>`
        // (repr(C), so the addresses agree) that nothing else frees.
        drop(unsafe { Box::from_raw(m.cast::<Holder>()) });
    }
}

/// The capsule's destructor: deletes the tensor unless a consumer took it (and renamed the
/// capsule to `"used_dltensor"`).
///
/// # Safety
/// Called by Python with the GIL held, on a capsule made by [`export`].
unsafe extern "C" fn destructor(capsule: *mut pyo3::ffi::PyObject) {
    // SAFETY: `capsule` is a live capsule object (the destructor's contract); IsValid
    // checks its name without raising.
    if unsafe { pyo3::ffi::PyCapsule_IsValid(capsule, NAME.as_ptr()) } != 1 {
        return;
    }
    // SAFETY: the capsule is valid under NAME (checked above), so this returns its pointer:
    // the `DLManagedTensor` leaked by `export`, never deleted (an unused capsule).
    unsafe {
        let m = pyo3::ffi::PyCapsule_GetPointer(capsule, NAME.as_ptr()).cast::<DLManagedTensor>();
        if let Some(delete) = m.as_ref().and_then(|t| t.deleter) {
            delete(m);
        }
    }
}

fn dl_dtype(d: DType) -> DLDataType {
    let code = match d {
        DType::I32 | DType::I64 => 0,
        DType::U8 | DType::U32 => 1,
        DType::F16 | DType::F32 | DType::F64 => 2,
    };
    // Element sizes are 1 to 8 bytes.
    DLDataType { code, bits: (d.size() * 8) as u8, lanes: 1 }
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
/// `BufferError` for an array outside host memory.
pub fn device(a: &AnyArray) -> PyResult<(i32, i32)> {
    host_address(a).map(|_| (DL_CPU, 0)).ok_or_else(|| unsupported(a))
}

/// `__dlpack__`: a capsule sharing the array's memory.
///
/// # Errors
/// `BufferError` for an array outside host memory, a `dl_device` other than the CPU, or
/// `copy=True`; `InvalidArgumentError` for an array with more axes than DLPack's `int32`.
pub fn export<'py>(
    py: Python<'py>,
    a: &AnyArray,
    dl_device: Option<&Bound<'py, PyAny>>,
    copy: Option<bool>,
) -> PyResult<Bound<'py, PyAny>> {
    let Some(addr) = host_address(a) else { return Err(unsupported(a)) };
    if let Some(dev) = dl_device {
        if dev.extract::<(i32, i32)>().ok() != Some((DL_CPU, 0)) {
            return Err(PyBufferError::new_err("DLPack export to another device is not supported"));
        }
    }
    if copy == Some(true) {
        return Err(PyBufferError::new_err("DLPack export shares memory; copy the array first for a copy"));
    }
    let ndim =
        i32::try_from(a.shape().len()).map_err(|_| crate::errors::invalid("too many axes for DLPack"))?;
    // Shapes and strides come from a valid layout: extents and strides fit in isize, so in i64.
    let mut shape: Vec<i64> = a.shape().iter().map(|&n| n as i64).collect();
    let mut strides: Vec<i64> = a.strides().iter().map(|&s| s as i64).collect();
    let tensor = DLTensor {
        data: addr as *mut c_void,
        device: DLDevice { device_type: DL_CPU, device_id: 0 },
        ndim,
        dtype: dl_dtype(a.dtype()),
        shape: shape.as_mut_ptr(),
        strides: strides.as_mut_ptr(),
        byte_offset: 0,
    };
    let managed =
        DLManagedTensor { dl_tensor: tensor, manager_ctx: std::ptr::null_mut(), deleter: Some(deleter) };
    // Moving the Vecs into the box keeps their heap buffers (and the pointers above) valid.
    let holder = Box::into_raw(Box::new(Holder { managed, shape, strides, _keep: a.clone() }));
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

/// An array from any object with ``__dlpack__`` in host memory (a numpy array, a PyTorch
/// or CuPy host tensor, another gpubuf array) on ``backend`` (default: a new CPU device):
/// shared without a copy on the CPU backend where ``NDBuffer.from_numpy`` would share it,
/// else copied. An object with ``__cuda_array_interface__`` (a CuPy array, a CUDA
/// tensor), with ``backend`` None or a CUDA backend, is adopted without a copy as by
/// ``NDBuffer.from_cuda_array_interface``.
///
/// Raises ``DTypeMismatchError`` for a dtype gpubuf has no type for.
///
/// # Errors
/// As `NDBuffer.from_numpy` (or `from_cuda_array_interface`), and whatever
/// ``numpy.from_dlpack(obj)`` raises.
#[pyfunction]
#[pyo3(signature = (obj, backend = None))]
pub fn from_dlpack(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    backend: Option<&PyBackend>,
) -> PyResult<PyNDBuffer> {
    let to_cuda = backend.is_none_or(|b| b.device.as_cuda().is_some());
    if to_cuda && obj.hasattr("__cuda_array_interface__")? {
        return crate::cuda::import(py, obj, backend);
    }
    let np = py.import("numpy")?;
    let host = np.call_method1("from_dlpack", (obj,))?;
    PyNDBuffer::from_numpy(py, &host, backend, None)
}
