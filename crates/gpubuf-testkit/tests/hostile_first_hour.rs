//! The first-hour APIs under hostile input: pooled array constructors with overflowing,
//! empty and huge shapes, CPU views of flipped, offset, broadcast and shared arrays (also
//! re-entrant and from two threads), periodic and `between` specs of mismatched edges, and
//! mirrors of 0-d and empty arrays. Every refusal is a typed error that leaves the objects
//! usable; nothing panics.

use gpubuf::cpu::{CpuBackend, CpuView};
use gpubuf::halo::TilePartitioner;
use gpubuf::ndarray::{arr2, Array0, ArrayD, IxDyn};
use gpubuf::{
    Boundary, DType, Dim, DirtyPolicy, Error, HaloDataTransformer, HaloExchangeSpec, Layout, MemoryPool,
    Mirror, NDBuffer, Order, QuantityHaloSpec, Result,
};

fn cpu() -> CpuBackend {
    gpubuf_testkit::cpu()
}

#[test]
fn pool_constructors_refuse_what_cannot_exist() -> Result<()> {
    let b = cpu();
    let pool = MemoryPool::new(b.clone());
    // Byte counts past isize::MAX (element counts that fit a usize) and past usize::MAX.
    for shape in
        [vec![1usize << 60], vec![(isize::MAX as usize) / 8 + 1], vec![usize::MAX], vec![1 << 32, 1 << 32]]
    {
        for order in [Order::C, Order::F] {
            let r = pool.empty::<_, f64>(&b, &shape, order);
            assert!(
                matches!(r, Err(Error::InvalidArgument(_) | Error::OutOfMemory { .. })),
                "{shape:?} {order:?}: {r:?}"
            );
        }
        assert!(pool.zeros::<_, u8>(&b, &shape).is_err() || shape == [1usize << 32, 1 << 32]);
    }
    assert_eq!(pool.active_blocks(), 0, "a refused request holds no block");
    // Zero-size dimensions next to huge ones: empty arrays that work like any other.
    for order in [Order::C, Order::F] {
        let r = pool.empty::<_, i32>(&b, &[usize::MAX, 0, 3], order);
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        let e = pool.empty::<_, i32>(&b, &[5, 0, 3], order)?;
        assert_eq!(e.size(), 0);
        assert_eq!(e.to_vec()?, Vec::<i32>::new());
        assert_eq!(e.view(|v| v.len())?, 0);
        e.view_mut(|mut v| v.fill(1))?;
        assert_eq!(e.transpose(None)?.shape(), &[3, 0, 5]);
    }
    // A 0-d array holds one element.
    let s = pool.full::<_, i64>(&b, &[], i64::MAX)?;
    assert_eq!(s.to_vec()?, vec![i64::MAX]);
    // from_slice with the wrong length, and from_ndarray of a broadcast view.
    assert!(matches!(pool.from_slice(&b, &[usize::MAX, 2], &[1u8]), Err(Error::InvalidArgument(_))));
    assert!(matches!(pool.from_slice(&b, &[0], &[1u8]), Err(Error::ShapeMismatch { .. })));
    let one = Array0::from_elem((), 3i32);
    let wide = one.broadcast(IxDyn(&[2, 3])).ok_or_else(|| Error::invalid("broadcast"))?;
    assert_eq!(pool.from_ndarray(&b, wide)?.to_vec()?, vec![3i32; 6]);
    let huge = one.broadcast(IxDyn(&[1 << 31, 1 << 31])).ok_or_else(|| Error::invalid("broadcast"))?;
    assert!(pool.from_ndarray(&b, huge).is_err());
    Ok(())
}

