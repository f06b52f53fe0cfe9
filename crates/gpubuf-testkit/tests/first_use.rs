//! What a first program does, on every backend: arrays from a pool (stale `empty`, zeroed
//! `zeros`, typed errors), a periodic halo update of one rank onto itself through
//! `loopback`, and a mirror of a 1-d array.

use gpubuf::halo::TilePartitioner;
use gpubuf::ndarray::{s, Array1, Array3};
use gpubuf::pool::ImmediateAllocator;
use gpubuf::{
    Boundary, DType, Dim, DirtyPolicy, Error, HaloDataTransformer, HaloExchangeSpec, Kernels, MemoryPool,
    Mirror, NDBuffer, Order, QuantityHaloSpec, Result,
};
use gpubuf_testkit::backend_tests;

/// `empty` hands out a reused block as it was left; `zeros` and `full` define it.
fn pooled_arrays<B: Kernels>(b: &B) -> Result<()> {
    let pool = MemoryPool::new(ImmediateAllocator(b.clone()));
    let a = pool.full::<_, f64>(b, &[48, 48, 10], 7.0)?;
    assert!(a.all_equal(7.0)?);
    drop(a);
    let stale = pool.empty::<_, f64>(b, &[48, 48, 10], Order::F)?;
    assert_eq!(pool.stats().hits, 1, "the block came back");
    assert!(stale.all_equal(7.0)?, "empty does not clear a reused block");
    assert_eq!(stale.strides(), &[1, 48, 48 * 48]);
    drop(stale);
    let z = pool.zeros::<_, f64>(b, &[48, 48, 10])?;
    assert!(z.all_equal(0.0)?);
    let host = Array1::from_iter(0..12).into_shape_with_order((3, 4))?;
    let from = pool.from_ndarray(b, host.t())?; // strided: gathered to C order
    assert_eq!(from.shape(), &[4, 3]);
    assert_eq!(from.to_ndarray()?, host.t().into_dyn());
    // Typed errors, and nothing taken from the pool by a refused request.
    let before = pool.active_blocks();
    assert!(matches!(pool.empty::<_, f64>(b, &[usize::MAX, 2], Order::C), Err(Error::InvalidArgument(_))));
    assert!(matches!(pool.empty::<_, f64>(b, &[1 << 62, 4], Order::C), Err(Error::InvalidArgument(_))));
    assert!(matches!(pool.from_slice(b, &[2, 2], &[1i32; 3]), Err(Error::ShapeMismatch { .. })));
    assert_eq!(pool.active_blocks(), before);
    let empty = pool.zeros::<_, i32>(b, &[0, 5])?;
    assert_eq!(empty.to_vec()?, Vec::<i32>::new());
    Ok(())
}

/// A periodic 48x48x10 field with a 3-point halo, updated on one rank by a transformer
/// over the eight periodic specs, equals the host's wrap-around padding.
fn periodic_self_exchange<B: Kernels>(b: &B) -> Result<()> {
    let (n, h, nz) = (48, 3, 10);
    let spec = QuantityHaloSpec::centered(&[Dim::X, Dim::Y, Dim::Z], &[n, n, nz], h, 0, DType::F64)?;
    let specs = Boundary::ALL
        .iter()
        .map(|&bd| HaloExchangeSpec::periodic(spec.clone(), bd))
        .collect::<Result<Vec<_>>>()?;
    let pool = MemoryPool::new(b.clone());
    let interior = Array3::from_shape_fn((n, n, nz), |(i, j, k)| (i * 10_000 + j * 100 + k) as f64);
    let mut host = Array3::<f64>::from_elem((n + 2 * h, n + 2 * h, nz), -1.0);
    host.slice_mut(s![h..h + n, h..h + n, ..]).assign(&interior);
    let field = pool.from_ndarray(b, host.view())?;
    let mut t = HaloDataTransformer::<B, f64>::with_pool(b, &pool, specs, None)?;
    let q = vec![&field; Boundary::ALL.len()];
    t.async_pack(&q, None)?;
    t.loopback()?;
    t.async_unpack(&q, None)?;
    t.synchronize()?;
    let wrap = |i: usize| (i + n - h) % n;
    let want = Array3::from_shape_fn(host.dim(), |(i, j, k)| interior[[wrap(i), wrap(j), k]]);
    assert_eq!(field.to_ndarray()?, want.into_dyn());
    // The error for the wrong number of arrays says what to pass.
    let err = t.async_pack(&[&field], None).unwrap_err().to_string();
    assert!(err.contains("one array per spec") && err.contains("1 x quantities for 8 specs"), "{err}");
    // The tile partitioner of one periodic rank agrees: every neighbour is the rank itself.
    let tiles = TilePartitioner::new((1, 1), true)?;
    assert!(Boundary::ALL.iter().all(|&bd| gpubuf::halo::Partitioner::neighbor(&tiles, 0, bd).is_some()));
    Ok(())
}

/// A mirror of a 1-d array (any dimension is taken), updated where it changed.
fn mirror_of_any_dimension<B: Kernels>(b: &B) -> Result<()> {
    let host = Array1::<f32>::zeros(16);
    let mut m = Mirror::new(b, host.view(), DirtyPolicy::exact(), None)?;
    let d = m.view(&[5..8])?;
    m.fill(&d, 1.0)?;
    assert_eq!(m.sync()?.bytes, 12);
    assert_eq!(m.device().to_vec()?[5..9], [1.0, 1.0, 1.0, 0.0]);
    let grid = gpubuf::ndarray::Array2::<i64>::ones((3, 4));
    let m2 = Mirror::new(b, grid.t(), DirtyPolicy::default(), None)?;
    assert_eq!(m2.device().shape(), &[4, 3]);
    Ok(())
}

backend_tests!(pooled_arrays, periodic_self_exchange, mirror_of_any_dimension);

/// `NDBuffer` is nameable with the pool's arrays on the CPU without naming the backend.
#[test]
fn pool_arrays_are_ndbuffers() {
    let cpu = gpubuf_testkit::cpu();
    let pool = MemoryPool::new(cpu.clone());
    let a: NDBuffer<_, u8> = pool.from_slice(&cpu, &[3], &[1, 2, 3]).unwrap();
    assert_eq!(a.to_vec().unwrap(), vec![1, 2, 3]);
}
