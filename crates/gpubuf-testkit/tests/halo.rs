//! The halo data transformer on every backend, against a reference written independently
//! (rotation by index formula, assignment by ndarray slicing).

use gpubuf::halo::{Boundary, Dim, HaloDataTransformer, HaloExchangeSpec, QuantityHaloSpec};
use gpubuf::pool::MemoryPool;
use gpubuf::{DType, Element, Error, Kernels, NDBuffer, Result};
use gpubuf_testkit::reference::rotate as ref_rotate;
use gpubuf_testkit::{backend_tests, on_every_backend, EachBackend};
use ndarray::{ArrayD, IxDyn, SliceInfoElem};
use proptest::prelude::*;
use std::ops::Range;

fn sl(r: &[Range<usize>]) -> Vec<SliceInfoElem> {
    r.iter()
        .map(|r| SliceInfoElem::Slice { start: r.start as isize, end: Some(r.end as isize), step: 1 })
        .collect()
}

fn region<T: Clone>(a: &ArrayD<T>, r: &[Range<usize>]) -> ArrayD<T> {
    a.slice(sl(r).as_slice()).to_owned()
}

trait Num: Element + std::ops::Neg<Output = Self> + From<i32> {}
impl Num for f64 {}
impl Num for i32 {}

fn dtype_of<T: Element>() -> DType {
    T::DTYPE
}

/// The reference pack buffer of specs over host arrays.
fn ref_pack<T: Num>(
    specs: &[(HaloExchangeSpec, Option<HaloExchangeSpec>)],
    xs: &[ArrayD<T>],
    ys: &[ArrayD<T>],
) -> Vec<T> {
    let mut out = Vec::new();
    for (i, (sx, sy)) in specs.iter().enumerate() {
        let n = -sx.pack_clockwise_rotation;
        let rx = ref_rotate(&region(&xs[i], &sx.pack_slices), &sx.specification.dims, n);
        match sy {
            None => out.extend(rx.iter().cloned()),
            Some(sy) => {
                let ry = ref_rotate(&region(&ys[i], &sy.pack_slices), &sy.specification.dims, n);
                let neg = |a: &ArrayD<T>| a.iter().map(|&v| -v).collect::<Vec<T>>();
                let pos = |a: &ArrayD<T>| a.iter().copied().collect::<Vec<T>>();
                let (first, second) = match n.rem_euclid(4) {
                    1 => (pos(&ry), neg(&rx)),
                    2 => (neg(&rx), neg(&ry)),
                    3 => (neg(&ry), pos(&rx)),
                    _ => (pos(&rx), pos(&ry)),
                };
                out.extend(first);
                out.extend(second);
            }
        }
    }
    out
}

/// The reference unpack: each block assigned, unrotated, into its unpack slices.
fn ref_unpack<T: Num>(
    specs: &[(HaloExchangeSpec, Option<HaloExchangeSpec>)],
    buffer: &[T],
    xs: &mut [ArrayD<T>],
    ys: &mut [ArrayD<T>],
) {
    let mut at = 0;
    for (i, (sx, sy)) in specs.iter().enumerate() {
        let targets: Vec<(&HaloExchangeSpec, bool)> = match sy {
            None => vec![(sx, false)],
            Some(sy) => vec![(sx, false), (sy, true)],
        };
        for (s, is_y) in targets {
            let a = if is_y { &mut ys[i] } else { &mut xs[i] };
            let mut view = a.slice_mut(sl(&s.unpack_slices).as_slice());
            let n = view.len();
            for (dst, &src) in view.iter_mut().zip(&buffer[at..at + n]) {
                *dst = src;
            }
            at += n;
        }
    }
}

fn host_array<T: Num>(spec: &QuantityHaloSpec, salt: i32) -> ArrayD<T> {
    let mut k = 0;
    ArrayD::from_shape_fn(IxDyn(&spec.shape), |_| {
        k += 1;
        T::from(k * 7 + salt)
    })
}

