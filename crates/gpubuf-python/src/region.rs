//! Basic indexing of `gpubuf.NDBuffer`: `a[key]` as a view (no copy) and `a[key] = value`
//! as one region copy, numpy's rules for ints, slices (any step), `Ellipsis` and `None`.
//!
//! A view is a new [`Layout`] over the same buffer, checked by `Layout::new` and
//! `NDBuffer::from_buffer_layout`, so no user number wraps on its way to a kernel. A
//! numpy value is written by `NDBuffer::write_region_with` (gpubuf-buffer): straight into
//! a contiguous region, else through a staging array (from a pool when one is given) and
//! one cached plan. A scalar fills the region on the device. A value that shares memory
//! with the array written is copied first, as numpy does ([`crate::adopt::unaliased`]).

use crate::dtype::{dispatch, numpy_dtype, AnyArray, Wrap};
use crate::errors::{invalid, unsupported_dtype, IntoPy};
use crate::gil::GilAllocator;
use gpubuf::buffer::RegionPlans;
use gpubuf::ndarray::ArrayViewD;
use gpubuf::{Backend as _, Device, Error, Layout, MemoryPool, NDBuffer, Order};
use numpy::{PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyEllipsis, PySlice, PySliceMethods, PyTuple};

/// One item of a key, resolved against its axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Index {
    /// An integer (already made non-negative and checked): the axis is dropped.
    At(usize),
    /// A slice: `len` elements from `start`, `step` apart.
    Range {
        /// First index taken.
        start: usize,
        /// Distance between taken indices (never 0).
        step: isize,
        /// Number of indices taken.
        len: usize,
    },
    /// `None` (numpy's `newaxis`): a new axis of extent 1.
    NewAxis,
}

fn out_of_bounds(axis: usize, i: i128, len: usize) -> PyErr {
    let start = usize::try_from(i.unsigned_abs()).unwrap_or(usize::MAX);
    Error::OutOfBounds { what: format!("index {i} on axis {axis}"), start, end: start.saturating_add(1), len }
        .into_py_err()
}

trait IntoPyErr {
    fn into_py_err(self) -> PyErr;
}

impl IntoPyErr for Error {
    fn into_py_err(self) -> PyErr {
        crate::errors::to_py(self)
    }
}

/// Resolves `key` (an int, slice, `Ellipsis`, `None` or a tuple of them) against `shape`.
///
/// # Errors
/// `OutOfBoundsError` for an integer outside its axis or more indices than axes;
/// `InvalidArgumentError` for a second `Ellipsis`, a zero step, or anything else (lists,
/// arrays and booleans are advanced keys, which [`crate::fancy`] takes).
pub fn parse_key(key: &Bound<'_, PyAny>, shape: &[usize]) -> PyResult<Vec<Index>> {
    let items: Vec<Bound<'_, PyAny>> = match key.cast::<PyTuple>() {
        Ok(t) => t.iter().collect(),
        Err(_) => vec![key.clone()],
    };
    let consuming = items.iter().filter(|i| !i.is_none() && !i.is(PyEllipsis::get(key.py()))).count();
    if consuming > shape.len() {
        return Err(Error::OutOfBounds {
            what: "indices (more than the array has axes)".into(),
            start: 0,
            end: consuming,
            len: shape.len(),
        }
        .into_py_err());
    }
    let mut out = Vec::with_capacity(shape.len() + items.len());
    let mut axis = 0;
    let mut seen_ellipsis = false;
    for item in &items {
        if item.is_none() {
            out.push(Index::NewAxis);
        } else if item.is(PyEllipsis::get(key.py())) {
            if seen_ellipsis {
                return Err(invalid("an index can only have a single ellipsis ('...')"));
            }
            seen_ellipsis = true;
            let skip = shape.len() - consuming;
            for &n in &shape[axis..axis + skip] {
                out.push(Index::Range { start: 0, step: 1, len: n });
            }
            axis += skip;
        } else if let Ok(s) = item.cast::<PySlice>() {
            out.push(slice_index(s, shape[axis])?);
            axis += 1;
        } else {
            out.push(Index::At(int_index(item, axis, shape[axis])?));
            axis += 1;
        }
    }
    for &n in &shape[axis..] {
        out.push(Index::Range { start: 0, step: 1, len: n });
    }
    Ok(out)
}

fn int_index(item: &Bound<'_, PyAny>, axis: usize, len: usize) -> PyResult<usize> {
    let fancy =
        || invalid("only integers, slices, '...', None, integer arrays and boolean arrays are valid indices");
    if item.is_instance_of::<pyo3::types::PyBool>() || !item.hasattr("__index__")? {
        return Err(fancy());
    }
    let index = item.call_method0("__index__").map_err(|_| fancy())?;
    // An int past i128 is outside every axis.
    let i: i128 = index.extract().or_else(|_| {
        let negative = index.lt(0).map_err(|_| fancy())?;
        Ok::<_, PyErr>(if negative { i128::MIN } else { i128::MAX })
    })?;
    let n = i128::try_from(len).map_err(|_| invalid("axis too long"))?;
    let j = if i < 0 { i + n } else { i };
    if !(0..n).contains(&j) {
        return Err(out_of_bounds(axis, i, len));
    }
    usize::try_from(j).map_err(|_| out_of_bounds(axis, i, len))
}

