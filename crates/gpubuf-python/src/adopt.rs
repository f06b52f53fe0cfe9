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
use gpubuf::cpu::{interop::ADOPT_ALIGN, CpuMemory};
use gpubuf::device::Memory;
use gpubuf::{Buffer, DType, Device, Layout, NDBuffer};
use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use std::ptr::NonNull;

/// Where an adoptable array's elements lie: the span's first byte, its length in bytes,
/// the element strides and the offset (in elements) of element `[0, ..., 0]` in the span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    /// First byte of the span.
    pub base: usize,
    /// Bytes from the lowest to the end of the highest addressed element.
    pub len: usize,
    /// Strides in elements.
    pub strides: Vec<isize>,
    /// Element offset of `[0, ..., 0]` from `base`.
    pub offset: usize,
}

/// The span of an array with data pointer `data`, `shape`, byte `strides` and `item`
/// bytes per element; `None` when it cannot be adopted by the CPU backend (empty, strides
/// not whole elements, not on an [`ADOPT_ALIGN`] boundary, or arithmetic that does not
/// fit).
pub fn span(data: usize, shape: &[usize], strides: &[isize], item: usize) -> Option<Span> {
    span_unaligned(data, shape, strides, item).filter(|s| s.base % ADOPT_ALIGN == 0)
}

/// [`span`] without the alignment rule (device memory adopted by the CUDA backend).
pub fn span_unaligned(data: usize, shape: &[usize], strides: &[isize], item: usize) -> Option<Span> {
    if shape.contains(&0) || shape.len() != strides.len() || item == 0 {
        return None;
    }
    let item_i = i128::try_from(item).ok()?;
    let elems = strides
        .iter()
        .map(|&s| (s as i128 % item_i == 0).then(|| isize::try_from(s as i128 / item_i).ok()).flatten())
        .collect::<Option<Vec<isize>>>()?;
    let (base, len, low) = extent(data, shape, strides, item)?;
    let offset = usize::try_from(-low / item_i).ok()?;
    Some(Span { base, len, strides: elems, offset })
}

/// The bytes a non-empty array's elements lie in: `(first byte, length, low)` where `low`
/// (at most 0) is the first byte's distance from element `[0, ..., 0]`; `None` when a
/// number does not fit or the range passes the end of the address space.
fn extent(data: usize, shape: &[usize], strides: &[isize], item: usize) -> Option<(usize, usize, i128)> {
    let (mut low, mut high) = (0i128, 0i128);
    for (&n, &s) in shape.iter().zip(strides) {
        let reach = i128::try_from(s).ok()?.checked_mul(i128::try_from(n).ok()? - 1)?;
        if reach < 0 {
            low = low.checked_add(reach)?;
        } else {
            high = high.checked_add(reach)?;
        }
    }
    let start = i128::try_from(data).ok()?.checked_add(low)?;
    let len = high.checked_sub(low)?.checked_add(i128::try_from(item).ok()?)?;
    let (start, len) = (usize::try_from(start).ok()?, usize::try_from(len).ok()?);
    start.checked_add(len)?;
    Some((start, len, low))
}

/// The address of a numpy array's element `[0, ..., 0]` (numpy's `ctypes.data`, read
/// from the array object without building a ctypes object: this runs for every quantity
/// of every halo call).
pub fn data_ptr(arr: &Bound<'_, PyUntypedArray>) -> usize {
    // SAFETY: `as_array_ptr` points to the live array object `arr` holds a reference to,
    // and `_PyArray_GET_ITEM_DATA` to its fields (as rust-numpy's own `data()` reads them);
    // `data` is a plain pointer value numpy set at creation, read under the GIL.
    unsafe { (*numpy::npyffi::_PyArray_GET_ITEM_DATA(arr.as_array_ptr())).data as usize }
}

/// numpy's `writeable` flag of an array, read from the array object (`arr.flags.writeable`
/// without building a flags object).
pub fn writeable(arr: &Bound<'_, PyUntypedArray>) -> bool {
    // SAFETY: as in `data_ptr`: a read of the live array's `flags` field under the GIL
    // (rust-numpy reads the same field to check writeability).
    let flags = unsafe { (*numpy::npyffi::_PyArray_GET_ITEM_DATA(arr.as_array_ptr())).flags };
    flags & numpy::npyffi::NPY_ARRAY_WRITEABLE != 0
}

/// The span of a numpy array, when it may be adopted (`contiguous_only`: C-contiguous
/// arrays only).
///
/// # Errors
/// Python errors reading the array's flags or data pointer.
pub fn numpy_span(arr: &Bound<'_, PyUntypedArray>, contiguous_only: bool) -> PyResult<Option<Span>> {
    if contiguous_only && !arr.is_c_contiguous() {
        return Ok(None);
    }
    if !writeable(arr) {
        return Ok(None);
    }
    let data = data_ptr(arr);
    let item = numpy::PyArrayDescrMethods::itemsize(&arr.dtype());
    Ok(span(data, arr.shape(), arr.strides(), item))
}

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
    // initialised. Foreign accesses during gpubuf calls are excluded by the rule stated to
    // Python users (docs/python.md: no access from another thread while a gpubuf call on
    // the same array runs); this crate forms no Rust reference to the bytes.
    let memory = unsafe { CpuMemory::adopt_raw(ptr, s.len, owner) }.map_err(crate::errors::to_py)?;
    let buffer = Buffer::from_memory(device, Memory::Cpu(memory.into()));
    let layout = Layout::new(arr.shape().to_vec(), s.strides, s.offset).map_err(crate::errors::to_py)?;
    let array = with_dtype!(dtype, T => {
        NDBuffer::<Device, T>::from_buffer_layout(buffer, layout).map(T::wrap).map_err(crate::errors::to_py)?
    });
    Ok(Some(array))
}

/// The bytes the elements of a numpy array with data pointer `data`, `shape`, byte
/// `strides` and `item` bytes per element lie in, as `(first byte, length)`; `None` when
/// it has no element. Strides need not be whole elements. Numbers that do not fit (no
/// numpy array has them) give the whole address space, so that a caller copies.
pub fn byte_extent(data: usize, shape: &[usize], strides: &[isize], item: usize) -> Option<(usize, usize)> {
    if shape.contains(&0) {
        return None;
    }
    Some(extent(data, shape, strides, item).map_or((0, usize::MAX), |(start, len, _)| (start, len)))
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
