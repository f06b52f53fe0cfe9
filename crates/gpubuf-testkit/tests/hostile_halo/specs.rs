//! Spec, exchange and partitioner constructors and queries with hostile values (proptest),
//! part of `hostile_halo`.

use super::base_specs;
use gpubuf::halo::{
    compile, receiving_boundary, rotate_boundary, Boundary, CubedSpherePartitioner, Dim, HaloDataTransformer,
    HaloExchangeSpec, Partitioner, QuantityHaloSpec, TilePartitioner,
};
use gpubuf::{DType, Error};
use proptest::prelude::*;
use std::ops::Range;

/// Above this many elements a spec is only compiled when it is hopeless (it must fail
/// fast); in between it would really be built, which a hostile test must not wait for.
pub(crate) const SMALL: usize = 1 << 16;
const HOPELESS: usize = 1 << 50;

const DIMS: [Dim; 6] = [Dim::X, Dim::XInterface, Dim::Y, Dim::YInterface, Dim::Z, Dim::ZInterface];

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => 0usize..8,
        1 => Just(usize::MAX),
        1 => Just(usize::MAX - 1),
        1 => Just(1usize << 62),
        1 => Just(1usize << 32),
        1 => Just(isize::MAX as usize),
        1 => Just(isize::MAX as usize + 1),
    ]
}

fn stride() -> impl Strategy<Value = isize> {
    prop_oneof![
        4 => 1isize..64,
        1 => Just(0isize),
        1 => Just(-1isize),
        1 => Just(isize::MAX),
        1 => Just(isize::MIN),
        1 => Just(1isize << 40),
    ]
}

fn rotation() -> impl Strategy<Value = i32> {
    prop_oneof![4 => -5i32..6, 1 => Just(i32::MIN), 1 => Just(i32::MAX), 1 => Just(i32::MIN + 1)]
}

fn dim() -> impl Strategy<Value = Dim> {
    prop::sample::select(DIMS.to_vec())
}

fn boundary() -> impl Strategy<Value = Boundary> {
    prop::sample::select(Boundary::ALL.to_vec())
}

fn range() -> impl Strategy<Value = Range<usize>> {
    (size(), size()).prop_map(|(a, b)| a..b)
}

fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(vec![DType::F64, DType::F32, DType::I32, DType::U8])
}

/// Compiles when that is cheap or must fail; checks the buffer length of a success.
fn try_compile(e: &HaloExchangeSpec) -> std::result::Result<(), TestCaseError> {
    let (Ok(p), Ok(u)) = (e.pack_size(), e.unpack_size()) else { return Ok(()) };
    if p.max(u) <= SMALL {
        if let Ok(c) = compile(std::slice::from_ref(e), None) {
            prop_assert_eq!(c.buffer_len(), p);
            prop_assert_eq!(p, u);
        }
    } else if p.min(u) >= HOPELESS {
        prop_assert!(compile(std::slice::from_ref(e), None).is_err(), "{} elements compiled", p);
    }
    Ok(())
}

/// Every query of a spec: results inside the array, sizes that are true products.
fn probe_spec(s: &QuantityHaloSpec, rot: i32) -> std::result::Result<(), TestCaseError> {
    let layout = s.layout();
    if let Ok(l) = &layout {
        prop_assert_eq!(l.shape(), s.shape.as_slice());
        let span = s.span();
        prop_assert!(span.is_ok(), "valid layout, span {:?}", span);
    }
    for b in Boundary::ALL {
        for interior in [true, false] {
            if let Ok(sl) = s.boundary_slices(b, interior) {
                prop_assert!(layout.is_ok());
                prop_assert_eq!(sl.len(), s.shape.len());
                for (r, &n) in sl.iter().zip(&s.shape) {
                    prop_assert!(
                        r.start <= r.end && r.end <= n,
                        "{:?} {} {:?} in {:?}",
                        b,
                        interior,
                        sl,
                        s.shape
                    );
                }
            }
        }
        if let Ok(e) = HaloExchangeSpec::for_boundary(s.clone(), b, rot) {
            prop_assert!(e.check().is_ok());
            let want: Option<usize> = e.pack_slices.iter().try_fold(1usize, |a, r| a.checked_mul(r.len()));
            prop_assert_eq!(e.pack_size().ok(), want);
            try_compile(&e)?;
        }
    }
    Ok(())
}