fn slice_index(s: &Bound<'_, PySlice>, len: usize) -> PyResult<Index> {
    let step = s.getattr("step")?;
    if !step.is_none() && step.extract::<i128>().is_ok_and(|v| v == 0) {
        return Err(invalid("slice step cannot be zero"));
    }
    let n = isize::try_from(len).map_err(|_| invalid("axis too long"))?;
    let r = s.indices(n).map_err(|e| invalid(format!("a slice of ints or None: {e}")))?;
    let count = r.slicelength;
    let start = if count == 0 { 0 } else { usize::try_from(r.start).map_err(|_| invalid("slice start"))? };
    Ok(Index::Range { start, step: r.step, len: count })
}

/// The view of `nd` that `items` (from [`parse_key`]) select.
///
/// # Errors
/// [`Error::InvalidArgument`] when a stride or offset overflows; layout errors.
pub fn view_of<T: gpubuf::Element>(
    nd: &NDBuffer<Device, T>,
    items: &[Index],
) -> gpubuf::Result<NDBuffer<Device, T>> {
    let overflow = || Error::invalid("the view's strides or offset do not fit");
    let (mut shape, mut strides) = (Vec::with_capacity(items.len()), Vec::with_capacity(items.len()));
    let mut offset = i128::try_from(nd.layout().offset()).map_err(|_| overflow())?;
    let mut axis = 0;
    let mut empty = false;
    for &it in items {
        let stride = || nd.strides().get(axis).copied().ok_or_else(overflow);
        match it {
            Index::At(i) => {
                let step = i128::try_from(i).map_err(|_| overflow())?.checked_mul(stride()? as i128);
                offset = offset.checked_add(step.ok_or_else(overflow)?).ok_or_else(overflow)?;
                axis += 1;
            }
            Index::Range { start, step, len } => {
                let s = stride()?;
                if len > 0 {
                    let at = i128::try_from(start).map_err(|_| overflow())?.checked_mul(s as i128);
                    offset = offset.checked_add(at.ok_or_else(overflow)?).ok_or_else(overflow)?;
                } else {
                    empty = true;
                }
                shape.push(len);
                // An axis of at most one element never steps: a huge step is no overflow.
                strides.push(if len <= 1 { s } else { s.checked_mul(step).ok_or_else(overflow)? });
                axis += 1;
            }
            Index::NewAxis => {
                shape.push(1);
                strides.push(0);
            }
        }
    }
    let offset =
        if empty { nd.layout().offset() } else { usize::try_from(offset).map_err(|_| overflow())? };
    let layout = Layout::new(shape, strides, offset)?;
    NDBuffer::from_buffer_layout(nd.buffer().clone(), layout)
}

/// `a[key]`: the view `key` selects, sharing `array`'s memory.
///
/// # Errors
/// As [`parse_key`] and [`view_of`].
pub fn get(array: &AnyArray, key: &Bound<'_, PyAny>) -> PyResult<AnyArray> {
    if crate::fancy::is_fancy(key)? {
        return crate::fancy::get(array, key);
    }
    let items = parse_key(key, array.shape())?;
    dispatch!(array, nd => view_of(nd, &items).map(Wrap::wrap).py())
}

/// What `a[key] = value` writes: a `gpubuf.NDBuffer`'s array, or any other Python object.
pub enum Value<'a, 'py> {
    /// The array of a `gpubuf.NDBuffer`.
    Array(AnyArray),
    /// A scalar, a numpy array, or anything `numpy.asarray` takes.
    Object(&'a Bound<'py, PyAny>),
}

