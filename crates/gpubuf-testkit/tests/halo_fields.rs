//! `HaloFields` on every backend: the halo update of several fields at once against a
//! host reference written independently (numpy's `np.pad(interior, mode="wrap")` over the
//! horizontal axes, index by index), its errors, and a partitioned tile whose ranks
//! exchange their messages in process.

use gpubuf::halo::{Dim, HaloField, HaloFields, QuantityHaloSpec, TilePartitioner};
use gpubuf::pool::MemoryPool;
use gpubuf::{DType, Element, Error, Kernels, NDBuffer, Result};
use gpubuf_testkit::backend_tests;
use ndarray::{ArrayD, IxDyn};

/// Element types the bodies run with: values built from small integers.
trait Val: Element + From<i16> + PartialEq + std::fmt::Debug {}
impl Val for f64 {}
impl Val for f32 {}
impl Val for i32 {}

/// A field's array filled with distinct values (`seed` keeps fields apart).
fn filled<T: Val>(s: &QuantityHaloSpec, seed: i16) -> ArrayD<T> {
    let mut k: i16 = seed;
    ArrayD::from_shape_fn(IxDyn(&s.shape), |_| {
        k = k.wrapping_add(1) % 30000;
        T::from(k)
    })
}

/// The periodic halo update computed on the host: every halo point of a horizontal axis
/// takes the interior point one extent away (both axes for a corner); pad points and
/// vertical axes are left alone. Centred dims only (their period is the extent).
fn wrap_reference<T: Copy>(a: &ArrayD<T>, s: &QuantityHaloSpec) -> ArrayD<T> {
    let mut out = a.clone();
    for (idx, v) in out.indexed_iter_mut() {
        let mut src: Vec<usize> = (0..s.shape.len()).map(|ax| idx[ax]).collect();
        let (mut halo, mut pad) = (false, false);
        for (ax, at) in src.iter_mut().enumerate() {
            let (i, o, e, n) = (*at, s.origin[ax], s.extent[ax], s.n_halo);
            if !s.dims[ax].is_horizontal() {
                pad |= i >= o + e;
            } else if i < o {
                *at = i + e;
                halo = true;
            } else if i >= o + e + n {
                pad = true;
            } else if i >= o + e {
                *at = i - e;
                halo = true;
            }
        }
        if halo && !pad {
            *v = a[IxDyn(&src)];
        }
    }
    out
}

/// Three scalar fields of different shapes, dims orders, halos and padding, and a vector.
fn fields(dtype: DType) -> Result<Vec<HaloField>> {
    let a = QuantityHaloSpec::centered(&[Dim::X, Dim::Y, Dim::Z], &[7, 5, 3], 2, 0, dtype)?;
    let b = QuantityHaloSpec::centered(&[Dim::Y, Dim::X], &[4, 6], 1, 0, dtype)?;
    let c = QuantityHaloSpec::centered(&[Dim::Z, Dim::Y, Dim::X], &[2, 5, 5], 3, 1, dtype)?;
    let v = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[6, 4], 2, 0, dtype)?;
    Ok(vec![
        HaloField::Scalar(a),
        HaloField::Scalar(b),
        HaloField::Vector { x: v.clone(), y: v },
        HaloField::Scalar(c),
    ])
}

/// The spec of each array, in call order.
fn specs(fields: &[HaloField]) -> Vec<QuantityHaloSpec> {
    fields
        .iter()
        .flat_map(|f| match f {
            HaloField::Scalar(s) => vec![s.clone()],
            HaloField::Vector { x, y } => vec![x.clone(), y.clone()],
        })
        .collect()
}

