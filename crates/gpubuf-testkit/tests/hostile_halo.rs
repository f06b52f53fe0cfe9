//! Hostile input for the halo crate: every public constructor and operation with extreme
//! values (0, 1, `usize::MAX`, 2^62, empty shapes, huge halos, offsets and rotations).
//! Nothing may panic, abort or wrap (the checks on every `Ok` result catch a wrapped
//! number in release builds): only typed errors, and whatever was built before an error
//! still works, which the next valid operation proves by its checked result.

use gpubuf::halo::{Boundary, Dim, HaloDataTransformer, HaloExchangeSpec, QuantityHaloSpec};
use gpubuf::pool::MemoryPool;
use gpubuf::{Buffer, DType, Error, Kernels, Layout, NDBuffer, Result};
use gpubuf_testkit::backend_tests;
use std::ops::Range;

#[path = "hostile_halo/specs.rs"]
mod specs;

use proptest::prelude::*;
use specs::{apply, mutation, valid_exchange, SMALL};

/// A transformer call's x and y quantity lists, named.
type Call<'q, B> = (&'static str, Vec<&'q NDBuffer<B, f64>>, Option<Vec<&'q NDBuffer<B, f64>>>);
type Specs = Vec<HaloExchangeSpec>;

/// A 4x4 domain with a 1-point halo (6x6 array) and the west and east exchanges.
fn base_specs() -> Result<(QuantityHaloSpec, Vec<HaloExchangeSpec>)> {
    let spec = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[4, 4], 1, 0, DType::F64)?;
    let specs = [Boundary::West, Boundary::East]
        .iter()
        .map(|&b| HaloExchangeSpec::for_boundary(spec.clone(), b, 0))
        .collect::<Result<Vec<_>>>()?;
    Ok((spec, specs))
}

/// The 6x6 field `10 * x + y`.
fn field<B: Kernels>(b: &B) -> Result<NDBuffer<B, f64>> {
    let data: Vec<f64> = (0..36).map(|k| f64::from(k / 6 * 10 + k % 6)).collect();
    NDBuffer::from_slice(b, &[6, 6], &data)
}

/// West sends x = 1, east x = 4, both for y = 1..5.
const PACKED: [f64; 8] = [11.0, 12.0, 13.0, 14.0, 41.0, 42.0, 43.0, 44.0];

/// A valid pack, receive and unpack with checked results: the transformer still works.
fn still_works<B: Kernels>(b: &B, t: &mut HaloDataTransformer<B, f64>) -> Result<()> {
    let q = field(b)?;
    t.async_pack(&[&q, &q], None)?;
    let packed: Vec<f64> = bytemuck::cast_slice(&t.pack_buffer()?.to_vec()?).to_vec();
    assert_eq!(packed, PACKED);
    t.receive_host(bytemuck::cast_slice(&PACKED))?;
    let z = NDBuffer::<B, f64>::zeros(b, &[6, 6])?;
    t.async_unpack(&[&z, &z], None)?;
    t.synchronize()?;
    let got = z.to_ndarray()?;
    for y in 1..5 {
        assert_eq!((got[[0, y]], got[[5, y]]), (PACKED[y - 1], PACKED[y + 3]), "halo at y = {y}");
    }
    Ok(())
}

