//! The CUDA array interface (version 3, numba's `__cuda_array_interface__`): exported by
//! `NDBuffer`s on the CUDA backend, and taken in without a copy by
//! `NDBuffer.from_cuda_array_interface` and `gpubuf.from_dlpack`.
//!
//! The dict is built by [`interface_dict`] and read by [`parse`], pure functions of the
//! numbers (tested from Python through `_cuda_array_interface` and
//! `_parse_cuda_array_interface`); the CUDA-only part is the pointer and stream of an
//! array ([`export`]) and the adoption of a foreign pointer ([`import`]).
//!
//! Synchronisation, as the protocol's version 3 asks: the exported `stream` is the
//! backend's default stream, on which gpubuf queues its copies, so a consumer orders its
//! work after gpubuf's by waiting on it (queued work of a `HaloDataTransformer` runs on
//! the transformer's stream: call its `synchronize()` first, as pace requires before the
//! quantities are read). On import, a producer's `stream` is synchronised before the
//! memory is adopted.

use crate::backend::PyBackend;
use crate::dtype::{numpy_dtype, parse_dtype, with_dtype, AnyArray, Wrap};
use crate::errors::{invalid, IntoPy};
use crate::interop::byte_strides;
use crate::numpy_mem::span_unaligned;
use gpubuf::{DType, Device, Layout, NDBuffer, Order};
use pyo3::exceptions::PyAttributeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// Whether byte `strides` are the C-contiguous ones of `shape` (axes of extent 1 and
/// empty arrays place no constraint, as in numpy).
pub fn c_contiguous(shape: &[usize], strides: &[isize], item: usize) -> bool {
    if shape.contains(&0) {
        return true;
    }
    let mut want = item as i128;
    for (&n, &s) in shape.iter().zip(strides).rev() {
        if n != 1 && s as i128 != want {
            return false;
        }
        want = want.saturating_mul(n as i128);
    }
    true
}

/// The interface dict of an array of `shape`, byte `strides` and element type `d` whose
/// element `[0, ..., 0]` is at device address `ptr`, ordered after `stream` (a `CUstream`
/// handle; `None`: no synchronisation needed). `strides` is None for C-contiguous arrays,
/// `data` is `(0, False)` for an empty one; a null stream handle is given as 1, the
/// legacy default stream, since the protocol reserves 0.
///
/// # Errors
/// Python errors building the dict.
pub fn interface_dict<'py>(
    py: Python<'py>,
    shape: &[usize],
    strides: &[isize],
    d: DType,
    ptr: u64,
    stream: Option<u64>,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    let empty = shape.contains(&0);
    dict.set_item("version", 3)?;
    dict.set_item("shape", PyTuple::new(py, shape)?)?;
    dict.set_item("typestr", numpy_dtype(py, d).getattr("str")?)?;
    dict.set_item("data", (if empty { 0 } else { ptr }, false))?;
    if c_contiguous(shape, strides, d.size()) {
        dict.set_item("strides", py.None())?;
    } else {
        dict.set_item("strides", PyTuple::new(py, strides)?)?;
    }
    dict.set_item("stream", stream.map(|s| if s == 0 { 1 } else { s }))?;
    Ok(dict)
}

/// A foreign array as the interface describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Foreign {
    /// The element type.
    pub dtype: DType,
    /// The extents.
    pub shape: Vec<usize>,
    /// The lowest byte address of an element (the pointer for an empty array).
    pub base: u64,
    /// Bytes from `base` to the end of the highest addressed element (0 when empty).
    pub len: usize,
    /// Strides in elements.
    pub strides: Vec<isize>,
    /// Element offset of `[0, ..., 0]` from `base`.
    pub offset: usize,
    /// The stream to synchronise before use (`None`: none).
    pub stream: Option<u64>,
}