fn periodic_update_of<B: Kernels, T: Val>(b: &B) -> Result<()> {
    let fields = fields(T::DTYPE)?;
    let specs = specs(&fields);
    let host: Vec<ArrayD<T>> = specs.iter().enumerate().map(|(k, s)| filled(s, 1000 * k as i16)).collect();
    let mut arrays =
        host.iter().map(|h| NDBuffer::from_ndarray(b, h.view())).collect::<Result<Vec<NDBuffer<B, T>>>>()?;
    let pool = MemoryPool::new(b.clone());
    let mut halo = HaloFields::<B, T>::periodic_with_pool(b, &pool, fields)?;
    assert_eq!(halo.array_count(), 5);
    // Twice: the second step reuses the compiled transformers and changes nothing.
    for _ in 0..2 {
        halo.update(&mut arrays.iter_mut().collect::<Vec<_>>())?;
        for (k, (a, (h, s))) in arrays.iter().zip(host.iter().zip(&specs)).enumerate() {
            assert_eq!(a.to_ndarray()?, wrap_reference(h, s), "array {k} ({:?})", s.dims);
        }
    }
    halo.finalize()?;
    assert!(!halo.ready());
    let r = halo.update(&mut arrays.iter_mut().collect::<Vec<_>>());
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    drop(halo);
    b.synchronize(b.default_stream())?;
    assert_eq!(pool.stats().active_blocks, 0);
    Ok(())
}

/// f64, f32 and i32 fields (one `HaloFields` per element type).
fn periodic_fields_match_wrap<B: Kernels>(b: &B) -> Result<()> {
    periodic_update_of::<B, f64>(b)?;
    periodic_update_of::<B, f32>(b)?;
    periodic_update_of::<B, i32>(b)
}

fn periodic_fields_errors<B: Kernels>(b: &B) -> Result<()> {
    let fields = fields(DType::F64)?;
    let specs = specs(&fields);
    let host: Vec<ArrayD<f64>> = specs.iter().enumerate().map(|(k, s)| filled(s, 500 * k as i16)).collect();
    let mut arrays = host
        .iter()
        .map(|h| NDBuffer::from_ndarray(b, h.view()))
        .collect::<Result<Vec<NDBuffer<B, f64>>>>()?;
    let mut halo = HaloFields::<B, f64>::periodic(b, fields.clone())?;
    // One array short, one too many.
    let r = halo.update(&mut arrays.iter_mut().skip(1).collect::<Vec<_>>());
    assert!(matches!(r, Err(Error::LengthMismatch { expected: 5, got: 4, .. })), "{r:?}");
    let mut extra = NDBuffer::<B, f64>::zeros(b, &specs[0].shape)?;
    let mut more: Vec<&mut NDBuffer<B, f64>> = arrays.iter_mut().collect();
    more.push(&mut extra);
    let r = halo.update(&mut more);
    assert!(matches!(r, Err(Error::LengthMismatch { expected: 5, got: 6, .. })), "{r:?}");
    // Fields swapped: the shapes do not match.
    let mut swapped: Vec<&mut NDBuffer<B, f64>> = arrays.iter_mut().collect();
    swapped.swap(0, 1);
    let r = halo.update(&mut swapped);
    assert!(matches!(r, Err(Error::ShapeMismatch { .. })), "{r:?}");
    // A transposed view: the right shape only for a square array, so build one.
    let sq = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[4, 4], 1, 0, DType::F64)?;
    let mut sq_halo = HaloFields::<B, f64>::periodic(b, vec![HaloField::Scalar(sq.clone())])?;
    let base = NDBuffer::<B, f64>::zeros(b, &sq.shape)?;
    let mut t = base.transpose(None)?;
    let r = sq_halo.update(&mut [&mut t]);
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    // Wrong element type or no halo at build time.
    let r = HaloFields::<B, f32>::periodic(b, fields.clone());
    assert!(matches!(r, Err(Error::DTypeMismatch { .. })), "{r:?}");
    let flat = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[4, 4], 0, 0, DType::F64)?;
    let r = HaloFields::<B, f64>::periodic(b, vec![HaloField::Scalar(flat)]);
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    let r = HaloFields::<B, f64>::periodic(b, vec![HaloField::Vector { x: sq.clone(), y: specs[0].clone() }]);
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    assert!(matches!(HaloFields::<B, f64>::periodic(b, vec![]), Err(Error::InvalidArgument(_))));
    // Still usable after every error: the arrays were never touched.
    for (a, h) in arrays.iter().zip(&host) {
        assert_eq!(&a.to_ndarray()?, h);
    }
    halo.update(&mut arrays.iter_mut().collect::<Vec<_>>())?;
    for (a, (h, s)) in arrays.iter().zip(host.iter().zip(&specs)) {
        assert_eq!(a.to_ndarray()?, wrap_reference(h, s));
    }
    Ok(())
}

