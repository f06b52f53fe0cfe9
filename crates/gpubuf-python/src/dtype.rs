//! One array type for every dtype: [`AnyArray`] holds an `NDBuffer<Device, T>` of one of
//! gpubuf's fourteen element types, and the macros run generic code on whichever it holds.

use gpubuf::{DType, Device, NDBuffer};
use half::f16;
use pyo3::prelude::*;

/// An [`NDBuffer`] on a [`Device`] of any element type.
#[derive(Clone)]
pub enum AnyArray {
    /// `uint8`
    U8(NDBuffer<Device, u8>),
    /// `int32`
    I32(NDBuffer<Device, i32>),
    /// `uint32`
    U32(NDBuffer<Device, u32>),
    /// `int64`
    I64(NDBuffer<Device, i64>),
    /// `int8`
    I8(NDBuffer<Device, i8>),
    /// `int16`
    I16(NDBuffer<Device, i16>),
    /// `uint16`
    U16(NDBuffer<Device, u16>),
    /// `uint64`
    U64(NDBuffer<Device, u64>),
    /// `float16`
    F16(NDBuffer<Device, f16>),
    /// `float32`
    F32(NDBuffer<Device, f32>),
    /// `float64`
    F64(NDBuffer<Device, f64>),
    /// `bool`
    Bool(NDBuffer<Device, gpubuf_core::Bool>),
    /// `complex64`
    C64(NDBuffer<Device, gpubuf_core::Complex<f32>>),
    /// `complex128`
    C128(NDBuffer<Device, gpubuf_core::Complex<f64>>),
}

/// Runs `$body` with `$nd` bound to the typed array `$a` holds.
macro_rules! dispatch {
    ($a:expr, $nd:ident => $body:expr) => {
        match $a {
            $crate::dtype::AnyArray::U8($nd) => $body,
            $crate::dtype::AnyArray::I32($nd) => $body,
            $crate::dtype::AnyArray::U32($nd) => $body,
            $crate::dtype::AnyArray::I64($nd) => $body,
            $crate::dtype::AnyArray::I8($nd) => $body,
            $crate::dtype::AnyArray::I16($nd) => $body,
            $crate::dtype::AnyArray::U16($nd) => $body,
            $crate::dtype::AnyArray::U64($nd) => $body,
            $crate::dtype::AnyArray::F16($nd) => $body,
            $crate::dtype::AnyArray::F32($nd) => $body,
            $crate::dtype::AnyArray::F64($nd) => $body,
            $crate::dtype::AnyArray::Bool($nd) => $body,
            $crate::dtype::AnyArray::C64($nd) => $body,
            $crate::dtype::AnyArray::C128($nd) => $body,
        }
    };
}
pub(crate) use dispatch;

/// Runs `$body` with the type `$t` naming the Rust element type of the `DType` `$d`.
macro_rules! with_dtype {
    ($d:expr, $t:ident => $body:expr) => {
        match $d {
            gpubuf::DType::U8 => {
                type $t = u8;
                $body
            }
            gpubuf::DType::I32 => {
                type $t = i32;
                $body
            }
            gpubuf::DType::U32 => {
                type $t = u32;
                $body
            }
            gpubuf::DType::I64 => {
                type $t = i64;
                $body
            }
            gpubuf::DType::I8 => {
                type $t = i8;
                $body
            }
            gpubuf::DType::I16 => {
                type $t = i16;
                $body
            }
            gpubuf::DType::U16 => {
                type $t = u16;
                $body
            }
            gpubuf::DType::U64 => {
                type $t = u64;
                $body
            }
            gpubuf::DType::F16 => {
                type $t = half::f16;
                $body
            }
            gpubuf::DType::F32 => {
                type $t = f32;
                $body
            }
            gpubuf::DType::F64 => {
                type $t = f64;
                $body
            }
            gpubuf::DType::Bool => {
                type $t = gpubuf_core::Bool;
                $body
            }
            gpubuf::DType::Complex64 => {
                type $t = gpubuf_core::Complex<f32>;
                $body
            }
            gpubuf::DType::Complex128 => {
                type $t = gpubuf_core::Complex<f64>;
                $body
            }
        }
    };
}
pub(crate) use with_dtype;

/// Wrapping a typed array in [`AnyArray`].
pub trait Wrap: gpubuf::Element + numpy::Element {
    /// The array as an [`AnyArray`].
    fn wrap(nd: NDBuffer<Device, Self>) -> AnyArray;
}

macro_rules! wrap {
    ($t:ty, $v:ident) => {
        impl Wrap for $t {
            fn wrap(nd: NDBuffer<Device, Self>) -> AnyArray {
                AnyArray::$v(nd)
            }
        }
    };
}
wrap!(u8, U8);
wrap!(i32, I32);
wrap!(u32, U32);
wrap!(i64, I64);
wrap!(i8, I8);
wrap!(i16, I16);
wrap!(u16, U16);
wrap!(u64, U64);
wrap!(f16, F16);
wrap!(f32, F32);
wrap!(f64, F64);
wrap!(gpubuf_core::Bool, Bool);
wrap!(gpubuf_core::Complex<f32>, C64);
wrap!(gpubuf_core::Complex<f64>, C128);

