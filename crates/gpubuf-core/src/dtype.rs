//! Element types: the runtime [`DType`] tag and the compile-time [`Element`] trait.

use std::fmt;

/// The element types gpubuf moves and computes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// `u8`
    U8,
    /// `i32`
    I32,
    /// `u32`
    U32,
    /// `i64`
    I64,
    /// `i8`
    I8,
    /// `i16`
    I16,
    /// `u16`
    U16,
    /// `u64`
    U64,
    /// IEEE half precision (`half::f16`)
    F16,
    /// `f32`
    F32,
    /// `f64`
    F64,
    /// numpy's `bool`: one byte, 0 or 1 ([`Bool`]). Copy plans move it as a byte; it has
    /// no negation, so a plan that negates refuses it.
    Bool,
    /// numpy's `complex64`: two `f32` lanes, real then imaginary (`Complex<f32>`).
    Complex64,
    /// numpy's `complex128`: two `f64` lanes, real then imaginary (`Complex<f64>`).
    Complex128,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 14] = [
        DType::U8,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::I8,
        DType::I16,
        DType::U16,
        DType::U64,
        DType::F16,
        DType::F32,
        DType::F64,
        DType::Bool,
        DType::Complex64,
        DType::Complex128,
    ];

    /// Size of one element in bytes (the itemsize).
    pub const fn size(self) -> usize {
        match self {
            DType::U8 | DType::I8 | DType::Bool => 1,
            DType::I16 | DType::U16 | DType::F16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 | DType::Complex64 => 8,
            DType::Complex128 => 16,
        }
    }

    /// Whether the type is a real floating-point type (negation flips the sign bit).
    /// Complex types are not: see [`DType::lane`].
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::F32 | DType::F64)
    }

    /// Whether the type is complex (two float lanes).
    pub const fn is_complex(self) -> bool {
        matches!(self, DType::Complex64 | DType::Complex128)
    }

    /// The type of one lane: `float32` for `complex64`, `float64` for `complex128`, the type
    /// itself for every other. Kernels move and negate a complex element as
    /// [`DType::lanes`] consecutive lanes ([`crate::CopyPlan::split_lanes`]).
    pub const fn lane(self) -> DType {
        match self {
            DType::Complex64 => DType::F32,
            DType::Complex128 => DType::F64,
            d => d,
        }
    }

    /// Lanes of one element: 2 for complex types, 1 for every other.
    pub const fn lanes(self) -> usize {
        if self.is_complex() {
            2
        } else {
            1
        }
    }

    /// The numpy-style name (`"float32"`, `"int64"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::U8 => "uint8",
            DType::I32 => "int32",
            DType::U32 => "uint32",
            DType::I64 => "int64",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::U16 => "uint16",
            DType::U64 => "uint64",
            DType::F16 => "float16",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::Bool => "bool",
            DType::Complex64 => "complex64",
            DType::Complex128 => "complex128",
        }
    }

    /// Whether [`DType::negate_bytes`] means something for this type: every type but
    /// [`DType::Bool`]. A copy plan with a negating segment refuses the others.
    pub const fn negatable(self) -> bool {
        !matches!(self, DType::Bool)
    }

    /// Negates one element stored as raw bytes, in place, with gpubuf's negation rule:
    /// floats flip the sign bit (so `-0.0`, infinities and NaNs behave alike on every
    /// backend); integers take the two's-complement negation, wrapping; complex numbers
    /// negate both lanes.
    ///
    /// `bytes` must hold exactly [`DType::size`] bytes; other lengths, and a [`DType::Bool`]
    /// (not [`negatable`](DType::negatable)), are left unchanged.
    pub fn negate_bytes(self, bytes: &mut [u8]) {
        if bytes.len() != self.size() || !self.negatable() {
            return;
        }
        if self.is_complex() {
            let lane = self.lane();
            bytes.chunks_exact_mut(lane.size()).for_each(|b| lane.negate_bytes(b));
        } else if self.is_float() {
            // Little-endian: the sign bit is the top bit of the last byte.
            if let Some(last) = bytes.last_mut() {
                *last ^= 0x80;
            }
        } else {
            // Two's complement: invert and add one, carrying from the low byte.
            let mut carry = true;
            for b in bytes.iter_mut() {
                let (v, c) = (!*b).overflowing_add(u8::from(carry));
                *b = v;
                carry = c;
            }
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DType {
    type Err = crate::Error;

    fn from_str(s: &str) -> crate::Result<Self> {
        DType::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| crate::Error::invalid(format!("unknown dtype {s:?}")))
    }
}

/// A Rust type that gpubuf can store: plain old data with a [`DType`] tag.
pub trait Element: bytemuck::Pod + PartialEq + fmt::Debug + Default + Send + Sync + 'static {
    /// The runtime tag of this type.
    const DTYPE: DType;

    /// gpubuf's negation (see [`DType::negate_bytes`]).
    fn negate(self) -> Self;

    /// Equality where NaN equals NaN (numpy's `equal_nan=True`); plain `==` otherwise.
    fn same_value(&self, other: &Self) -> bool;
}

macro_rules! int_element {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            fn negate(self) -> Self {
                self.wrapping_neg()
            }
            fn same_value(&self, other: &Self) -> bool {
                self == other
            }
        }
    };
}

