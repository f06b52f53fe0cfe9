//! `negate_in_place` against gpubuf's negation rule (`DType::negate_bytes`) for every
//! element type, corner values included.

use gpubuf_core::DType;
use gpubuf_cpu::negate_in_place;

/// Three copies of `bytes` (one element) in 8-byte words (aligned for every lane).
fn negated(dtype: DType, bytes: &[u8]) -> Vec<u8> {
    let size = bytes.len();
    let mut words = [0u64; 6];
    let at = words.as_mut_ptr().cast::<u8>();
    for k in 0..3 {
        // SAFETY: `size` (at most 16) bytes at element `k` of the 48 bytes of `words`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), at.add(k * size), size) };
    }
    // SAFETY: three elements of `dtype` in `words`, which this test owns, aligned to 8.
    unsafe { negate_in_place(at, 3, dtype) };
    // SAFETY: `3 * size` initialised bytes of `words`.
    unsafe { std::slice::from_raw_parts(at, 3 * size) }.to_vec()
}

#[test]
fn every_element_type_negates_as_gpubufs_rule() {
    let cases: Vec<(DType, Vec<u8>)> = vec![
        (DType::F64, (-0.0f64).to_ne_bytes().to_vec()),
        (DType::F32, f32::NAN.to_ne_bytes().to_vec()),
        (DType::F16, 0x3c00u16.to_ne_bytes().to_vec()),
        (DType::I64, i64::MIN.to_ne_bytes().to_vec()),
        (DType::I32, (-7i32).to_ne_bytes().to_vec()),
        (DType::I16, 7i16.to_ne_bytes().to_vec()),
        (DType::I8, i8::MIN.to_ne_bytes().to_vec()),
        (DType::U32, 5u32.to_ne_bytes().to_vec()),
        (DType::U8, vec![3u8]),
        (DType::Bool, vec![1u8]),
        (DType::Complex64, [1.5f32.to_ne_bytes(), (-0.0f32).to_ne_bytes()].concat()),
        (DType::Complex128, [f64::INFINITY.to_ne_bytes(), 2.0f64.to_ne_bytes()].concat()),
    ];
    for (dtype, bytes) in cases {
        assert_eq!(bytes.len(), dtype.size(), "{dtype:?}");
        let mut want = bytes.clone();
        dtype.negate_bytes(&mut want);
        assert_eq!(negated(dtype, &bytes), want.repeat(3), "{dtype:?}");
    }
}