/// One hostile change to a spec or an exchange.
#[derive(Debug, Clone)]
pub(crate) enum Mutation {
    Shape(usize, usize),
    Stride(usize, isize),
    Origin(usize, usize),
    Extent(usize, usize),
    Dim(usize, Dim),
    NHalo(usize),
    DropAxis(usize),
    PackSlice(usize, Range<usize>),
    UnpackSlice(usize, Range<usize>),
}

pub(crate) fn mutation() -> impl Strategy<Value = Mutation> {
    let ax = 0usize..4;
    prop_oneof![
        (ax.clone(), size()).prop_map(|(a, v)| Mutation::Shape(a, v)),
        (ax.clone(), stride()).prop_map(|(a, v)| Mutation::Stride(a, v)),
        (ax.clone(), size()).prop_map(|(a, v)| Mutation::Origin(a, v)),
        (ax.clone(), size()).prop_map(|(a, v)| Mutation::Extent(a, v)),
        (ax.clone(), dim()).prop_map(|(a, v)| Mutation::Dim(a, v)),
        size().prop_map(Mutation::NHalo),
        ax.clone().prop_map(Mutation::DropAxis),
        (ax.clone(), range()).prop_map(|(a, r)| Mutation::PackSlice(a, r)),
        (ax, range()).prop_map(|(a, r)| Mutation::UnpackSlice(a, r)),
    ]
}

/// Sets entry `a` (modulo the length) of `v`, if it has any.
fn set<T>(v: &mut [T], a: usize, value: T) {
    let n = v.len().max(1);
    if let Some(x) = v.get_mut(a % n) {
        *x = value;
    }
}

pub(crate) fn apply(e: &mut HaloExchangeSpec, m: &Mutation) {
    let s = &mut e.specification;
    match m.clone() {
        Mutation::Shape(a, v) => set(&mut s.shape, a, v),
        Mutation::Stride(a, v) => set(&mut s.strides, a, v),
        Mutation::Origin(a, v) => set(&mut s.origin, a, v),
        Mutation::Extent(a, v) => set(&mut s.extent, a, v),
        Mutation::Dim(a, v) => set(&mut s.dims, a, v),
        Mutation::NHalo(v) => s.n_halo = v,
        Mutation::DropAxis(k) => {
            // One of the spec's parallel lists (or a slice list) loses its last entry.
            let _ = match k {
                0 => s.shape.pop().map(drop),
                1 => s.strides.pop().map(drop),
                2 => s.dims.pop().map(drop),
                _ => e.pack_slices.pop().map(drop),
            };
        }
        Mutation::PackSlice(a, r) => set(&mut e.pack_slices, a, r),
        Mutation::UnpackSlice(a, r) => set(&mut e.unpack_slices, a, r),
    }
}