int_element!(u8, DType::U8);
int_element!(i32, DType::I32);
int_element!(u32, DType::U32);
int_element!(i64, DType::I64);
int_element!(i8, DType::I8);
int_element!(i16, DType::I16);
int_element!(u16, DType::U16);
int_element!(u64, DType::U64);

macro_rules! float_element {
    ($t:ty, $d:expr, $bits:ty, $sign:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            fn negate(self) -> Self {
                <$t>::from_bits(self.to_bits() ^ $sign)
            }
            fn same_value(&self, other: &Self) -> bool {
                self == other || (self.is_nan() && other.is_nan())
            }
        }
    };
}

float_element!(f32, DType::F32, u32, 0x8000_0000u32);
float_element!(f64, DType::F64, u64, 0x8000_0000_0000_0000u64);
float_element!(half::f16, DType::F16, u16, 0x8000u16);

pub use num_complex::Complex;

macro_rules! complex_element {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            /// Both lanes negated by the float rule.
            fn negate(self) -> Self {
                <$t>::new(self.re.negate(), self.im.negate())
            }
            fn same_value(&self, other: &Self) -> bool {
                self.re.same_value(&other.re) && self.im.same_value(&other.im)
            }
        }
    };
}

// numpy's `complex64` (num-complex's type, the one rust-numpy maps to it).
complex_element!(Complex<f32>, DType::Complex64);
// numpy's `complex128`.
complex_element!(Complex<f64>, DType::Complex128);

/// numpy's `bool` as a gpubuf element: one byte, `Bool(0)` false and `Bool(1)` true (the
/// only values numpy writes; another byte reads as true, as numpy's does). A plain byte
/// rather than Rust's `bool`, so any byte read back from a device is a valid value.
///
/// ```
/// use gpubuf_core::{Bool, DType, Element};
/// assert_eq!(Bool::from(true), Bool::TRUE);
/// assert!(bool::from(Bool(7)));
/// assert_eq!(<Bool as Element>::DTYPE, DType::Bool);
/// ```
#[repr(transparent)]
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Debug, bytemuck::Pod, bytemuck::Zeroable,
)]
pub struct Bool(pub u8);

impl Bool {
    /// `false`.
    pub const FALSE: Bool = Bool(0);
    /// `true`.
    pub const TRUE: Bool = Bool(1);
}

impl From<bool> for Bool {
    fn from(b: bool) -> Self {
        Bool(u8::from(b))
    }
}

impl From<Bool> for bool {
    fn from(b: Bool) -> Self {
        b.0 != 0
    }
}

#[cfg(feature = "numpy")]
// SAFETY: `Bool` is `repr(transparent)` over one `u8`, the layout of numpy's `bool`
// (NPY_BOOL, one byte), and every byte is a valid `Bool`, so numpy's bool data can be
// viewed as `Bool` whatever bytes it holds. It is `Copy` and holds no Python object.
unsafe impl numpy::Element for Bool {
    const IS_COPY: bool = true;

    fn get_dtype(py: pyo3::Python<'_>) -> pyo3::Bound<'_, numpy::PyArrayDescr> {
        <bool as numpy::Element>::get_dtype(py)
    }

    fn clone_ref(&self, _py: pyo3::Python<'_>) -> Self {
        *self
    }
}

impl Element for Bool {
    const DTYPE: DType = DType::Bool;
    /// No negation: the value itself (plans that negate refuse [`DType::Bool`]).
    fn negate(self) -> Self {
        self
    }
    fn same_value(&self, other: &Self) -> bool {
        bool::from(*self) == bool::from(*other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check<T: Element>(v: T) {
        let mut bytes = bytemuck::bytes_of(&v).to_vec();
        T::DTYPE.negate_bytes(&mut bytes);
        assert_eq!(bytes, bytemuck::bytes_of(&v.negate()));
    }

    #[test]
    fn negate_bytes_matches_typed_negation() {
        for v in [0u8, 1, 127, 128, 255] {
            check(v);
        }
        for v in [0i32, 1, -1, i32::MIN, i32::MAX] {
            check(v);
        }
        for v in [0u32, 1, u32::MAX] {
            check(v);
        }
        for v in [0i64, -7, i64::MIN] {
            check(v);
        }
        for v in [0i8, 1, -1, i8::MIN, i8::MAX] {
            check(v);
        }
        for v in [0i16, -300, i16::MIN] {
            check(v);
        }
        for v in [0u16, 1, u16::MAX] {
            check(v);
        }
        for v in [0u64, 1, u64::MAX, 1 << 63] {
            check(v);
        }
        for v in [0.0f32, -0.0, 1.5, f32::INFINITY, f32::NAN] {
            check(v);
        }
        for v in [0.0f64, -2.25, f64::NEG_INFINITY] {
            check(v);
        }
        check(half::f16::from_f32(-3.5));
        check(Complex::new(1.5f32, -0.0));
        check(Complex::new(f64::NAN, 2.0));
        let mut z = bytemuck::bytes_of(&Complex::new(1.0f32, -2.0)).to_vec();
        DType::Complex64.negate_bytes(&mut z);
        assert_eq!(bytemuck::pod_read_unaligned::<Complex<f32>>(&z), Complex::new(-1.0, 2.0));
        assert_eq!((-5i32).negate(), 5);
        assert_eq!(2.0f32.negate(), -2.0);
    }

    #[test]
    fn dtype_names_round_trip() {
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>().unwrap(), d);
        }
        assert!("float128".parse::<DType>().is_err());
    }
}