/// Reads an interface dict (versions 0 to 3).
///
/// # Errors
/// `InvalidArgumentError` for a missing or malformed entry, a read-only array (gpubuf
/// arrays are writable), a mask, a stream of 0 (reserved by the protocol), strides that
/// are not whole elements or an extent that leaves the address space;
/// `DTypeMismatchError` for a type gpubuf has no element type for.
pub fn parse(dict: &Bound<'_, PyAny>) -> PyResult<Foreign> {
    let get = |k: &str| -> PyResult<Option<Bound<'_, PyAny>>> {
        let v = dict.get_item(k).ok().filter(|v| !v.is_none());
        Ok(v)
    };
    let need = |k: &str| get(k)?.ok_or_else(|| invalid(format!("__cuda_array_interface__ has no {k:?}")));
    let version: i64 = need("version")?.extract().map_err(|_| invalid("version is an int"))?;
    if !(0..=3).contains(&version) {
        return Err(invalid(format!("__cuda_array_interface__ version {version} (0 to 3 are known)")));
    }
    let shape: Vec<i128> = need("shape")?.extract().map_err(|_| invalid("shape is a tuple of ints"))?;
    let shape = shape
        .into_iter()
        .map(|n| usize::try_from(n).map_err(|_| invalid(format!("extent {n} is negative or too large"))))
        .collect::<PyResult<Vec<_>>>()?;
    let dtype = parse_dtype(&need("typestr")?)?;
    let (ptr, readonly): (u64, bool) =
        need("data")?.extract().map_err(|_| invalid("data is (pointer, read-only flag)"))?;
    if readonly {
        return Err(invalid("a read-only CUDA array cannot be adopted (gpubuf arrays are writable)"));
    }
    if get("mask")?.is_some() {
        return Err(invalid("masked CUDA arrays are not supported"));
    }
    let item = dtype.size();
    let strides: Vec<isize> = match get("strides")? {
        Some(s) => s.extract().map_err(|_| invalid("strides is None or a tuple of ints"))?,
        None => {
            let c = Layout::contiguous(&shape, Order::C).py()?;
            byte_strides_of(c.strides(), item)?
        }
    };
    if strides.len() != shape.len() {
        return Err(invalid(format!("{} strides for {} axes", strides.len(), shape.len())));
    }
    let stream = match get("stream")? {
        None => None,
        Some(s) => match s.extract::<u64>().map_err(|_| invalid("stream is None or an int"))? {
            0 => return Err(invalid("stream 0 is reserved by the CUDA array interface")),
            s => Some(s),
        },
    };
    if shape.contains(&0) {
        let c = Layout::contiguous(&shape, Order::C).py()?;
        return Ok(Foreign {
            dtype,
            shape,
            base: ptr,
            len: 0,
            strides: c.strides().to_vec(),
            offset: 0,
            stream,
        });
    }
    let addr = usize::try_from(ptr).map_err(|_| invalid("the pointer does not fit this machine"))?;
    let s = span_unaligned(addr, &shape, &strides, item)
        .ok_or_else(|| invalid("strides are not whole elements, or the array leaves the address space"))?;
    Ok(Foreign {
        dtype,
        shape,
        base: s.base as u64,
        len: s.len,
        strides: s.strides,
        offset: s.offset,
        stream,
    })
}

fn byte_strides_of(elems: &[isize], item: usize) -> PyResult<Vec<isize>> {
    elems
        .iter()
        .map(|&s| s.checked_mul(item as isize).ok_or_else(|| invalid("a stride in bytes overflows")))
        .collect()
}

/// The device address of element `[0, ..., 0]` of an array on the CUDA backend.
///
/// # Errors
/// `AttributeError` on other backends (so `hasattr` is False for the interface there);
/// `InvalidArgumentError` when the offset overflows.
pub fn device_address(a: &AnyArray) -> PyResult<u64> {
    let no = || {
        PyAttributeError::new_err(format!(
            "the array is on the {} backend, not CUDA",
            a.device().kind().name()
        ))
    };
    crate::dtype::dispatch!(a, nd => {
        let cuda = nd.buffer().memory().as_cuda().ok_or_else(no)?;
        let skip = nd.layout().offset().checked_mul(nd.dtype().size()).and_then(|o| o.checked_add(nd.buffer().offset()));
        let skip = skip.and_then(|o| u64::try_from(o).ok()).ok_or_else(|| invalid("the array's offset overflows"))?;
        cuda.device_ptr().checked_add(skip).ok_or_else(|| invalid("the array's address overflows"))
    })
}

/// `__cuda_array_interface__` of an array: on the CUDA backend its device pointer and
/// the backend's default stream.
///
/// # Errors
/// `AttributeError` on other backends (so `hasattr` is False there).
pub fn export<'py>(py: Python<'py>, a: &AnyArray) -> PyResult<Bound<'py, PyDict>> {
    let ptr = device_address(a)?;
    let stream = crate::dtype::dispatch!(a, nd => {
        let cuda = nd.backend().as_cuda().ok_or_else(|| PyAttributeError::new_err("the array's backend is not CUDA"))?;
        gpubuf::Backend::default_stream(cuda).raw() as usize as u64
    });
    interface_dict(py, a.shape(), &byte_strides(a)?, a.dtype(), ptr, Some(stream))
}