/// A valid spec of 1 to 4 axes (small extents, halo 0 to 2) and one of its exchanges.
pub(crate) fn valid_exchange() -> impl Strategy<Value = HaloExchangeSpec> {
    (prop::collection::vec((dim(), 0usize..6), 1..5), 0usize..3, 0usize..2, dtype(), boundary(), rotation())
        .prop_filter_map("halo wider than the domain", |(axes, n_halo, pad, dtype, b, rot)| {
            let dims: Vec<Dim> = axes.iter().map(|a| a.0).collect();
            let extent: Vec<usize> = axes.iter().map(|a| a.1).collect();
            let s = QuantityHaloSpec::centered(&dims, &extent, n_halo, pad, dtype).ok()?;
            HaloExchangeSpec::for_boundary(s, b, rot).ok()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn centered_specs(
        n in 0usize..5,
        dims in prop::collection::vec(dim(), 4),
        extent in prop::collection::vec(prop_oneof![3 => 0usize..8, 1 => size()], 4),
        mismatch in prop::option::weighted(0.1, 0usize..4),
        n_halo in prop_oneof![3 => 0usize..4, 1 => size()],
        pad in prop_oneof![3 => 0usize..3, 1 => size()],
        dtype in dtype(),
        rot in rotation(),
    ) {
        let (dims, extent) = (&dims[..n], &extent[..mismatch.unwrap_or(n)]);
        match QuantityHaloSpec::centered(dims, extent, n_halo, pad, dtype) {
            Ok(s) => {
                for (ax, d) in dims.iter().enumerate() {
                    let o = if d.is_horizontal() { n_halo } else { 0 };
                    prop_assert_eq!(s.origin[ax], o);
                    prop_assert_eq!(Some(s.shape[ax]), extent[ax].checked_add(2 * o).and_then(|v| v.checked_add(pad)));
                    prop_assert!(s.strides[ax] > 0);
                    prop_assert!(!d.is_horizontal() || n_halo == 0 || n_halo + usize::from(d.is_interface()) <= extent[ax]);
                }
                prop_assert!(s.layout().is_ok());
                probe_spec(&s, rot)?;
            }
            Err(e) => prop_assert!(matches!(e, Error::ShapeMismatch { .. } | Error::InvalidArgument(_)), "{e:?}"),
        }
    }

    #[test]
    fn hand_built_specs(e in valid_exchange(), mutations in prop::collection::vec(mutation(), 0..4)) {
        let mut e = e;
        for m in &mutations {
            apply(&mut e, m);
        }
        probe_spec(&e.specification, e.pack_clockwise_rotation)?;
        let checked = e.check();
        if mutations.is_empty() {
            prop_assert!(checked.is_ok(), "{:?}", checked);
        }
        let _ = (e.pack_size(), e.unpack_size());
        if checked.is_ok() {
            try_compile(&e)?;
        } else {
            prop_assert!(compile(std::slice::from_ref(&e), None).is_err());
        }
    }

    #[test]
    fn partitioners(ny in size(), nx in size(), periodic in any::<bool>(), rank in size(), rot in rotation()) {
        for b in Boundary::ALL {
            let r = rotate_boundary(b, rot);
            prop_assert_eq!(rotate_boundary(r, (4 - rot.rem_euclid(4)) % 4), b);
            let _ = receiving_boundary(b, rot);
        }
        let tiles = TilePartitioner::new((ny, nx), periodic);
        let cube = CubedSpherePartitioner::new(nx);
        // Each partitioner, and whether every rank has a neighbour on every side.
        let mut parts: Vec<(Box<dyn Partitioner>, bool)> = Vec::new();
        match tiles {
            Ok(t) => {
                prop_assert_eq!(t.total_ranks(), ny * nx);
                let (j, i) = t.subtile_index(rank);
                prop_assert!(j < ny && i < nx);
                parts.push((Box::new(t), periodic));
            }
            Err(e) => prop_assert!(matches!(e, Error::InvalidArgument(_))),
        }
        match cube {
            Ok(c) => {
                prop_assert_eq!(c.total_ranks(), 6 * nx * nx);
                parts.push((Box::new(c), false));
            }
            Err(e) => prop_assert!(matches!(e, Error::InvalidArgument(_))),
        }
        for (p, linked) in &parts {
            let total = p.total_ranks();
            for r in [0, 1, rank, total - 1, total, usize::MAX] {
                for b in Boundary::ALL {
                    match p.neighbor(r, b) {
                        Some(n) => {
                            prop_assert!(r < total && n.rank < total && (0..4).contains(&n.rotation));
                            // The link back through the receiving boundary returns here.
                            let back = p.neighbor(n.rank, receiving_boundary(b, n.rotation));
                            prop_assert_eq!(back.map(|x| x.rank), Some(r));
                        }
                        None => prop_assert!(r >= total || !linked, "rank {} of {} has no {:?} neighbour", r, total, b),
                    }
                }
            }
        }
    }
}

/// Fixed worst cases: every field of a spec at its extreme at once.
#[test]
fn extreme_spec_fields() {
    let (spec, _) = base_specs().expect("base spec");
    let extremes: [(usize, isize, usize); 4] = [
        (usize::MAX, isize::MAX, usize::MAX),
        (usize::MAX, 1, 0),
        (1 << 62, 1 << 62, 1 << 62),
        (usize::MAX, isize::MIN, 1),
    ];
    for (n, stride, halo) in extremes {
        let mut s = spec.clone();
        s.shape = vec![n; 2];
        s.strides = vec![stride; 2];
        s.extent = vec![n; 2];
        s.origin = vec![0; 2];
        s.n_halo = halo;
        assert!(s.layout().is_err() && s.span().is_err(), "{n} {stride} {halo}");
        probe_spec(&s, i32::MIN).expect("no wrong result");
        for dtype in [DType::U8, DType::F64] {
            s.dtype = dtype;
            assert!(HaloDataTransformer::<_, f64>::new(
                &gpubuf::cpu::CpuBackend::new(),
                vec![HaloExchangeSpec {
                    specification: s.clone(),
                    pack_slices: vec![0..n, 0..n],
                    pack_clockwise_rotation: i32::MAX,
                    unpack_slices: vec![0..1, 0..1],
                }],
                None
            )
            .is_err());
        }
    }
}