/// A periodic 2 x 2 tile of ranks in one process, messages carried as host bytes: every
/// rank's array ends up the global periodic field's, halos included.
fn partitioned_tile_matches_global_wrap<B: Kernels>(b: &B) -> Result<()> {
    let (nx, ny, n) = (5usize, 4usize, 2usize);
    let tile = TilePartitioner::new((2, 2), true)?;
    let local = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[nx, ny], n, 0, DType::F64)?;
    let global = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[2 * nx, 2 * ny], n, 0, DType::F64)?;
    let fields =
        vec![HaloField::Scalar(local.clone()), HaloField::Vector { x: local.clone(), y: local.clone() }];
    let g: Vec<ArrayD<f64>> = (0..3).map(|k| filled(&global, 3000 * k as i16)).collect();
    let want: Vec<ArrayD<f64>> = g.iter().map(|a| wrap_reference(a, &global)).collect();
    // Rank r = j * 2 + i holds global x in i*nx.., y in j*ny.. (its halo included).
    let piece = |a: &ArrayD<f64>, r: usize| {
        let (j, i) = (r / 2, r % 2);
        ArrayD::from_shape_fn(IxDyn(&local.shape), |ix| a[IxDyn(&[i * nx + ix[0], j * ny + ix[1]])])
    };
    let mut ranks = Vec::new();
    for r in 0..4 {
        let arrays =
            g.iter().map(|a| NDBuffer::from_ndarray(b, piece(a, r).view())).collect::<Result<Vec<_>>>()?;
        let pool = MemoryPool::new(b.clone());
        let mut h = match r % 2 {
            0 => HaloFields::<B, f64>::partitioned(b, fields.clone(), &tile, r)?,
            _ => HaloFields::<B, f64>::partitioned_with_pool(b, &pool, fields.clone(), &tile, r)?,
        };
        assert!(matches!(
            h.update(&mut [] as &mut [&mut NDBuffer<B, f64>]),
            Err(Error::LengthMismatch { .. })
        ));
        let r2 = h.update(&mut arrays.clone().iter_mut().collect::<Vec<_>>());
        assert!(matches!(r2, Err(Error::InvalidArgument(_))), "neighbours are other ranks: {r2:?}");
        ranks.push((h, arrays));
    }
    let mut mail = Vec::new();
    for (r, (h, arrays)) in ranks.iter_mut().enumerate() {
        for k in 0..h.links().len() {
            h.pack(k, &arrays.iter().collect::<Vec<_>>())?;
            mail.push((r, h.links()[k].rank, h.read_message(k)?));
        }
    }
    for (from, to, bytes) in mail {
        let (h, _) = &mut ranks[to];
        let k = h.links().iter().position(|l| l.rank == from).expect("a link back");
        assert!(matches!(h.receive_message(k, &bytes[1..]), Err(Error::LengthMismatch { .. })));
        h.receive_message(k, &bytes)?;
    }
    for (r, (h, arrays)) in ranks.iter_mut().enumerate() {
        for k in 0..h.links().len() {
            h.unpack(k, &mut arrays.iter_mut().collect::<Vec<_>>())?;
        }
        for (q, a) in arrays.iter().enumerate() {
            assert_eq!(a.to_ndarray()?, piece(&want[q], r), "rank {r} array {q}");
        }
    }
    Ok(())
}

