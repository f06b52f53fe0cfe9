//! In-place arithmetic that never panics: wrapping for integers, checked division.

use gpubuf_core::Element;

/// Element types with the in-place arithmetic of [`crate::Mirror`].
pub trait Arith: Element {
    /// `a + b` (wrapping for integers).
    fn add(self, b: Self) -> Self;
    /// `a - b` (wrapping for integers).
    fn sub(self, b: Self) -> Self;
    /// `a * b` (wrapping for integers).
    fn mul(self, b: Self) -> Self;
    /// `a / b`; `None` for an integer division by zero.
    fn div(self, b: Self) -> Option<Self>;
}

macro_rules! ints {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            fn add(self, b: Self) -> Self { self.wrapping_add(b) }
            fn sub(self, b: Self) -> Self { self.wrapping_sub(b) }
            fn mul(self, b: Self) -> Self { self.wrapping_mul(b) }
            fn div(self, b: Self) -> Option<Self> { self.checked_div(b).or_else(|| (b != 0).then(|| self.wrapping_div(b))) }
        }
    )*};
}
ints!(u8, i32, u32, i64, i8, i16, u16, u64);

macro_rules! floats {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            fn add(self, b: Self) -> Self { self + b }
            fn sub(self, b: Self) -> Self { self - b }
            fn mul(self, b: Self) -> Self { self * b }
            fn div(self, b: Self) -> Option<Self> { Some(self / b) }
        }
    )*};
}
floats!(f32, f64, half::f16, gpubuf_core::Complex<f32>, gpubuf_core::Complex<f64>);
