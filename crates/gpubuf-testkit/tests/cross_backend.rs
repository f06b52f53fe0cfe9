//! Cross-backend equivalence: the same random inputs through CPU, OpenCL and (where
//! present) CUDA give byte-identical results. Each test needs two backends: with fewer it
//! says it was skipped (and fails under `GPUBUF_REQUIRE`); the single-backend checks
//! against the host reference live in `plans.rs`.

use gpubuf::{DType, Element, Kernels, NDBuffer, Order, Result};
use gpubuf_testkit::strategies::{bytes, plan_case, PlanCase};
use gpubuf_testkit::{cross_backend_ready, exec, on_every_backend, reference, EachBackend};
use proptest::prelude::*;

struct Pack<'a>(&'a PlanCase);

impl EachBackend for Pack<'_> {
    type Output = (Vec<u8>, Vec<Vec<u8>>);
    fn run<B: Kernels>(&self, b: &B) -> Result<Self::Output> {
        let case = self.0;
        let initial = bytes(case.plan.buffer_len() * case.dtype.size(), 5);
        let packed = exec::gather(b, case, &initial)?;
        let targets: Vec<Vec<u8>> = case.sources.iter().map(|s| bytes(s.len(), 6)).collect();
        let unpacked = exec::scatter(b, case, &packed, &targets)?;
        Ok((packed, unpacked))
    }
}

/// A random NDBuffer: permuted, sliced and flipped on the device, then copied contiguous.
struct ViewCopy {
    dtype: DType,
    shape: Vec<usize>,
    perm_seed: u64,
    flip: usize,
    seed: u64,
}

impl ViewCopy {
    fn typed<B: Kernels, T: Element>(&self, b: &B) -> Result<Vec<u8>> {
        let n: usize = self.shape.iter().product();
        let raw = bytes(n * self.dtype.size(), self.seed);
        let data: Vec<T> = raw.chunks(self.dtype.size()).map(bytemuck::pod_read_unaligned).collect();
        let a = NDBuffer::<B, T>::from_slice(b, &self.shape, &data)?;
        let nd = self.shape.len();
        let mut axes: Vec<usize> = (0..nd).collect();
        axes.rotate_left((self.perm_seed as usize) % nd.max(1));
        let mut v = a.transpose(Some(&axes))?;
        if nd > 0 {
            v = v.flip(self.flip % nd)?;
        }
        let ranges: Vec<std::ops::Range<usize>> = v.shape().iter().map(|&e| (e / 3)..e).collect();
        let v = v.slice(&ranges)?;
        let out = v.copy()?.to_vec()?;
        let f = NDBuffer::<B, T>::create(b, v.shape(), Order::F, None)?;
        f.copy_from(&v)?;
        let mut bytes_out: Vec<u8> = bytemuck::cast_slice(&out).to_vec();
        bytes_out.extend_from_slice(bytemuck::cast_slice(&f.to_vec()?));
        Ok(bytes_out)
    }
}

impl EachBackend for ViewCopy {
    type Output = Vec<u8>;
    fn run<B: Kernels>(&self, b: &B) -> Result<Vec<u8>> {
        match self.dtype {
            DType::U8 => self.typed::<B, u8>(b),
            DType::I32 => self.typed::<B, i32>(b),
            DType::U32 => self.typed::<B, u32>(b),
            DType::I64 => self.typed::<B, i64>(b),
            DType::I8 => self.typed::<B, i8>(b),
            DType::I16 => self.typed::<B, i16>(b),
            DType::U16 => self.typed::<B, u16>(b),
            DType::U64 => self.typed::<B, u64>(b),
            DType::F16 => self.typed::<B, gpubuf::f16>(b),
            DType::F32 => self.typed::<B, f32>(b),
            DType::F64 => self.typed::<B, f64>(b),
            DType::Bool => self.typed::<B, gpubuf::Bool>(b),
            DType::Complex64 => self.typed::<B, gpubuf::Complex<f32>>(b),
            DType::Complex128 => self.typed::<B, gpubuf::Complex<f64>>(b),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_plans_identical_on_every_backend(case in plan_case(10, 6, true)) {
        if !cross_backend_ready() {
            return Ok(());
        }
        let results = on_every_backend(&Pack(&case)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let initial = bytes(case.plan.buffer_len() * case.dtype.size(), 5);
        let want = reference::gather(&case.plan, case.dtype, &case.sources, &initial);
        let want_unpacked = reference::scatter(&case.plan, case.dtype, &want, &case.sources.iter().map(|s| bytes(s.len(), 6)).collect::<Vec<_>>());
        for (kind, (packed, unpacked)) in &results {
            prop_assert_eq!(packed, &want, "{} gather differs", kind);
            prop_assert_eq!(unpacked, &want_unpacked, "{} scatter differs from the reference", kind);
            prop_assert_eq!(unpacked, &results[0].1 .1, "{} scatter differs from cpu", kind);
        }
    }

    #[test]
    fn random_general_gathers_identical(case in plan_case(10, 6, false)) {
        if !cross_backend_ready() {
            return Ok(());
        }
        let results = on_every_backend(&GatherOnly(&case)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        for (kind, packed) in &results {
            prop_assert_eq!(packed, &results[0].1, "{} differs from cpu", kind);
        }
    }

    #[test]
    fn random_views_identical_on_every_backend(
        dtype in gpubuf_testkit::strategies::dtype(),
        shape in prop::collection::vec(1usize..7, 1..=5),
        perm_seed in any::<u64>(),
        flip in any::<usize>(),
        seed in any::<u64>(),
    ) {
        if !cross_backend_ready() {
            return Ok(());
        }
        let v = ViewCopy { dtype, shape, perm_seed, flip, seed };
        let results = on_every_backend(&v).map_err(|e| TestCaseError::fail(e.to_string()))?;
        for (kind, out) in &results {
            prop_assert_eq!(out, &results[0].1, "{} differs from cpu", kind);
        }
    }
}

struct GatherOnly<'a>(&'a PlanCase);

impl EachBackend for GatherOnly<'_> {
    type Output = Vec<u8>;
    fn run<B: Kernels>(&self, b: &B) -> Result<Vec<u8>> {
        exec::gather(b, self.0, &bytes(self.0.plan.buffer_len() * self.0.dtype.size(), 7))
    }
}