/// A cubed sphere of one rank per face, a scalar and a vector: every message finds a
/// receive of its length, every edge halo is filled (each edge crossing rotates, and the
/// values come from the neighbour's interior: the neighbour's rank, and for a vector the
/// component a quarter turn swaps in), and the halo corners,
/// all tile corners here, keep their values (no neighbour there, as in NDSL).
fn cube_fills_edges_and_leaves_tile_corners<B: Kernels>(b: &B) -> Result<()> {
    use gpubuf::halo::CubedSpherePartitioner;
    let (e, n) = (4usize, 2usize);
    let cube = CubedSpherePartitioner::new(1)?;
    let q = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[e, e], n, 0, DType::F64)?;
    let fields = vec![HaloField::Scalar(q.clone()), HaloField::Vector { x: q.clone(), y: q.clone() }];
    let start = |r: usize, k: usize| {
        ArrayD::from_shape_fn(IxDyn(&q.shape), |ix| {
            let inside = (n..n + e).contains(&ix[0]) && (n..n + e).contains(&ix[1]);
            if inside {
                (1 + r * 1000 + k * 100 + ix[0] * e + ix[1]) as f64
            } else {
                -1.0
            }
        })
    };
    let mut ranks = Vec::new();
    for r in 0..6 {
        let arrays =
            (0..3).map(|k| NDBuffer::from_ndarray(b, start(r, k).view())).collect::<Result<Vec<_>>>()?;
        let h = HaloFields::<B, f64>::partitioned(b, fields.clone(), &cube, r)?;
        assert_eq!(h.links().len(), 4, "four edge neighbours, no corner ones");
        ranks.push((h, arrays));
    }
    let mut mail = Vec::new();
    for (r, (h, arrays)) in ranks.iter_mut().enumerate() {
        for k in 0..4 {
            h.pack(k, &arrays.iter().collect::<Vec<_>>())?;
            mail.push((r, h.links()[k].rank, h.read_message(k)?));
        }
    }
    for (from, to, bytes) in mail {
        let h = &mut ranks[to].0;
        let k = h.links().iter().position(|l| l.rank == from).expect("a link back");
        h.receive_message(k, &bytes)?;
    }
    for (r, (h, arrays)) in ranks.iter_mut().enumerate() {
        for k in 0..4 {
            h.unpack(k, &mut arrays.iter_mut().collect::<Vec<_>>())?;
        }
        for (k, a) in arrays.iter().enumerate() {
            let (got, before) = (a.to_ndarray()?, start(r, k));
            for (ix, &v) in got.indexed_iter() {
                let halo = [ix[0], ix[1]].map(|i| !(n..n + e).contains(&i));
                match halo {
                    [true, true] => assert_eq!(v, -1.0, "rank {r} array {k} corner {ix:?}"),
                    [false, false] => assert_eq!(v, before[&ix], "rank {r} array {k} interior {ix:?}"),
                    _ => {
                        use gpubuf::halo::{Boundary, Partitioner};
                        let side = match (ix[0] < n, ix[0] >= n + e, ix[1] < n) {
                            (true, _, _) => Boundary::West,
                            (_, true, _) => Boundary::East,
                            (_, _, true) => Boundary::South,
                            _ => Boundary::North,
                        };
                        let nb = cube.neighbor(r, side).expect("an edge neighbour");
                        // A quarter turn swaps a vector's components (NDSL's rule).
                        let comp = if k > 0 && nb.rotation % 2 == 1 { 3 - k } else { k };
                        let src = v.abs() as usize - 1;
                        assert!(v != -1.0, "rank {r} array {k} edge {ix:?} not filled");
                        assert_eq!(
                            (src / 1000, src / 100 % 10),
                            (nb.rank, comp),
                            "rank {r} array {k} {side:?} {ix:?}: {v}"
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

backend_tests!(
    periodic_fields_match_wrap,
    periodic_fields_errors,
    partitioned_tile_matches_global_wrap,
    cube_fills_edges_and_leaves_tile_corners
);

/// An array of another device (a second CPU backend: another device) is refused.
#[test]
fn arrays_of_another_device_are_refused() -> Result<()> {
    use gpubuf::cpu::CpuBackend;
    let (mine, other) = (CpuBackend::new(), CpuBackend::new());
    let q = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[4, 4], 1, 0, DType::F64)?;
    let mut halo = HaloFields::<_, f64>::periodic(&mine, vec![HaloField::Scalar(q.clone()); 2])?;
    let mut a = NDBuffer::<_, f64>::zeros(&mine, &q.shape)?;
    let mut foreign = NDBuffer::<_, f64>::zeros(&other, &q.shape)?;
    let r = halo.update(&mut [&mut a, &mut foreign]);
    assert!(matches!(r, Err(Error::DeviceMismatch(_))), "{r:?}");
    let mut b = NDBuffer::<_, f64>::zeros(&mine, &q.shape)?;
    halo.update(&mut [&mut a, &mut b])
}
