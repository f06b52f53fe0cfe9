//! DLPack's C structs (the legacy, unversioned `DLManagedTensor`) and what a consumer
//! reads from one: the device, element type, shape, strides and address, checked.

use crate::errors::invalid;
use gpubuf::{DType, Layout, Order};
use pyo3::prelude::*;
use std::ffi::{c_void, CStr};

/// `kDLCPU`.
pub const DL_CPU: i32 = 1;
/// `kDLCUDA`.
pub const DL_CUDA: i32 = 2;
/// The name of an unconsumed capsule.
pub const NAME: &CStr = c"dltensor";
/// The name a consumer gives the capsule it took.
pub const USED: &CStr = c"used_dltensor";

/// What the consumer's `stream` argument asks of the producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerStream {
    /// No synchronisation (`stream=-1` on CUDA; `None` for host memory).
    NoSync,
    /// Order the array's pending work before the work on this `CUstream` handle (1: the
    /// legacy default stream, 2: the per-thread default stream, above: a stream pointer).
    Cuda(u64),
}

/// `DLDevice`.
#[repr(C)]
pub(crate) struct DLDevice {
    pub(crate) device_type: i32,
    pub(crate) device_id: i32,
}

/// `DLDataType`.
#[repr(C)]
pub(crate) struct DLDataType {
    pub(crate) code: u8,
    pub(crate) bits: u8,
    pub(crate) lanes: u16,
}

/// `DLTensor`.
#[repr(C)]
pub(crate) struct DLTensor {
    pub(crate) data: *mut c_void,
    pub(crate) device: DLDevice,
    pub(crate) ndim: i32,
    pub(crate) dtype: DLDataType,
    pub(crate) shape: *mut i64,
    pub(crate) strides: *mut i64,
    pub(crate) byte_offset: u64,
}

/// `DLManagedTensor`: a tensor, its producer's context, and the deleter that frees both.
#[repr(C)]
pub struct DLManagedTensor {
    pub(crate) dl_tensor: DLTensor,
    pub(crate) manager_ctx: *mut c_void,
    pub(crate) deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// What a tensor describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tensor {
    /// `(device_type, device_id)`.
    pub device: (i32, i32),
    /// The element type.
    pub dtype: DType,
    /// The extents.
    pub shape: Vec<usize>,
    /// Strides in elements (C-contiguous ones when the tensor gives none).
    pub strides: Vec<isize>,
    /// The address of element `[0, ..., 0]`: `data + byte_offset`.
    pub data: u64,
}

fn dtype_of(t: &DLDataType) -> PyResult<DType> {
    let d = match (t.code, t.bits, t.lanes) {
        (0, 8, 1) => DType::I8,
        (0, 16, 1) => DType::I16,
        (0, 32, 1) => DType::I32,
        (0, 64, 1) => DType::I64,
        (1, 8, 1) => DType::U8,
        (1, 16, 1) => DType::U16,
        (1, 32, 1) => DType::U32,
        (1, 64, 1) => DType::U64,
        (6, 8, 1) => DType::Bool,
        (2, 16, 1) => DType::F16,
        (2, 32, 1) => DType::F32,
        (2, 64, 1) => DType::F64,
        (5, 64, 1) => DType::Complex64,
        (5, 128, 1) => DType::Complex128,
        (code, bits, lanes) => {
            return Err(crate::errors::unsupported_dtype(&format!(
                "DLPack type code {code}, {bits} bits, {lanes} lanes"
            )))
        }
    };
    Ok(d)
}

/// Reads a tensor.
///
/// # Errors
/// `InvalidArgumentError` for a null tensor, a negative `ndim` or extent, a null shape
/// with axes, or an address that overflows; `DTypeMismatchError` for an element type
/// gpubuf has none for (vector lanes included).
///
/// # Safety
/// `m` is null or points to a live `DLManagedTensor` whose `shape` (and `strides`, unless
/// null) point to `ndim` `int64`s, as DLPack's producer contract says.
pub unsafe fn read_tensor(m: *const DLManagedTensor) -> PyResult<Tensor> {
    // SAFETY: null or live, by the contract.
    let Some(m) = (unsafe { m.as_ref() }) else { return Err(invalid("a null DLPack tensor")) };
    let t = &m.dl_tensor;
    let ndim = usize::try_from(t.ndim).map_err(|_| invalid(format!("DLPack ndim {} is negative", t.ndim)))?;
    if ndim > 0 && t.shape.is_null() {
        return Err(invalid("a DLPack tensor with axes and no shape"));
    }
    let read = |p: *const i64| -> &[i64] {
        if ndim == 0 || p.is_null() {
            &[]
        } else {
            // SAFETY: non-null, and `ndim` int64s long (the function's contract).
            unsafe { std::slice::from_raw_parts(p, ndim) }
        }
    };
    let shape = read(t.shape)
        .iter()
        .map(|&n| usize::try_from(n).map_err(|_| invalid(format!("DLPack extent {n} is negative"))))
        .collect::<PyResult<Vec<_>>>()?;
    let strides = if t.strides.is_null() {
        Layout::contiguous(&shape, Order::C).map_err(crate::errors::to_py)?.strides().to_vec()
    } else {
        read(t.strides)
            .iter()
            .map(|&s| isize::try_from(s).map_err(|_| invalid(format!("DLPack stride {s} does not fit"))))
            .collect::<PyResult<Vec<_>>>()?
    };
    let data = (t.data as usize as u64)
        .checked_add(t.byte_offset)
        .ok_or_else(|| invalid("the DLPack tensor's data + byte_offset overflows"))?;
    Ok(Tensor {
        device: (t.device.device_type, t.device.device_id),
        dtype: dtype_of(&t.dtype)?,
        shape,
        strides,
        data,
    })
}

/// The tensor of an unconsumed `"dltensor"` capsule (valid while the capsule is neither
/// consumed nor destroyed).
///
/// # Errors
/// `InvalidArgumentError` for anything else (a used capsule, another object).
pub fn capsule_tensor(capsule: &Bound<'_, PyAny>) -> PyResult<*mut DLManagedTensor> {
    let name = NAME;
    // SAFETY: `capsule` is a live object (held by the Bound, GIL held); IsValid accepts any
    // object and only reads it.
    if unsafe { pyo3::ffi::PyCapsule_IsValid(capsule.as_ptr(), name.as_ptr()) } != 1 {
        return Err(invalid("not an unconsumed \"dltensor\" capsule"));
    }
    // SAFETY: a valid capsule under that name (checked above): this returns its pointer.
    let p = unsafe { pyo3::ffi::PyCapsule_GetPointer(capsule.as_ptr(), name.as_ptr()) };
    Ok(p.cast::<DLManagedTensor>())
}