#[test]
fn views_of_flipped_offset_and_broadcast_arrays() -> Result<()> {
    let b = cpu();
    let a = NDBuffer::<_, i32>::from_ndarray(&b, arr2(&[[1, 2, 3], [4, 5, 6]]).view())?;
    let f = a.slice(&[0..2, 1..3])?.flip(0)?.flip(1)?;
    assert_eq!(f.view(|v| v.iter().copied().collect::<Vec<_>>())?, vec![6, 5, 3, 2]);
    f.view_mut(|mut v| v[[0, 0]] = 60)?;
    assert_eq!(a.to_vec()?, vec![1, 2, 3, 4, 5, 60]);
    // Broadcast: readable, never writable.
    let row = NDBuffer::<_, i32>::from_slice(&b, &[3], &[7, 8, 9])?;
    let wide = NDBuffer::<_, i32>::from_buffer_layout(
        row.buffer().clone(),
        Layout::new(vec![4, 3], vec![0, 1], 0)?,
    )?;
    assert_eq!(wide.view(|v| v.sum())?, 4 * 24);
    assert!(matches!(wide.view_mut(|mut v| v.fill(0)), Err(Error::InvalidArgument(_))));
    assert_eq!(row.to_vec()?, vec![7, 8, 9], "a refused mutable view writes nothing");
    Ok(())
}

#[test]
fn reentrant_views_are_errors_not_aliases() -> Result<()> {
    let b = cpu();
    let a = NDBuffer::<_, f32>::from_slice(&b, &[4], &[1.0, 2.0, 3.0, 4.0])?;
    let inner = a.view_mut(|_| a.view(|v| v.sum()))?;
    assert!(inner.is_err(), "a read view inside a mutable one aliases it: {inner:?}");
    let inner = a.view(|_| a.view_mut(|mut v| v.fill(0.0)))?;
    assert!(inner.is_err(), "a mutable view inside a read one aliases it: {inner:?}");
    assert!(a.view_mut(|_| a.fill(9.0))?.is_err());
    assert_eq!(a.to_vec()?, vec![1.0, 2.0, 3.0, 4.0], "no refused call wrote anything");
    // Two readers on one thread share the bytes: no conflict, and no wait for itself.
    assert_eq!(a.view(|_| a.view(|v| v.sum()))??, 10.0);
    assert_eq!(a.view(|v| v.sum())?, 10.0, "the array is usable after every refusal");
    Ok(())
}

#[test]
fn two_threads_on_overlapping_views_do_not_race() -> Result<()> {
    let b = cpu();
    let a = NDBuffer::<_, i64>::zeros(&b, &[64])?;
    let (lo, hi) = (a.slice(&[0..40])?, a.slice(&[20..64])?);
    std::thread::scope(|s| {
        let w = s.spawn(|| {
            for _ in 0..2000 {
                lo.view_mut(|mut v| v += 1)?;
            }
            Ok::<_, Error>(())
        });
        for _ in 0..2000 {
            // Every element of the overlap is read under one lock: all equal at any time.
            let same = hi.view(|v| v.slice(gpubuf::ndarray::s![..20]).iter().all(|&x| x == v[0]))?;
            assert!(same, "a reader saw a half-written view");
        }
        w.join().map_err(|_| Error::invalid("writer panicked"))?
    })?;
    assert!(a.to_vec()?[..40].iter().all(|&x| x == 2000));
    Ok(())
}