/// `a[key] = value` (with `pool` for staging): a `gpubuf.NDBuffer` of the same dtype and
/// shape is copied on the device; a scalar is converted by numpy's own assignment (its
/// `OverflowError` for an int past the dtype) and fills the region; anything else goes
/// through `numpy.asarray` in this array's dtype and is uploaded, broadcast to the
/// region's shape.
///
/// # Errors
/// As [`get`]; `DTypeMismatchError` for another gpubuf dtype, `ShapeMismatchError` when the
/// value does not broadcast, `DeviceMismatchError` for an array or pool of another device;
/// numpy's errors for a value it cannot convert; allocation and driver errors.
pub fn set(
    array: &AnyArray,
    key: &Bound<'_, PyAny>,
    value: Value<'_, '_>,
    pool: Option<&MemoryPool<GilAllocator>>,
) -> PyResult<()> {
    let py = key.py();
    if crate::fancy::is_fancy(key)? {
        // The value converted and broadcast as a basic assignment converts it, into a
        // device array of the selection's shape, then scattered (numpy's last-wins).
        let (flat, shape) = crate::fancy::flat_indices(array.shape(), key)?;
        let values = crate::fancy::empty_like(array, &shape)?;
        set(&values, PyEllipsis::get(py).as_any(), value, pool)?;
        return crate::fancy::put(py, array, flat, values);
    }
    let region = get(array, key)?;
    if let Some(p) = pool {
        if !p.allocator().device.same_device(array.device()) {
            return Err(
                Error::DeviceMismatch("the staging pool allocates on another device".into()).into_py_err()
            );
        }
    }
    let value = match value {
        Value::Object(v) => v,
        Value::Array(src) => {
            if src.dtype() != region.dtype() {
                return Err(Error::DTypeMismatch { expected: region.dtype(), got: src.dtype() }.into_py_err());
            }
            return py
                .detach(move || {
                    // Another allocation over the same bytes: copied first, as numpy would
                    // (the backend copies between allocations as if they were disjoint).
                    if crate::adopt::aliases_other_allocation(&src, crate::adopt::memory_of(&region)) {
                        let own = dispatch!(&src, nd => nd.copy().map(Wrap::wrap))?;
                        return copy_between(&region, &own);
                    }
                    copy_between(&region, &src)
                })
                .py();
        }
    };
    let np = py.import("numpy")?;
    let dtype = numpy_dtype(py, region.dtype());
    let arr = if value.cast::<PyUntypedArray>().is_err() && np.call_method1("ndim", (value,))?.eq(0)? {
        // A scalar goes through numpy's own assignment, as in `x[key] = value`, which
        // refuses what does not fit (an int64 scalar past int32, NaN into an integer),
        // where `asarray(value, dtype)` would wrap it.
        let one = np.call_method1("empty", (PyTuple::empty(py), &dtype))?;
        one.set_item(PyTuple::empty(py), value)?;
        one
    } else {
        np.call_method("asarray", (value,), Some(&[("dtype", dtype)].into_py_dict(py)?))?
    };
    let mut arr = arr.cast_into::<PyUntypedArray>()?;
    if arr.ndim() > 0 && arr.shape() != region.shape() {
        let b = np.call_method1("broadcast_to", (&arr, PyTuple::new(py, region.shape())?)).map_err(|_| {
            Error::ShapeMismatch { expected: region.shape().to_vec(), got: arr.shape().to_vec() }
                .into_py_err()
        })?;
        arr = b.cast_into::<PyUntypedArray>()?;
    }
    // A value in the memory written (a numpy view of this array, or memory it adopted) is
    // copied first, as numpy copies an overlapping value.
    let arr = crate::adopt::unaliased(arr, crate::adopt::memory_of(&region))?;
    dispatch!(&region, nd => upload(nd, &arr, pool))
}

fn copy_between(dst: &AnyArray, src: &AnyArray) -> gpubuf::Result<()> {
    macro_rules! arm {
        ($($v:ident),*) => {
            match (dst, src) {
                $((AnyArray::$v(d), AnyArray::$v(s)) => d.copy_from(s),)*
                _ => Err(Error::DTypeMismatch { expected: dst.dtype(), got: src.dtype() }),
            }
        };
    }
    arm!(U8, I32, U32, I64, I8, I16, U16, U64, F16, F32, F64, Bool, C64, C128)
}

/// Writes the numpy array (or 0-d scalar) `arr` of `T` into the view `region`.
fn upload<T: Wrap>(
    region: &NDBuffer<Device, T>,
    arr: &Bound<'_, PyUntypedArray>,
    pool: Option<&MemoryPool<GilAllocator>>,
) -> PyResult<()> {
    // A strided value is made C-contiguous by numpy (one pass in C) rather than gathered
    // element by element through a Rust view.
    let arr = if arr.ndim() > 0 && !arr.is_c_contiguous() {
        arr.py().import("numpy")?.call_method1("ascontiguousarray", (arr,))?.cast_into::<PyUntypedArray>()?
    } else {
        arr.clone()
    };
    let arr = &crate::dtype::viewable(arr)?;
    let typed = arr.cast::<PyArrayDyn<T>>().map_err(|_| unsupported_dtype("value"))?;
    let ro = typed.readonly();
    let host = ro.as_array();
    if host.ndim() == 0 {
        let v = host.first().copied().ok_or_else(|| invalid("an empty scalar"))?;
        return arr.py().detach(|| region.fill(v)).py();
    }
    arr.py().detach(|| write_region(region, host, pool)).py()
}

/// The plans of the regions written last, on every device (`NDBuffer::write_region`).
static PLANS: RegionPlans<Device> = RegionPlans::new();

/// Uploads `host` (the region's shape) into `region`, staging from `pool` when given.
///
/// # Errors
/// As `NDBuffer::write_region_with`.
pub fn write_region<T: gpubuf::Element>(
    region: &NDBuffer<Device, T>,
    host: ArrayViewD<'_, T>,
    pool: Option<&MemoryPool<GilAllocator>>,
) -> gpubuf::Result<()> {
    let device = region.backend();
    region.write_region_with(host, &PLANS, |shape| match pool {
        Some(p) => p.empty(device, shape, Order::C),
        None => NDBuffer::empty(device, shape, Order::C),
    })
}