/// Runs one configuration: every boundary of one quantity (or one vector pair) in one
/// transformer, pack against the reference, then pack -> copy -> unpack against it.
#[allow(clippy::too_many_arguments)]
fn run_case<B: Kernels, T: Num>(
    b: &B,
    dims: &[Dim],
    extent: &[usize],
    n_halo: usize,
    pad: usize,
    rotation: i32,
    vector: bool,
    boundaries: &[Boundary],
) -> Result<()> {
    let spec = QuantityHaloSpec::centered(dims, extent, n_halo, pad, dtype_of::<T>())?;
    let specs: Vec<(HaloExchangeSpec, Option<HaloExchangeSpec>)> = boundaries
        .iter()
        .map(|&bd| {
            let x = HaloExchangeSpec::for_boundary(spec.clone(), bd, rotation)?;
            let y =
                if vector { Some(HaloExchangeSpec::for_boundary(spec.clone(), bd, rotation)?) } else { None };
            Ok((x, y))
        })
        .collect::<Result<_>>()?;
    let hx = host_array::<T>(&spec, 0);
    let hy = host_array::<T>(&spec, 100_000); // different x and y data: a swapped component shows
    let qx = NDBuffer::<B, T>::from_ndarray(b, hx.view())?;
    let qy = NDBuffer::<B, T>::from_ndarray(b, hy.view())?;
    let xs: Vec<&NDBuffer<B, T>> = specs.iter().map(|_| &qx).collect();
    let ys: Vec<&NDBuffer<B, T>> = specs.iter().map(|_| &qy).collect();
    let sx: Vec<HaloExchangeSpec> = specs.iter().map(|s| s.0.clone()).collect();
    let sy: Option<Vec<HaloExchangeSpec>> =
        if vector { Some(specs.iter().filter_map(|s| s.1.clone()).collect()) } else { None };
    let mut t = HaloDataTransformer::<B, T>::new(b, sx, sy)?;
    t.async_pack(&xs, vector.then_some(ys.as_slice()))?;
    let packed: Vec<T> = bytemuck::cast_slice(&t.pack_buffer()?.to_vec()?).to_vec();
    let hxs = vec![hx.clone(); specs.len()];
    let hys = vec![hy.clone(); specs.len()];
    let want = ref_pack(&specs, &hxs, &hys);
    assert_eq!(packed, want, "pack {dims:?} halo {n_halo} pad {pad} rot {rotation} vector {vector}");
    // pack -> copy -> unpack into fresh zero arrays.
    let pack_buf = t.pack_buffer()?.clone();
    t.receive(&pack_buf)?;
    let tx = NDBuffer::<B, T>::zeros(b, &spec.shape)?;
    let ty = NDBuffer::<B, T>::zeros(b, &spec.shape)?;
    let txs: Vec<&NDBuffer<B, T>> = specs.iter().map(|_| &tx).collect();
    let tys: Vec<&NDBuffer<B, T>> = specs.iter().map(|_| &ty).collect();
    t.async_unpack(&txs, vector.then_some(tys.as_slice()))?;
    t.synchronize()?;
    let zero = ArrayD::<T>::from_elem(IxDyn(&spec.shape), T::from(0));
    let mut rx = vec![zero.clone()];
    let mut ry = vec![zero];
    // All specs target the same array: apply them in turn to one reference array.
    let mut at = 0;
    for (sxk, syk) in &specs {
        let one = [(sxk.clone(), syk.clone())];
        let len = sxk.unpack_size()? + syk.as_ref().map_or(Ok(0), |s| s.unpack_size())?;
        ref_unpack(&one, &want[at..at + len], &mut rx, &mut ry);
        at += len;
    }
    assert_eq!(tx.to_ndarray()?, rx[0], "unpack x {dims:?} rot {rotation}");
    if vector {
        assert_eq!(ty.to_ndarray()?, ry[0], "unpack y {dims:?} rot {rotation}");
    }
    t.finalize()?;
    assert!(!t.ready());
    Ok(())
}

const DIMS: [&[Dim]; 7] = [
    &[Dim::X, Dim::Y],
    &[Dim::Y, Dim::X],
    &[Dim::X, Dim::Y, Dim::Z],
    &[Dim::Z, Dim::Y, Dim::X],
    &[Dim::X, Dim::Z, Dim::Y],
    &[Dim::XInterface, Dim::Y, Dim::Z],
    &[Dim::X, Dim::YInterface, Dim::ZInterface],
];