/// The array an object's `__cuda_array_interface__` describes, on `backend` (default: a
/// new handle of the default CUDA device), sharing its memory; the object is kept alive
/// until the last gpubuf view drops. The producer's stream is synchronised first.
///
/// # Errors
/// As [`parse`]; `InvalidArgumentError` for an object without the interface or a
/// `backend` that is not CUDA; the CUDA backend's errors for memory it does not know as
/// one allocation of its device (`DeviceMismatchError`, `InvalidArgumentError`).
pub fn import(py: Python<'_>, obj: &Bound<'_, PyAny>, backend: Option<&PyBackend>) -> PyResult<AnyArray> {
    let dict = obj
        .getattr("__cuda_array_interface__")
        .map_err(|_| invalid("the object has no __cuda_array_interface__"))?;
    let f = parse(&dict)?;
    let device = match backend {
        Some(b) => b.device.clone(),
        None => py.detach(Device::cuda).py()?,
    };
    let Some(cuda) = device.as_cuda().cloned() else {
        return Err(invalid(
            "CUDA arrays are adopted by a CUDA backend: pass backend=gpubuf.Backend(\"cuda\")",
        ));
    };
    if f.len == 0 {
        let shape = f.shape.clone();
        return Ok(
            with_dtype!(f.dtype, T => NDBuffer::<Device, T>::empty(&device, &shape, Order::C).map(T::wrap).py()?),
        );
    }
    let guard: Box<dyn std::any::Any + Send + Sync> = Box::new(obj.clone().unbind());
    let (base, len, stream) = (f.base, f.len, f.stream);
    let buffer = py
        .detach(move || -> gpubuf::Result<_> {
            if let Some(s) = stream {
                cuda.context().bind_to_thread().map_err(|e| gpubuf::Error::invalid(e.to_string()))?;
                // SAFETY: the producer names in `stream` a stream of its context on which
                // the memory is safe to use (the protocol's contract; 1 and 2 are the
                // driver's legacy and per-thread default streams); synchronising it only
                // waits.
                let r = unsafe { gpubuf::cuda::cudarc::driver::sys::cuStreamSynchronize(s as usize as _) };
                if r != gpubuf::cuda::cudarc::driver::sys::CUresult::CUDA_SUCCESS {
                    return Err(gpubuf::Error::invalid(format!("cuStreamSynchronize({s:#x}) failed: {r:?}")));
                }
            }
            // SAFETY: `base .. base + len` spans the elements of the producer's array (its
            // pointer, shape and strides), which the protocol keeps valid while the
            // exporting object lives; `guard` holds that object until the last view
            // drops. adopt_ptr checks the range is one allocation of this device.
            unsafe { cuda.adopt_ptr(base, len, guard) }
        })
        .py()?;
    adopted_array(&device, buffer, f.dtype, f.shape, f.strides, f.offset)
}

/// The array of `dtype`, `shape`, element `strides` and element `offset` over a buffer the
/// CUDA backend of `device` adopted.
///
/// # Errors
/// `InvalidArgumentError` for a layout outside the buffer.
pub(crate) fn adopted_array(
    device: &Device,
    buffer: gpubuf::Buffer<gpubuf::cuda::CudaBackend>,
    dtype: DType,
    shape: Vec<usize>,
    strides: Vec<isize>,
    offset: usize,
) -> PyResult<AnyArray> {
    let memory = std::sync::Arc::clone(buffer.memory());
    drop(buffer);
    let memory = std::sync::Arc::try_unwrap(memory)
        .map_err(|_| invalid("the adopted CUDA memory is shared (not expected)"))?;
    let buffer = gpubuf::Buffer::from_memory(device, gpubuf::device::Memory::Cuda(memory.into()));
    let layout = Layout::new(shape, strides, offset).py()?;
    Ok(with_dtype!(dtype, T => {
        NDBuffer::<Device, T>::from_buffer_layout(buffer, layout).map(T::wrap).py()?
    }))
}

/// The interface dict for the given numbers (`dtype` any numpy dtype gpubuf has), as
/// `NDBuffer.__cuda_array_interface__` builds it on the CUDA backend.
///
/// Raises ``DTypeMismatchError`` for another dtype, ``InvalidArgumentError`` for strides
/// of another length than the shape.
///
/// # Errors
/// As the docstring says.
#[pyfunction]
#[pyo3(signature = (shape, strides, dtype, ptr, stream = None))]
pub fn _cuda_array_interface<'py>(
    py: Python<'py>,
    shape: Vec<usize>,
    strides: Vec<isize>,
    dtype: &Bound<'py, PyAny>,
    ptr: u64,
    stream: Option<u64>,
) -> PyResult<Bound<'py, PyDict>> {
    if strides.len() != shape.len() {
        return Err(invalid(format!("{} strides for {} axes", strides.len(), shape.len())));
    }
    interface_dict(py, &shape, &strides, parse_dtype(dtype)?, ptr, stream)
}

/// What ``NDBuffer.from_cuda_array_interface`` reads from an interface dict:
/// ``(dtype name, shape, base, nbytes, element strides, element offset, stream)``.
///
/// Raises as the import does for a malformed dict.
///
/// # Errors
/// As [`parse`].
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn _parse_cuda_array_interface(
    dict: &Bound<'_, PyAny>,
) -> PyResult<(String, Vec<usize>, u64, usize, Vec<isize>, usize, Option<u64>)> {
    let f = parse(dict)?;
    Ok((f.dtype.name().to_string(), f.shape, f.base, f.len, f.strides, f.offset, f.stream))
}