/// Every operation of a built transformer with wrong counts, shapes, strides, sizes and
/// layouts: typed errors, and the transformer still works after each.
fn transformer_wrong_calls<B: Kernels>(b: &B) -> Result<()> {
    let (_, specs) = base_specs()?;
    let mut t = HaloDataTransformer::<B, f64>::new(b, specs, None)?;
    let q = field(b)?;
    let wrong_shape = NDBuffer::<B, f64>::zeros(b, &[6, 7])?;
    let transposed = NDBuffer::<B, f64>::zeros(b, &[6, 6])?.transpose(None)?;
    let flipped = field(b)?.flip(0)?;
    let empty_far = NDBuffer::<B, f64>::from_buffer_layout(
        Buffer::zeros(b, 0)?,
        Layout::new(vec![6, 0], vec![6, 1], usize::MAX / 8)?,
    )?;
    let calls: Vec<Call<'_, B>> = vec![
        ("none", vec![], None),
        ("one", vec![&q], None),
        ("three", vec![&q, &q, &q], None),
        ("y for a scalar", vec![&q, &q], Some(vec![&q, &q])),
        ("wrong shape", vec![&q, &wrong_shape], None),
        ("transposed", vec![&transposed, &q], None),
        ("flipped", vec![&flipped, &q], None),
        ("empty view far out", vec![&empty_far, &q], None),
    ];
    for (what, x, y) in &calls {
        for unpack in [false, true] {
            let r = if unpack { t.async_unpack(x, y.as_deref()) } else { t.async_pack(x, y.as_deref()) };
            assert!(r.is_err(), "{what} (unpack {unpack}) was accepted");
            let r = t.check_quantities(x, y.as_deref());
            assert!(r.is_err(), "{what}: check_quantities accepted it");
            still_works(b, &mut t)?;
        }
    }
    for len in [0usize, 1, 63, 65, 1 << 20] {
        let wrong_length = |r: Result<()>| matches!(r, Err(Error::LengthMismatch { unit: "bytes", expected: 64, got, .. }) if got == len);
        assert!(wrong_length(t.receive_host(&vec![0u8; len])), "{len} bytes");
        let buf = Buffer::zeros(b, len)?;
        assert!(wrong_length(t.receive(&buf)), "{len} bytes");
        still_works(b, &mut t)?;
    }
    // An empty spec and an empty quantity whose offset lies far past its storage.
    let empty = QuantityHaloSpec::centered(&[Dim::Z, Dim::X], &[0, 4], 0, 0, DType::F64)?;
    let e = HaloExchangeSpec {
        pack_slices: vec![0..0, 0..4],
        unpack_slices: vec![0..0, 0..4],
        pack_clockwise_rotation: i32::MIN,
        specification: empty,
    };
    match HaloDataTransformer::<B, f64>::new(b, vec![e], None) {
        Ok(mut te) => {
            let far = NDBuffer::<B, f64>::from_buffer_layout(
                Buffer::zeros(b, 8)?,
                Layout::new(vec![0, 4], vec![4, 1], usize::MAX / 4)?,
            )?;
            te.async_pack(&[&far], None)?;
            te.async_unpack(&[&far], None)?;
            te.synchronize()?;
        }
        Err(e) => assert!(!matches!(e, Error::InvalidPlan(_)), "{e:?}"),
    }
    still_works(b, &mut t)?;
    t.finalize()?;
    assert!(t.async_pack(&[&q, &q], None).is_err() && t.receive_host(&[0; 64]).is_err());
    assert!(t.pack_buffer().is_err() && t.unpack_buffer().is_err());
    Ok(())
}

/// Transformer construction from hostile spec lists: typed errors, and a transformer built
/// afterwards on the same backend (and pool) works.
fn transformer_hostile_specs<B: Kernels>(b: &B) -> Result<()> {
    let (_, specs) = base_specs()?;
    let pool = MemoryPool::new(b.clone());
    let mut cases: Vec<(&str, Specs, Option<Specs>)> =
        vec![("empty", vec![], None), ("y of another length", specs.clone(), Some(specs[..1].to_vec()))];
    let tweak = |f: &dyn Fn(&mut HaloExchangeSpec)| {
        let mut v = specs.clone();
        f(&mut v[0]);
        v
    };
    cases.push(("f32 spec", tweak(&|e| e.specification.dtype = DType::F32), None));
    cases.push(("unpack larger", tweak(&|e| e.unpack_slices[1] = 0..6), None));
    cases.push(("slice past the array", tweak(&|e| e.pack_slices[0] = 5..usize::MAX), None));
    cases.push(("reversed slice", tweak(&|e| e.pack_slices[0] = Range { start: 3, end: 1 }), None));
    cases.push((
        "one slice missing",
        tweak(&|e| {
            e.pack_slices.pop();
        }),
        None,
    ));
    cases.push(("stride 0", tweak(&|e| e.specification.strides[1] = 0), None));
    cases.push(("stride isize::MAX", tweak(&|e| e.specification.strides[0] = isize::MAX), None));
    cases.push(("origin usize::MAX", tweak(&|e| e.specification.origin[0] = usize::MAX), None));
    cases.push(("shape 2^62", tweak(&|e| e.specification.shape[0] = 1 << 62), None));
    // 2^36 x 2^20 points: a valid array (2^59 bytes), but its north edge alone is 2^36
    // elements: OutOfMemory, not an aborted allocation.
    let huge = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[1 << 36, 1 << 20], 1, 0, DType::F64)?;
    cases.push(("2^36 x 2^20 domain", vec![HaloExchangeSpec::for_boundary(huge, Boundary::North, 0)?], None));
    for (what, x, y) in cases {
        let plain = HaloDataTransformer::<B, f64>::new(b, x.clone(), y.clone());
        let pooled = HaloDataTransformer::<B, f64>::with_pool(b, &pool, x, y);

        assert!(plain.is_err() && pooled.is_err(), "{what} was accepted");
        still_works(b, &mut HaloDataTransformer::<B, f64>::new(b, specs.clone(), None)?)?;
    }
    // Two specs unpacking into the same elements: fine for two arrays, InvalidPlan (at
    // launch, before any write) when both are one array.
    let overlapping = tweak(&|e| e.unpack_slices = specs[1].unpack_slices.clone());
    let mut t = HaloDataTransformer::<B, f64>::new(b, overlapping, None)?;
    let (z1, z2) = (NDBuffer::<B, f64>::zeros(b, &[6, 6])?, NDBuffer::<B, f64>::zeros(b, &[6, 6])?);
    assert!(matches!(t.async_unpack(&[&z1, &z1], None), Err(Error::InvalidPlan(_))));
    assert!(z1.all_equal(0.0)?, "a refused unpack wrote");
    t.async_unpack(&[&z1, &z2], None)?;
    t.synchronize()?;
    // Extreme rotations are just rotations (mod 4): for the west edge, i32::MIN is 0 turns.
    for rot in [i32::MIN, i32::MAX, i32::MIN + 1] {
        let v: Vec<HaloExchangeSpec> =
            specs.iter().map(|e| HaloExchangeSpec { pack_clockwise_rotation: rot, ..e.clone() }).collect();
        let mut t = HaloDataTransformer::<B, f64>::with_pool(b, &pool, v, None)?;
        let q = field(b)?;
        t.async_pack(&[&q, &q], None)?;
        let packed: Vec<f64> = bytemuck::cast_slice(&t.pack_buffer()?.to_vec()?).to_vec();
        let turns = (4 - rot.rem_euclid(4)) % 4;
        let want: Vec<f64> = match turns {
            0 => PACKED.to_vec(),
            // One turn of a 1x4 (x, y) slab: x flipped then swapped: the same 4 values.
            1 => PACKED.to_vec(),
            // 2 turns reverse both axes; 3 turns reverse y.
            _ => PACKED.chunks(4).flat_map(|c| c.iter().rev().copied()).collect(),
        };
        assert_eq!(packed, want, "rotation {rot} ({turns} turns)");
        t.finalize()?;
    }
    assert_eq!(pool.active_blocks(), 0);
    Ok(())
}