/// NDSL's matrix and more: dims orders incl. interface dims, halos 1 and 3, padded
/// arrays, rotations 0..3, scalar and vector (with different x and y data), all edges and
/// corners at once.
fn ndsl_matrix<B: Kernels>(b: &B) -> Result<()> {
    for dims in DIMS {
        let extent: Vec<usize> =
            dims.iter().map(|d| if matches!(d, Dim::Z | Dim::ZInterface) { 3 } else { 6 }).collect();
        for n_halo in [1, 3] {
            for pad in [0, 1] {
                for rotation in 0..4 {
                    for vector in [false, true] {
                        run_case::<B, f64>(b, dims, &extent, n_halo, pad, rotation, vector, &Boundary::ALL)?;
                    }
                }
            }
        }
    }
    run_case::<B, i32>(b, DIMS[2], &[5, 5, 2], 2, 1, 1, true, &[Boundary::West, Boundary::NorthEast])?;
    Ok(())
}

/// Golden rotations worked by hand from numpy's definitions.
fn golden_rotations<B: Kernels>(b: &B) -> Result<()> {
    // A 2x3 array [[0,1,2],[3,4,5]] with dims (x, y), no halo: the whole array packed with
    // rotation -n applies n clockwise turns.
    let cases: [(i32, Vec<i32>); 4] = [
        (0, vec![0, 1, 2, 3, 4, 5]),
        (1, vec![3, 0, 4, 1, 5, 2]),
        (2, vec![5, 4, 3, 2, 1, 0]),
        (3, vec![2, 5, 1, 4, 0, 3]),
    ];
    for (n, want) in cases {
        let spec = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[2, 3], 0, 0, DType::I32)?;
        let e = HaloExchangeSpec {
            pack_slices: vec![0..2, 0..3],
            unpack_slices: vec![0..2, 0..3],
            pack_clockwise_rotation: -n,
            specification: spec,
        };
        let q = NDBuffer::<B, i32>::from_slice(b, &[2, 3], &[0, 1, 2, 3, 4, 5])?;
        let mut t = HaloDataTransformer::<B, i32>::new(b, vec![e], None)?;
        t.async_pack(&[&q], None)?;
        let got: Vec<i32> = bytemuck::cast_slice(&t.pack_buffer()?.to_vec()?).to_vec();
        assert_eq!(got, want, "2-d, {n} turns");
    }
    // 1-d quirks: x only: 1 flips, 3 does nothing; y only the other way round; 2 reverses.
    for (dim, n, want) in [
        (Dim::X, 1, [3, 2, 1, 0]),
        (Dim::X, 3, [0, 1, 2, 3]),
        (Dim::X, 2, [3, 2, 1, 0]),
        (Dim::Y, 1, [0, 1, 2, 3]),
        (Dim::Y, 3, [3, 2, 1, 0]),
        (Dim::Y, 2, [3, 2, 1, 0]),
        (Dim::Z, 2, [0, 1, 2, 3]),
    ] {
        let spec = QuantityHaloSpec::centered(&[dim], &[4], 0, 0, DType::I32)?;
        let e = HaloExchangeSpec {
            pack_slices: vec![0..4],
            unpack_slices: vec![0..4],
            pack_clockwise_rotation: -n,
            specification: spec,
        };
        let q = NDBuffer::<B, i32>::from_slice(b, &[4], &[0, 1, 2, 3])?;
        let mut t = HaloDataTransformer::<B, i32>::new(b, vec![e], None)?;
        t.async_pack(&[&q], None)?;
        let got: Vec<i32> = bytemuck::cast_slice(&t.pack_buffer()?.to_vec()?).to_vec();
        assert_eq!(got, want, "1-d {dim:?}, {n} turns");
    }
    Ok(())
}

