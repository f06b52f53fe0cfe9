//! numpy arrays adopted by the CPU backend without a copy
//! ([`gpubuf::cpu::CpuMemory::adopt_raw`]): the array's bytes become the `NDBuffer`'s
//! memory and the numpy array is kept alive until the last gpubuf view of it drops.
//!
//! An array is adopted when it lives in host memory gpubuf may write (the CPU backend,
//! numpy's `writeable` flag), its bytes start on an 8-byte boundary and its strides are
//! whole elements; anything else is copied. The adopted range is the span of the array's
//! elements (from the lowest to the highest addressed one), so a strided or flipped
//! array is adopted with its own strides. Accesses from Python to the same memory while a
//! gpubuf call on it runs on another thread are the caller's data race, as for two
//! threads writing one numpy array (docs/python.md, "zero-copy rules").
//!
//! The same sharing runs the other way (a gpubuf array seen through numpy), so a numpy
//! value given to a gpubuf write may lie in the very allocation written: [`unaliased`]
//! copies such a value first, as numpy copies an assignment's overlapping value, and
//! [`aliases_other_allocation`] finds a gpubuf array over another allocation's bytes.

use crate::dtype::{dispatch, with_dtype, AnyArray, Wrap};
pub use crate::numpy_mem::{byte_extent, data_ptr, numpy_span, span, span_unaligned, writeable, Span};
use gpubuf::cpu::CpuMemory;
use gpubuf::device::Memory;
use gpubuf::{Buffer, DType, Device, Layout, NDBuffer};
use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use std::ptr::NonNull;

/// `arr` (of gpubuf dtype `dtype`) adopted on `device` without a copy, or `None` when
/// `device` is not a CPU device or the array cannot be adopted (see the module docs).
///
/// # Errors
/// Python errors reading the array's attributes; gpubuf errors building the view.
pub fn adopt(
    arr: &Bound<'_, PyUntypedArray>,
    dtype: DType,
    device: &Device,
    contiguous_only: bool,
) -> PyResult<Option<AnyArray>> {
    if device.as_cpu().is_none() {
        return Ok(None);
    }
    let Some(s) = numpy_span(arr, contiguous_only)? else {
        return Ok(None);
    };
    let Some(ptr) = NonNull::new(s.base as *mut u8) else {
        return Ok(None);
    };
    let owner: Box<dyn std::any::Any + Send + Sync> = Box::new(arr.clone().into_any().unbind());
    // SAFETY: `ptr..ptr + s.len` is the span of a live, writeable numpy array's elements
    // (computed from its own data pointer, shape and strides), inside the memory its base
    // object owns; `owner` holds a reference to the array, and through it to that base, so
    // the memory is not freed while the adopted memory lives. numpy's elements are
    // initialised. The CPU backend forms `&[u8]`/`&mut [u8]` over these bytes only inside
    // its calls, under a borrow of the range; foreign (numpy) accesses that could overlap
    // such a reference are excluded by the rule stated to Python users (docs/python.md: no
    // access from another thread while a gpubuf call on the same array runs).
    let memory = unsafe { CpuMemory::adopt_raw(ptr, s.len, owner) }.map_err(crate::errors::to_py)?;
    let buffer = Buffer::from_memory(device, Memory::Cpu(memory.into()));
    let layout = Layout::new(arr.shape().to_vec(), s.strides, s.offset).map_err(crate::errors::to_py)?;
    let array = with_dtype!(dtype, T => {
        NDBuffer::<Device, T>::from_buffer_layout(buffer, layout).map(T::wrap).map_err(crate::errors::to_py)?
    });
    Ok(Some(array))
}

/// Whether the elements of the numpy array `arr` share a byte with `memory`. Only CPU
/// memory is host memory numpy can see; other backends' memory shares none.
pub fn shares_memory(arr: &Bound<'_, PyUntypedArray>, memory: &Memory) -> bool {
    let Some(cpu) = memory.as_cpu() else { return false };
    let item = numpy::PyArrayDescrMethods::itemsize(&arr.dtype());
    byte_extent(data_ptr(arr), arr.shape(), arr.strides(), item)
        .is_some_and(|(start, len)| cpu.overlaps_host(start, len))
}

