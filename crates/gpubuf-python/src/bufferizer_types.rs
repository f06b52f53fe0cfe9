//! The element types of `gpubuf.Bufferizer` (one Rust bufferizer per dtype), its hook
//! events, and the inputs an append holds while it runs.

use crate::dtype::{AnyArray, Wrap};
use crate::errors::invalid;
use gpubuf::{Bufferizer, Device, NDBuffer};
use numpy::PyUntypedArray;
use parking_lot::Mutex;
use pyo3::prelude::*;
use std::sync::Arc;

/// The hooks, in the order of [`HOOK_NAMES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    Flush = 0,
    Allocate = 1,
    AppendOne = 2,
    AppendMultiple = 3,
    Full = 4,
}

/// dolphin's names of the hooks (constructor keywords and setter methods).
pub(crate) const HOOK_NAMES: [&str; 5] =
    ["flush_hook", "allocate_hook", "append_one_hook", "append_multiple_hook", "buffer_full_hook"];

/// The events the Rust bufferizer fired during one operation.
pub(crate) type Events = Arc<Mutex<Vec<Event>>>;

/// A bufferizer of any element type.
pub(crate) enum AnyBufferizer {
    U8(Bufferizer<Device, u8>),
    I32(Bufferizer<Device, i32>),
    U32(Bufferizer<Device, u32>),
    I64(Bufferizer<Device, i64>),
    I8(Bufferizer<Device, i8>),
    I16(Bufferizer<Device, i16>),
    U16(Bufferizer<Device, u16>),
    U64(Bufferizer<Device, u64>),
    /// `bool`
    Bool(Bufferizer<Device, gpubuf_core::Bool>),
    F16(Bufferizer<Device, half::f16>),
    F32(Bufferizer<Device, f32>),
    F64(Bufferizer<Device, f64>),
    /// `complex64`
    C64(Bufferizer<Device, gpubuf_core::Complex<f32>>),
    /// `complex128`
    C128(Bufferizer<Device, gpubuf_core::Complex<f64>>),
}

/// Runs `$body` with `$b` bound to the typed bufferizer `$a` holds.
macro_rules! each {
    ($a:expr, $b:ident => $body:expr) => {
        match $a {
            AnyBufferizer::U8($b) => $body,
            AnyBufferizer::I32($b) => $body,
            AnyBufferizer::U32($b) => $body,
            AnyBufferizer::I64($b) => $body,
            AnyBufferizer::I8($b) => $body,
            AnyBufferizer::I16($b) => $body,
            AnyBufferizer::U16($b) => $body,
            AnyBufferizer::U64($b) => $body,
            AnyBufferizer::Bool($b) => $body,
            AnyBufferizer::F16($b) => $body,
            AnyBufferizer::F32($b) => $body,
            AnyBufferizer::F64($b) => $body,
            AnyBufferizer::C64($b) => $body,
            AnyBufferizer::C128($b) => $body,
        }
    };
}
pub(crate) use each;

/// The typed side of an element type: its bufferizer variant, its arrays, its flush value.
pub(crate) trait Typed: Wrap + Sync {
    fn wrap_b(b: Bufferizer<Device, Self>) -> AnyBufferizer;
    fn of(a: &AnyArray) -> Option<&NDBuffer<Device, Self>>;
    fn value(v: &Bound<'_, PyAny>) -> PyResult<Self>;
    fn unwrap_mut(any: &mut AnyBufferizer) -> Option<&mut Bufferizer<Device, Self>>;
}

macro_rules! typed {
    ($t:ty, $v:ident, $value:expr) => {
        impl Typed for $t {
            fn wrap_b(b: Bufferizer<Device, Self>) -> AnyBufferizer {
                AnyBufferizer::$v(b)
            }
            fn of(a: &AnyArray) -> Option<&NDBuffer<Device, Self>> {
                match a {
                    AnyArray::$v(nd) => Some(nd),
                    _ => None,
                }
            }
            fn value(v: &Bound<'_, PyAny>) -> PyResult<Self> {
                let f: fn(&Bound<'_, PyAny>) -> PyResult<Self> = $value;
                f(v).map_err(|_| {
                    invalid(format!("flush value {v} is not a {}", <$t as gpubuf::Element>::DTYPE))
                })
            }
            fn unwrap_mut(any: &mut AnyBufferizer) -> Option<&mut Bufferizer<Device, Self>> {
                match any {
                    AnyBufferizer::$v(b) => Some(b),
                    _ => None,
                }
            }
        }
    };
}
typed!(u8, U8, |v| v.extract());
typed!(i32, I32, |v| v.extract());
typed!(u32, U32, |v| v.extract());
typed!(i64, I64, |v| v.extract());
typed!(i8, I8, |v| v.extract());
typed!(i16, I16, |v| v.extract());
typed!(u16, U16, |v| v.extract());
typed!(u64, U64, |v| v.extract());
typed!(gpubuf_core::Bool, Bool, |v| v.extract::<bool>().map(gpubuf_core::Bool::from));
typed!(half::f16, F16, |v| narrow(v, half::f16::from_f64, |x| x.is_finite()));
typed!(f32, F32, |v| narrow(v, |x| x as f32, |x| x.is_finite()));

/// A float value narrowed to a smaller float type; a finite value that overflows it is an error.
pub(crate) fn narrow<T>(v: &Bound<'_, PyAny>, cast: fn(f64) -> T, finite: fn(&T) -> bool) -> PyResult<T> {
    let x: f64 = v.extract()?;
    let t = cast(x);
    if x.is_finite() && !finite(&t) {
        return Err(invalid(format!("{x} overflows the dtype")));
    }
    Ok(t)
}
typed!(f64, F64, |v| v.extract());
typed!(gpubuf_core::Complex<f32>, C64, |v| {
    let (re, im) = complex_parts(v)?;
    let c = gpubuf_core::Complex::new(re as f32, im as f32);
    if (re.is_finite() && !c.re.is_finite()) || (im.is_finite() && !c.im.is_finite()) {
        return Err(invalid(format!("{v} overflows complex64")));
    }
    Ok(c)
});
typed!(gpubuf_core::Complex<f64>, C128, |v| complex_parts(v)
    .map(|(re, im)| gpubuf_core::Complex::new(re, im)));

/// The real and imaginary parts of a Python number, by Python's `complex(v)` (which takes
/// ints, floats, complex numbers and numpy scalars; not strings here).
pub(crate) fn complex_parts(v: &Bound<'_, PyAny>) -> PyResult<(f64, f64)> {
    if v.is_instance_of::<pyo3::types::PyString>() {
        return Err(invalid(format!("{v} is not a number")));
    }
    let c = v.py().get_type::<pyo3::types::PyComplex>().call1((v,))?;
    Ok((c.getattr("real")?.extract()?, c.getattr("imag")?.extract()?))
}

/// One input, converted and held alive: a device array or a numpy array of host memory.
pub(crate) enum Held<'py> {
    Device(AnyArray),
    Host(Bound<'py, PyUntypedArray>),
}

/// Which append to run.
#[derive(Clone, Copy)]
pub(crate) enum Op {
    One,
    Multiple,
    List,
    Auto,
}