impl AnyArray {
    /// The element type.
    pub fn dtype(&self) -> DType {
        dispatch!(self, nd => nd.dtype())
    }

    /// The device the array lives on.
    pub fn device(&self) -> &Device {
        dispatch!(self, nd => nd.backend())
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        dispatch!(self, nd => nd.shape())
    }

    /// The strides in elements.
    pub fn strides(&self) -> &[isize] {
        dispatch!(self, nd => nd.strides())
    }
}

/// gpubuf's dtype from a numpy dtype, or `DTypeMismatchError` for one gpubuf has no type
/// for (a byte-swapped, string or structured dtype, ...).
///
/// # Errors
/// `DTypeMismatchError` as above.
pub fn from_numpy_dtype(dt: &Bound<'_, numpy::PyArrayDescr>) -> PyResult<DType> {
    use numpy::PyArrayDescrMethods;
    let py = dt.py();
    for d in DType::ALL {
        let same = with_dtype!(d, T => dt.is_equiv_to(&numpy::dtype::<T>(py)));
        if same {
            return Ok(d);
        }
    }
    let got = dt.str().map(|s| s.to_string()).unwrap_or_else(|_| "?".into());
    Err(crate::errors::unsupported_dtype(&got))
}

/// A dtype given by name (`"float32"`, numpy's `np.float32`, a `numpy.dtype`, ...).
///
/// # Errors
/// `DTypeMismatchError` when numpy does not know it or gpubuf has no such type.
pub fn parse_dtype(obj: &Bound<'_, PyAny>) -> PyResult<DType> {
    let py = obj.py();
    let descr = numpy::PyArrayDescr::new(py, obj).map_err(|_| {
        let got = obj.str().map(|s| s.to_string()).unwrap_or_else(|_| "?".into());
        crate::errors::unsupported_dtype(&got)
    })?;
    from_numpy_dtype(&descr)
}

/// numpy's dtype object for `d`.
pub fn numpy_dtype(py: Python<'_>, d: DType) -> Bound<'_, numpy::PyArrayDescr> {
    with_dtype!(d, T => numpy::dtype::<T>(py))
}

/// Most axes rust-numpy views (`as_array` panics past them); numpy allows 64.
pub const MAX_VIEW_AXES: usize = 32;

/// `arr`, ready for a Rust view of its elements (`PyArray::as_array`): itself when its data
/// is aligned to its element size and its strides are whole elements, else numpy's aligned
/// C-order copy of it. rust-numpy divides byte strides by the element size, so a view of a
/// stride of 9 bytes over 8-byte elements would read the wrong elements, and of an
/// unaligned pointer would read through misaligned references.
///
/// # Errors
/// `InvalidArgumentError` for more than [`MAX_VIEW_AXES`] axes; numpy's errors copying.
pub fn viewable<'py>(arr: Bound<'py, numpy::PyUntypedArray>) -> PyResult<Bound<'py, numpy::PyUntypedArray>> {
    use numpy::{PyArrayDescrMethods, PyUntypedArrayMethods};
    if arr.ndim() > MAX_VIEW_AXES {
        return Err(crate::errors::invalid(format!(
            "a numpy array of {} axes (gpubuf reads at most {MAX_VIEW_AXES} from numpy)",
            arr.ndim()
        )));
    }
    let item = arr.dtype().itemsize().max(1);
    let strided = arr.strides().iter().any(|&s| s.unsigned_abs() % item != 0);
    if !strided && crate::numpy_mem::data_ptr(&arr) % item == 0 {
        return Ok(arr);
    }
    let np = arr.py().import("numpy")?;
    let kwargs = pyo3::types::PyDict::new(arr.py());
    kwargs.set_item("copy", true)?;
    kwargs.set_item("order", "C")?;
    np.call_method("array", (&arr,), Some(&kwargs))?.cast_into::<numpy::PyUntypedArray>().map_err(Into::into)
}

/// The element layout of a view given in bytes (numpy's and pyopencl's convention):
/// `strides` and `offset` must be whole elements of `d`.
///
/// # Errors
/// `InvalidArgumentError` for strides of another length than the shape, strides or an
/// offset that are not whole elements, or a layout `gpubuf::Layout::new` refuses.
pub fn byte_layout(
    shape: Vec<usize>,
    strides: &[isize],
    offset: usize,
    d: DType,
) -> PyResult<gpubuf::Layout> {
    let size = d.size();
    let whole = |b: isize| b.checked_rem(size as isize) == Some(0);
    if strides.len() != shape.len() || !strides.iter().all(|&s| whole(s)) || offset % size != 0 {
        return Err(crate::errors::invalid(format!(
            "strides {strides:?} and offset {offset} for shape {shape:?} are not whole {size}-byte elements"
        )));
    }
    let elems: Vec<isize> = strides.iter().map(|s| s / size as isize).collect();
    crate::errors::IntoPy::py(gpubuf::Layout::new(shape, elems, offset / size))
}