/// `arr`, or, when its elements share bytes with `memory` (a numpy view of the gpubuf
/// array being written, or of memory it adopted), a copy of it in memory of its own (a
/// base-class numpy array, C order), as numpy copies an assignment's overlapping value:
/// no Rust reference to the value's bytes is formed while the copy into `memory` holds
/// the allocation's.
///
/// # Errors
/// numpy's errors making the copy (no memory).
pub fn unaliased<'py>(
    arr: Bound<'py, PyUntypedArray>,
    memory: &Memory,
) -> PyResult<Bound<'py, PyUntypedArray>> {
    if !shares_memory(&arr, memory) {
        return Ok(arr);
    }
    let np = arr.py().import("numpy")?;
    let kwargs = pyo3::types::IntoPyDict::into_py_dict([("copy", true), ("subok", false)], arr.py())?;
    Ok(np.call_method("array", (&arr,), Some(&kwargs))?.cast_into::<PyUntypedArray>()?)
}

/// Whether `a` lives in another CPU allocation than `memory` over some of the same bytes
/// (a numpy array adopted twice, or gpubuf memory adopted back from a numpy view of it).
/// The CPU backend refuses to copy between such a pair; a copy of `a` can be copied.
pub fn aliases_other_allocation(a: &AnyArray, memory: &Memory) -> bool {
    use gpubuf::DeviceMemory;
    dispatch!(a, nd => {
        match (nd.buffer().memory().as_cpu(), memory.as_cpu()) {
            (Some(x), Some(y)) => x.id() != y.id() && y.overlaps_host(x.as_ptr() as usize, x.len()),
            _ => false,
        }
    })
}

/// The allocation an array's buffer is a range of.
pub fn memory_of(a: &AnyArray) -> &Memory {
    dispatch!(a, nd => nd.buffer().memory())
}

/// `NDBuffer.from_numpy(array, backend, copy)` without the class: `array` (a numpy array,
/// or anything `numpy.asarray` takes) on `device`, adopted without a copy where
/// [`adopt`] may (never for `copy=True`), else uploaded in C order.
///
/// # Errors
/// `InvalidArgumentError` for `copy=False` and an array that cannot be shared;
/// `DTypeMismatchError` for a dtype gpubuf lacks; numpy's conversion errors; allocation
/// and driver errors.
pub fn from_numpy(
    py: Python<'_>,
    array: &Bound<'_, PyAny>,
    device: Device,
    copy: Option<bool>,
) -> PyResult<AnyArray> {
    let arr = match array.cast::<PyUntypedArray>() {
        Ok(a) => a.clone(),
        Err(_) => {
            let np = py.import("numpy")?;
            np.call_method1("asarray", (array,))?.cast_into::<PyUntypedArray>()?
        }
    };
    let dtype = crate::dtype::from_numpy_dtype(&arr.dtype())?;
    if copy != Some(true) {
        if let Some(array) = adopt(&arr, dtype, &device, true)? {
            return Ok(array);
        }
        if copy == Some(false) {
            return Err(crate::errors::invalid(
                "copy=False: the array cannot be shared (it must be C-contiguous, writeable, \
                 8-byte aligned, non-empty and on the CPU backend)",
            ));
        }
    }
    with_dtype!(dtype, T => upload::<T>(&arr, device))
}

/// Uploads a numpy array of element type `T` (a copy, in C order).
fn upload<T: Wrap>(arr: &Bound<'_, PyUntypedArray>, device: Device) -> PyResult<AnyArray> {
    use crate::errors::IntoPy;
    if arr.ndim() > crate::dtype::MAX_VIEW_AXES {
        // Past rust-numpy's 32 axes: the C-order elements as one axis, reshaped here.
        let flat = arr.call_method1("reshape", (-1,))?.cast_into::<PyUntypedArray>()?;
        let shape = arr.shape().to_vec();
        let nd = upload::<T>(&flat, device)?;
        return dispatch!(nd, nd => nd.reshape(&shape).map(Wrap::wrap).py());
    }
    let arr = crate::dtype::viewable(arr.clone())?;
    let typed = arr.cast::<numpy::PyArrayDyn<T>>()?;
    let ro = numpy::PyArrayMethods::try_readonly(typed).map_err(|e| crate::errors::invalid(e.to_string()))?;
    let view = ro.as_array();
    arr.py().detach(move || NDBuffer::<Device, T>::from_ndarray(&device, view)).py().map(T::wrap)
}