#[test]
fn mismatched_edges_are_refused_or_exact() -> Result<()> {
    let b = cpu();
    // A non-square tile: east (2 x 3) and north (5 x 2) edges differ in shape and size.
    let q = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[5, 3], 2, 0, DType::F64)?;
    let corner_to_edge = HaloExchangeSpec::between(q.clone(), Boundary::NorthEast, Boundary::North, 0)?;
    let r = HaloDataTransformer::<_, f64>::new(&b, vec![corner_to_edge], None);
    assert!(matches!(r, Err(Error::ShapeMismatch { .. } | Error::InvalidArgument(_))), "{r:?}");
    // Every periodic spec of every boundary, also with staggered dims, self-exchanges.
    let staggered = QuantityHaloSpec::centered(&[Dim::XInterface, Dim::Y], &[5, 3], 2, 0, DType::F64)?;
    for spec in [q.clone(), staggered] {
        let specs: Vec<HaloExchangeSpec> = Boundary::ALL
            .iter()
            .map(|&bd| HaloExchangeSpec::periodic(spec.clone(), bd))
            .collect::<Result<_>>()?;
        let mut t = HaloDataTransformer::<_, f64>::new(&b, specs, None)?;
        let field = ArrayD::from_shape_fn(IxDyn(&spec.shape), |ix| (ix[0] * 100 + ix[1]) as f64);
        let a = NDBuffer::from_ndarray(&b, field.view())?;
        let x: Vec<&NDBuffer<_, f64>> = vec![&a; Boundary::ALL.len()];
        t.async_pack(&x, None)?;
        t.loopback()?;
        t.async_unpack(&x, None)?;
        t.synchronize()?;
        let _ = TilePartitioner::new((1, 1), true)?;
    }
    // Loopback only where each spec unpacks the shape it packs: the 2 x 3 east block of a
    // 3 x 3 tile does not fit the 3 x 2 north halo unturned (the bytes would land
    // scrambled), and does after one quarter turn.
    let sq = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[3, 3], 2, 0, DType::F64)?;
    let field = ArrayD::from_shape_fn(IxDyn(&sq.shape), |ix| (ix[0] * 100 + ix[1]) as f64);
    let a = NDBuffer::from_ndarray(&b, field.view())?;
    for (turns, fits) in [(0, false), (1, true), (2, false), (-1, true)] {
        let spec = HaloExchangeSpec::between(sq.clone(), Boundary::East, Boundary::North, turns)?;
        let mut t = HaloDataTransformer::<_, f64>::new(&b, vec![spec], None)?;
        t.async_pack(&[&a], None)?;
        let r = t.loopback();
        assert_eq!(r.is_ok(), fits, "{turns} turns: {r:?}");
        if !fits {
            assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        }
    }
    // A zero halo has no edge to exchange.
    let mut none = q.clone();
    none.n_halo = 0;
    let r = HaloExchangeSpec::periodic(none.clone(), Boundary::East)
        .and_then(|s| HaloDataTransformer::<_, f64>::new(&b, vec![s], None).map(drop));
    assert!(r.is_err() || HaloExchangeSpec::periodic(none, Boundary::East)?.pack_size()? == 0);
    Ok(())
}

#[test]
fn mirrors_of_scalars_and_empty_arrays() -> Result<()> {
    let b = cpu();
    let scalar = Array0::from_elem((), 2.5f64);
    let empty = ArrayD::<f64>::zeros(IxDyn(&[0, 4]));
    for host in [scalar.view().into_dyn(), empty.view()] {
        match Mirror::new(&b, host.view(), DirtyPolicy::hull(), None) {
            Ok(m) => assert_eq!(m.device().to_ndarray()?, host),
            Err(err) => {
                assert!(matches!(err, Error::InvalidArgument(_) | Error::ShapeMismatch { .. }), "{err}")
            }
        }
    }
    Ok(())
}

#[cfg(feature = "opencl")]
#[test]
fn a_pool_of_another_device_is_refused() -> Result<()> {
    use gpubuf::opencl::OpenClBackend;
    let Some(mine) = gpubuf_testkit::opencl() else { return Ok(()) };
    let other = OpenClBackend::new()?; // its own context
    let pool = MemoryPool::new(mine.clone());
    // `empty` enqueues nothing: only the pool can tell that the block is another device's.
    let r = pool.empty::<_, f32>(&other, &[16], Order::C);
    assert!(matches!(r, Err(Error::DeviceMismatch(_))), "{r:?}");
    let r = pool.zeros::<_, f32>(&other, &[16]);
    assert!(matches!(r, Err(Error::DeviceMismatch(_))), "{r:?}");
    assert_eq!(pool.active_blocks(), 0);
    let wrapped = MemoryPool::new(gpubuf::pool::ImmediateAllocator(mine.clone()));
    let r = wrapped.full::<_, f32>(&other, &[16], 1.0);
    assert!(matches!(r, Err(Error::DeviceMismatch(_))), "{r:?}");
    assert!(pool.full::<_, f32>(&mine, &[16], 2.0)?.all_equal(2.0)?);
    Ok(())
}