/// Boundary slices follow NDSL's get_boundary_slice, interface dims included.
fn boundary_slices_match_ndsl<B: Kernels>(_b: &B) -> Result<()> {
    let s = QuantityHaloSpec::centered(&[Dim::X, Dim::Y, Dim::Z], &[4, 5, 2], 2, 0, DType::F32)?;
    assert_eq!(s.shape, vec![8, 9, 2]);
    assert_eq!(s.boundary_slices(Boundary::West, true)?, vec![2..4, 2..7, 0..2]);
    assert_eq!(s.boundary_slices(Boundary::West, false)?, vec![0..2, 2..7, 0..2]);
    assert_eq!(s.boundary_slices(Boundary::East, true)?, vec![4..6, 2..7, 0..2]);
    assert_eq!(s.boundary_slices(Boundary::North, false)?, vec![2..6, 7..9, 0..2]);
    assert_eq!(s.boundary_slices(Boundary::SouthWest, false)?, vec![0..2, 0..2, 0..2]);
    assert_eq!(s.boundary_slices(Boundary::NorthEast, true)?, vec![4..6, 5..7, 0..2]);
    // Interface dims: one point overlaps, so the interior starts one further in.
    let i = QuantityHaloSpec::centered(&[Dim::XInterface, Dim::Y], &[5, 4], 2, 0, DType::F32)?;
    assert_eq!(i.boundary_slices(Boundary::West, true)?, vec![3..5, 2..6]);
    assert_eq!(i.boundary_slices(Boundary::East, true)?, vec![4..6, 2..6]);
    assert_eq!(i.boundary_slices(Boundary::East, false)?, vec![7..9, 2..6]);
    let none = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[4, 4], 0, 0, DType::F32)?;
    let mut too_wide = none.clone();
    too_wide.n_halo = 1;
    assert!(matches!(too_wide.boundary_slices(Boundary::West, false), Err(Error::OutOfBounds { .. })));
    Ok(())
}

/// Errors, not panics.
fn halo_errors<B: Kernels>(b: &B) -> Result<()> {
    let spec = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[4, 4], 1, 0, DType::F64)?;
    let w = HaloExchangeSpec::for_boundary(spec.clone(), Boundary::West, 0)?;
    assert!(matches!(HaloDataTransformer::<B, f64>::new(b, vec![], None), Err(Error::InvalidArgument(_))));
    assert!(HaloDataTransformer::<B, f64>::new(b, vec![w.clone(), w.clone()], Some(vec![w.clone()])).is_err());
    let mut f32spec = w.clone();
    f32spec.specification.dtype = DType::F32;
    assert!(matches!(
        HaloDataTransformer::<B, f64>::new(b, vec![w.clone(), f32spec.clone()], None),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        HaloDataTransformer::<B, f64>::new(b, vec![f32spec], None),
        Err(Error::DTypeMismatch { .. })
    ));
    let mut outside = w.clone();
    outside.pack_slices[0] = 5..7;
    assert!(matches!(
        HaloDataTransformer::<B, f64>::new(b, vec![outside], None),
        Err(Error::OutOfBounds { .. })
    ));
    // A halo wider than the compute domain would send halo points.
    for (dims, extent, n_halo) in [([Dim::X, Dim::Y], [2, 4], 3), ([Dim::XInterface, Dim::Y], [3, 4], 3)] {
        let r = QuantityHaloSpec::centered(&dims, &extent, n_halo, 0, DType::F64);
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{dims:?} {extent:?} halo {n_halo}: {r:?}");
    }
    let mut wide = spec.clone();
    wide.n_halo = 5;
    assert!(matches!(wide.boundary_slices(Boundary::East, true), Err(Error::InvalidArgument(_))));
    let mut t = HaloDataTransformer::<B, f64>::new(b, vec![w], None)?;
    let wrong = NDBuffer::<B, f64>::zeros(b, &[6, 7])?;
    assert!(matches!(t.async_pack(&[&wrong], None), Err(Error::ShapeMismatch { .. })));
    let strided = NDBuffer::<B, f64>::zeros(b, &[6, 6])?.transpose(None)?;
    assert!(matches!(t.async_pack(&[&strided], None), Err(Error::InvalidArgument(_))));
    let right = NDBuffer::<B, f64>::zeros(b, &[6, 6])?;
    assert!(t.async_pack(&[&right, &right], None).is_err());
    assert!(t.async_pack(&[&right], Some(&[&right])).is_err(), "a scalar transformer takes no y");
    let e = t.receive_host(&[0u8; 8]).expect_err("wrong unpack buffer size");
    let want = t.buffer_len() * 8;
    let msg = format!(
        "received halo data: expected {want} bytes ({} float64 elements), got 8 bytes",
        t.buffer_len()
    );
    assert!(
        matches!(&e, Error::LengthMismatch { unit: "bytes", got: 8, expected, .. } if *expected == want),
        "{e:?}"
    );
    assert_eq!(e.to_string(), msg);
    t.finalize()?;
    assert!(t.async_pack(&[&right], None).is_err());
    Ok(())
}