backend_tests!(transformer_wrong_calls, transformer_hostile_specs);

/// Received data and quantities from another device are refused before any copy.
#[test]
fn another_device_is_refused() -> Result<()> {
    let (a, other) = (gpubuf::cpu::CpuBackend::new(), gpubuf::cpu::CpuBackend::new());
    let (_, specs) = base_specs()?;
    let mut t = HaloDataTransformer::<_, f64>::new(&a, specs, None)?;
    let foreign = Buffer::from_bytes(&other, bytemuck::cast_slice(&PACKED))?;
    assert!(matches!(t.receive(&foreign), Err(Error::DeviceMismatch(_))));
    let q = field(&other)?;
    assert!(matches!(t.async_pack(&[&q, &q], None), Err(Error::DeviceMismatch(_))));
    still_works(&a, &mut t)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    /// Transformers from valid exchanges with hostile changes, on the CPU: built and used,
    /// or refused with a typed error; either way a transformer built next works.
    #[test]
    fn hostile_transformers(e in valid_exchange(), mutations in prop::collection::vec(mutation(), 0..3), vector in any::<bool>()) {
        let cpu = gpubuf_testkit::cpu();
        let mut e = e;
        e.specification.dtype = DType::F64;
        for m in &mutations {
            apply(&mut e, m);
        }
        let small = e.pack_size().is_ok_and(|n| n <= SMALL) && e.specification.span().is_ok_and(|n| n <= SMALL);
        if small {
            let y = vector.then(|| vec![e.clone()]);
            let built = HaloDataTransformer::<_, f64>::new(&cpu, vec![e.clone()], y);
            if let Ok(mut t) = built {
                // A quantity exactly as the spec describes it, packed and unpacked.
                let s = &e.specification;
                let len = s.span().map_err(|err| TestCaseError::fail(err.to_string()))?;
                let mut run = || -> Result<Vec<u8>> {
                    let layout = Layout::new(s.shape.clone(), s.strides.clone(), 0)?;
                    let q = NDBuffer::<_, f64>::from_buffer_layout(Buffer::zeros(&cpu, len * 8)?, layout)?;
                    let ys = [&q];
                    t.async_pack(&[&q], vector.then_some(&ys[..]))?;
                    let packed = t.pack_buffer()?.to_vec()?;
                    t.receive_host(&packed)?;
                    t.async_unpack(&[&q], vector.then_some(&ys[..]))?;
                    t.synchronize()?;
                    Ok(packed)
                };
                match run() {
                    Ok(packed) => prop_assert_eq!(packed.len(), t.buffer_len() * 8),
                    // One array as both components: its two unpacks may write the same elements.
                    Err(err) => prop_assert!(vector && matches!(err, Error::InvalidPlan(_)), "{err:?}"),
                }
            }
        }
        let (_, specs) = base_specs().map_err(|err| TestCaseError::fail(err.to_string()))?;
        let mut t = HaloDataTransformer::<_, f64>::new(&cpu, specs, None).map_err(|err| TestCaseError::fail(err.to_string()))?;
        still_works(&cpu, &mut t).map_err(|err| TestCaseError::fail(err.to_string()))?;
    }
}