/// Buffers from a pool go back on finalize.
fn pooled_transformer<B: Kernels>(b: &B) -> Result<()> {
    let pool = MemoryPool::new(b.clone());
    let spec = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[8, 8], 2, 0, DType::F32)?;
    let specs = Boundary::ALL
        .iter()
        .map(|&bd| HaloExchangeSpec::for_boundary(spec.clone(), bd, 0))
        .collect::<Result<Vec<_>>>()?;
    let mut t = HaloDataTransformer::<B, f32>::with_pool(b, &pool, specs, None)?;
    assert_eq!(pool.active_blocks(), 2);
    t.finalize()?;
    assert_eq!(pool.active_blocks(), 0);
    Ok(())
}

backend_tests!(ndsl_matrix, golden_rotations, boundary_slices_match_ndsl, halo_errors, pooled_transformer);

/// Cross-backend: random specs give byte-identical pack buffers and unpacked arrays.
struct Random {
    dims: &'static [Dim],
    extent: Vec<usize>,
    n_halo: usize,
    pad: usize,
    rotation: i32,
    vector: bool,
    boundaries: Vec<Boundary>,
}

impl EachBackend for Random {
    type Output = (Vec<u8>, Vec<u8>, Vec<u8>);
    fn run<B: Kernels>(&self, b: &B) -> Result<Self::Output> {
        let spec = QuantityHaloSpec::centered(self.dims, &self.extent, self.n_halo, self.pad, DType::F64)?;
        let mk = |bd: Boundary| HaloExchangeSpec::for_boundary(spec.clone(), bd, self.rotation);
        let sx = self.boundaries.iter().map(|&bd| mk(bd)).collect::<Result<Vec<_>>>()?;
        let sy = if self.vector { Some(sx.clone()) } else { None };
        let hx = host_array::<f64>(&spec, 1);
        let hy = host_array::<f64>(&spec, 50_000);
        let qx = NDBuffer::<B, f64>::from_ndarray(b, hx.view())?;
        let qy = NDBuffer::<B, f64>::from_ndarray(b, hy.view())?;
        let xs: Vec<&NDBuffer<B, f64>> = sx.iter().map(|_| &qx).collect();
        let ys: Vec<&NDBuffer<B, f64>> = sx.iter().map(|_| &qy).collect();
        let mut t = HaloDataTransformer::<B, f64>::new(b, sx, sy)?;
        t.async_pack(&xs, self.vector.then_some(ys.as_slice()))?;
        let packed = t.pack_buffer()?.to_vec()?;
        let copy = t.pack_buffer()?.clone();
        t.receive(&copy)?;
        let tx = NDBuffer::<B, f64>::zeros(b, &spec.shape)?;
        let ty = NDBuffer::<B, f64>::zeros(b, &spec.shape)?;
        let txs: Vec<&NDBuffer<B, f64>> = xs.iter().map(|_| &tx).collect();
        let tys: Vec<&NDBuffer<B, f64>> = xs.iter().map(|_| &ty).collect();
        t.async_unpack(&txs, self.vector.then_some(tys.as_slice()))?;
        t.synchronize()?;
        Ok((packed, tx.buffer().to_vec()?, ty.buffer().to_vec()?))
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_specs_identical_on_every_backend(
        d in 0usize..7,
        ext in prop::collection::vec(2usize..7, 3),
        n_halo in 1usize..3,
        pad in 0usize..2,
        rotation in -3i32..4,
        vector in any::<bool>(),
        picks in prop::collection::vec(any::<bool>(), 8),
    ) {
        let dims = DIMS[d];
        let boundaries: Vec<Boundary> = Boundary::ALL.iter().zip(&picks).filter(|(_, &p)| p).map(|(&b, _)| b).collect();
        prop_assume!(!boundaries.is_empty());
        // Rotations by an odd number of turns need square horizontal extents.
        let h = ext[0];
        let extent: Vec<usize> = dims.iter().zip(&ext).map(|(dd, &e)| if dd.is_horizontal() { h } else { e }).collect();
        // The halo fits inside the compute domain (one point less on an interface axis).
        let r = Random { dims, extent, n_halo: n_halo.min(h - 1), pad, rotation, vector, boundaries };
        let results = on_every_backend(&r).map_err(|e| TestCaseError::fail(e.to_string()))?;
        for (kind, out) in &results {
            prop_assert_eq!(out, &results[0].1, "{} differs from cpu", kind);
        }
    }
}
