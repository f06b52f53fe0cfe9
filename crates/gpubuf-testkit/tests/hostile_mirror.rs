//! Hostile input for the mirror, on every backend: extreme values for every constructor and
//! operation give typed errors (never a panic), a failed operation changes nothing, and the
//! mirror stays usable.

use gpubuf::mirror::{DirtyPolicy, Mirror, RangeSet, View};
use gpubuf::{Error, Kernels, Result};
use gpubuf_testkit::backend_tests;
use ndarray::{Array2, ArrayD, IxDyn};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::ops::Range;

const SHAPE: [usize; 2] = [4, 6];
const N: usize = 24;

/// Everything observable about a mirror.
type State = (ArrayD<i32>, ArrayD<i32>, Vec<Range<usize>>, Vec<Range<usize>>);

fn state<B: Kernels>(m: &Mirror<B, i32>) -> Result<State> {
    Ok((m.host().to_owned(), m.device_to_host()?, m.pending(), m.device_pending()))
}

fn policy() -> impl Strategy<Value = DirtyPolicy> {
    prop_oneof![
        Just(DirtyPolicy::exact()),
        Just(DirtyPolicy::hull()),
        (0usize..64, 0usize..4).prop_map(|(gap, max_ranges)| DirtyPolicy { gap, max_ranges }),
        Just(DirtyPolicy { gap: usize::MAX, max_ranges: 0 }),
        Just(DirtyPolicy { gap: 0, max_ranges: usize::MAX }),
    ]
}

const HUGE: [usize; 6] = [usize::MAX, usize::MAX - 1, 1 << 62, 1 << 32, 24, 6];

/// Views that belong to no [4, 6] array, or reach outside it.
fn foreign_views() -> Vec<View> {
    let mut v = vec![
        View::full(&[usize::MAX, 2]),
        View::full(&[1 << 62]),
        View::full(&[6, 4]),
        View::full(&[24]),
        View::full(&[]),
        View::full(&[0]),
        View::full(&[4, 6, 1]),
        View::full(&[2, 12]),
        View::full(&[0, usize::MAX]),
    ];
    if let Ok(x) = View::full(&[8, 8]).slice(&[0..4, 0..6]) {
        v.push(x);
    }
    v
}

/// Every mutation, `view` and `mark_device_dirty` with extreme or foreign arguments: a typed
/// error, nothing changed, and the next valid operation works.
fn hostile_mirror_arguments<B: Kernels>(b: &B) -> Result<()> {
    let init = Array2::from_shape_fn((4, 6), |(i, j)| (i * 6 + j) as i32).into_dyn();
    for policy in [DirtyPolicy::exact(), DirtyPolicy::hull(), DirtyPolicy { gap: usize::MAX, max_ranges: 0 }]
    {
        let mut m = Mirror::new(b, init.view(), policy, None)?;
        m.set(&[1, 1], -1)?; // something pending
        m.mark_device_dirty(&m.view(&[3..4, 5..6])?)?; // something device-dirty
        let before = state(&m)?;
        let mut fails: Vec<(String, Result<()>)> = Vec::new();
        for &x in &HUGE {
            for idx in [vec![x, 0], vec![0, x], vec![x, x], vec![x], vec![0, 0, x], vec![]] {
                if idx.len() == 2 && idx[0] < 4 && idx[1] < 6 {
                    continue;
                }
                fails.push((format!("set {idx:?}"), m.set(&idx, 1)));
            }
            for r in [x..x, 0..x, x..0, x.saturating_sub(1)..x] {
                if r.end <= 4 && r.start <= r.end {
                    continue;
                }
                fails.push((format!("view {r:?}"), m.view(&[r.clone(), 0..6]).map(drop)));
                fails.push((format!("view {r:?}"), m.view(&[0..4, r.clone(), 0..1]).map(drop)));
            }
            let v = m.full();
            fails.push((format!("flip {x}"), v.flip(x).map(drop)));
            fails.push((format!("permute {x}"), v.permute(&[x, 0]).map(drop)));
            fails.push(("permute dup".into(), v.permute(&[1, 1]).map(drop)));
        }
        for v in foreign_views() {
            let name = format!("{:?}", v.base_shape());
            fails.push((format!("fill {name}"), m.fill(&v, 7)));
            fails.push((format!("add {name}"), m.add_assign(&v, 7)));
            fails.push((format!("sub {name}"), m.sub_assign(&v, 7)));
            fails.push((format!("mul {name}"), m.mul_assign(&v, 7)));
            fails.push((format!("div {name}"), m.div_assign(&v, 7)));
            fails.push((format!("write {name}"), m.write(&v, |_| panic!("must not run"))));
            fails.push((format!("mark {name}"), m.mark_device_dirty(&v)));
            let src = ArrayD::<i32>::zeros(IxDyn(&v.shape().iter().map(|&n| n.min(8)).collect::<Vec<_>>()));
            fails.push((format!("copy_from {name}"), m.copy_from(&v, src.view())));
        }
        let part = m.view(&[0..2, 0..3])?;
        for shape in [vec![3, 2], vec![6], vec![2, 3, 1], vec![0, 3], vec![]] {
            let src = ArrayD::<i32>::zeros(IxDyn(&shape));
            fails.push((format!("copy_from shape {shape:?}"), m.copy_from(&part, src.view())));
        }
        fails.push(("div by zero".into(), m.div_assign(&part, 0)));
        for (what, r) in &fails {
            assert!(r.is_err(), "{what} must fail");
        }
        assert_eq!(state(&m)?, before, "failed operations change nothing");
        // Still usable: a write, a sync, a download.
        m.set(&[2, 2], 42)?;
        m.sync()?;
        m.download()?;
        assert_eq!((m.host()[[2, 2]], m.device().get(&[2, 2])?), (42, 42));
        assert_eq!(m.host(), m.device_to_host()?);
    }
    Ok(())
}

/// `View` on its own: huge base shapes and item sizes give errors, never overflow or abort.
fn hostile_views<B: Kernels>(_b: &B) -> Result<()> {
    for &itemsize in &[0usize, 1, 8, 1 << 62, usize::MAX] {
        for base in [vec![usize::MAX, 2], vec![1 << 62], vec![1 << 31, 1 << 31], vec![0, usize::MAX], vec![]]
        {
            let v = View::full(&base);
            let _ = (v.shape(), v.t(), v.flip(0), v.permute(&[0]));
            let _ = (v.layout(), v.extent(itemsize));
            let size = base.iter().try_fold(1usize, |a, &n| a.checked_mul(n));
            if size.is_some_and(|n| n <= 1 << 24) {
                let _ = v.byte_runs(itemsize);
            }
        }
    }
    // Contiguous huge views: one run when it fits, an overflow error when it does not.
    let big = View::full(&[1 << 62]);
    assert_eq!(big.byte_runs(1)?, vec![0..1 << 62]);
    assert_eq!(big.extent(1)?, Some(0..1 << 62));
    assert!(big.byte_runs(4).is_err() && big.extent(4).is_err());
    assert!(View::full(&[usize::MAX, 2]).byte_runs(1).is_err());
    // A strided view of a huge base: too many runs to list is OutOfMemory, not an abort.
    let column = View::full(&[1 << 58, 2]).slice(&[0..1 << 58, 0..1])?;
    assert!(matches!(column.byte_runs(1), Err(Error::OutOfMemory { .. })));
    let flipped = column.flip(0)?.t();
    assert!(matches!(flipped.byte_runs(1), Err(Error::OutOfMemory { .. })));
    assert_eq!(flipped.extent(1)?, Some(0..(1 << 59) - 1));
    // Empty views of empty bases with huge axes.
    let empty = View::full(&[0, 1 << 40, 4]).slice(&[0..0, (1 << 40) - 1..1 << 40, 0..4])?;
    assert_eq!((empty.byte_runs(8)?, empty.extent(8)?), (vec![], None));
    let emptier = View::full(&[0, 1 << 62, 4]).slice(&[0..0, (1 << 62) - 1..1 << 62, 0..4])?;
    let _ = (emptier.byte_runs(8), emptier.extent(8)); // empty, or too big for core's layouts
                                                       // Reversed and extreme ranges in a RangeSet change nothing and never overflow.
    let mut s = RangeSet::default();
    let p = DirtyPolicy::hull();
    s.insert(usize::MAX - 1..usize::MAX, p);
    s.insert(0..1, DirtyPolicy { gap: usize::MAX, max_ranges: 0 });
    assert_eq!(s.ranges(), vec![0..usize::MAX]);
    #[allow(clippy::reversed_empty_ranges)]
    {
        s.insert(usize::MAX..0, p);
        s.remove(usize::MAX..0);
    }
    assert_eq!(s.bytes(), usize::MAX);
    s.remove(1..usize::MAX);
    assert_eq!((s.overlap(0..usize::MAX), s.len()), (Some(0..1), 1));
    Ok(())
}

/// Empty and 0-d arrays, and extreme policies, behave like any other.
fn empty_and_scalar_mirrors<B: Kernels>(b: &B) -> Result<()> {
    for shape in [vec![0], vec![3, 0], vec![0, 0, 5]] {
        let mut m = Mirror::new(b, ArrayD::<f64>::zeros(IxDyn(&shape)).view(), DirtyPolicy::hull(), None)?;
        m.fill(&m.full(), 1.0)?;
        m.mark_device_dirty(&m.full())?;
        assert!(!m.is_dirty());
        assert_eq!(m.sync()?.bytes, 0);
        assert_eq!(m.download()?.bytes, 0);
        assert_eq!(m.upload_all()?.bytes, 0);
        assert!(m.set(&vec![0; shape.len()], 1.0).is_err());
    }
    let mut s = Mirror::new(b, ArrayD::<f64>::zeros(IxDyn(&[])).view(), DirtyPolicy::exact(), None)?;
    s.set(&[], 2.5)?;
    assert!(s.set(&[0], 1.0).is_err());
    assert_eq!(s.pending(), vec![0..8]);
    s.sync()?;
    s.device().fill(4.0)?;
    s.mark_device_dirty(&s.full())?;
    assert!(s.add_assign(&s.full(), 1.0).is_err());
    s.download()?;
    s.add_assign(&s.full(), 1.0)?;
    s.sync()?;
    assert_eq!((s.host()[[]], s.device().as_scalar()?), (5.0, 5.0));
    Ok(())
}

/// A number that is often extreme.
fn num() -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => 0usize..8,
        1 => Just(usize::MAX),
        1 => Just(usize::MAX - 1),
        1 => Just(1usize << 62),
        1 => Just(1usize << 32),
    ]
}

#[derive(Debug, Clone)]
enum Hostile {
    Set(Vec<usize>),
    Fill(Vec<(usize, usize)>),
    Div(Vec<(usize, usize)>, i32),
    Copy(Vec<(usize, usize)>, Vec<usize>),
    Mark(Vec<(usize, usize)>),
    Foreign(Vec<usize>),
    Flip(usize),
    Permute(Vec<usize>),
    Sync,
    Download,
}

fn hostile() -> impl Strategy<Value = Hostile> {
    let ranges = || prop::collection::vec((num(), num()), 0..4);
    prop_oneof![
        prop::collection::vec(num(), 0..4).prop_map(Hostile::Set),
        ranges().prop_map(Hostile::Fill),
        (ranges(), prop_oneof![Just(0), Just(1), Just(-1), Just(3), Just(i32::MIN)])
            .prop_map(|(r, d)| Hostile::Div(r, d)),
        (ranges(), prop::collection::vec(num(), 0..4)).prop_map(|(r, s)| Hostile::Copy(r, s)),
        ranges().prop_map(Hostile::Mark),
        prop::collection::vec(num(), 0..4).prop_map(Hostile::Foreign),
        num().prop_map(Hostile::Flip),
        prop::collection::vec(num(), 0..4).prop_map(Hostile::Permute),
        Just(Hostile::Sync),
        Just(Hostile::Download),
    ]
}

/// Base elements of a [4, 6] sub-view, or `None` when the ranges are not valid for it.
fn covered(r: &[(usize, usize)]) -> Option<Vec<usize>> {
    let ok = r.len() == 2 && r[0].0 <= r[0].1 && r[0].1 <= 4 && r[1].0 <= r[1].1 && r[1].1 <= 6;
    ok.then(|| (r[0].0..r[0].1).flat_map(|i| (r[1].0..r[1].1).map(move |j| i * 6 + j)).collect())
}

/// proptest: random operations with arguments that are often extreme (`usize::MAX`,
/// 2^62, wrong lengths, foreign shapes, division by 0): each is refused with a typed error
/// and changes nothing exactly when an independent check says it is invalid, otherwise it
/// does what a model says; after every step the host and device match the model.
fn hostile_ops_match_a_model<B: Kernels>(b: &B) -> Result<()> {
    // Found by the random runs: a host write not yet uploaded, the same bytes marked as
    // written by the device, a download. The device's bytes win (the model kept the
    // host's until it tracked the device's values).
    let found = DirtyPolicy { gap: 0, max_ranges: 4096 };
    let steps = [Hostile::Set(vec![0, 0]), Hostile::Mark(vec![(0, 1), (0, 1)]), Hostile::Download];
    ops_match_the_model(b, found, &steps).map_err(|e| Error::invalid(e.to_string()))?;
    let ops = prop::collection::vec(hostile(), 1..32);
    TestRunner::new(Config { cases: 96, failure_persistence: None, ..Config::default() })
        .run(&(policy(), ops), |(p, ops)| ops_match_the_model(b, p, &ops))
        .map_err(|e| Error::invalid(e.to_string()))
}

/// Runs `ops` on a new mirror and on the model (the host's values, the device's, and the
/// elements marked as written by the device), comparing both after every step.
fn ops_match_the_model<B: Kernels>(
    b: &B,
    policy: DirtyPolicy,
    ops: &[Hostile],
) -> std::result::Result<(), TestCaseError> {
    let f = |e: Error| TestCaseError::fail(e.to_string());
    let init = ArrayD::from_shape_fn(IxDyn(&SHAPE), |i| (i[0] * 6 + i[1]) as i32);
    let mut m = Mirror::new(b, init.view(), policy, None).map_err(f)?;
    let mut host: Vec<i32> = init.iter().copied().collect();
    // The device's values: each synced element's host value, the rest as made.
    let mut device = host.clone();
    let mut dirty = [false; N];
    for (k, op) in ops.iter().enumerate() {
        let before = state(&m).map_err(f)?;
        let ranges = |r: &[(usize, usize)]| r.iter().map(|&(a, b)| a..b).collect::<Vec<_>>();
        let (valid, r): (bool, Result<()>) = match op {
            Hostile::Set(i) => {
                let cover = (i.len() == 2 && i[0] < 4 && i[1] < 6).then(|| vec![i[0] * 6 + i[1]]);
                let ok = cover.as_ref().is_some_and(|c| !dirty[c[0]]);
                let r = m.set(i, -1);
                if ok {
                    host[i[0] * 6 + i[1]] = -1;
                }
                (ok, r)
            }
            Hostile::Fill(rs) | Hostile::Div(rs, _) | Hostile::Copy(rs, _) => {
                let cover = covered(rs);
                let view = m.view(&ranges(rs));
                prop_assert_eq!(view.is_ok(), cover.is_some());
                let Ok(v) = view else { continue };
                let cover = cover.unwrap_or_default();
                let free = cover.iter().all(|&i| !dirty[i]);
                let (ok, r) = match op {
                    Hostile::Fill(_) => (free, m.fill(&v, 5)),
                    Hostile::Div(_, d) => (free && *d != 0, m.div_assign(&v, *d)),
                    Hostile::Copy(_, shape) => {
                        let size = shape.iter().try_fold(1usize, |a, &n| a.checked_mul(n));
                        // ndarray also refuses a shape whose non-zero axes multiply
                        // past isize::MAX, even when another axis is 0.
                        let nonzero =
                            shape.iter().filter(|&&n| n > 0).try_fold(1usize, |a, &n| a.checked_mul(n));
                        if size.is_none_or(|n| n > 64) || nonzero.is_none_or(|n| n > isize::MAX as usize) {
                            continue; // a source that large cannot be built
                        }
                        let src = ArrayD::<i32>::from_elem(IxDyn(shape), 9);
                        (free && shape == &v.shape(), m.copy_from(&v, src.view()))
                    }
                    _ => (false, Ok(())),
                };
                if ok {
                    for &i in &cover {
                        host[i] = match op {
                            Hostile::Fill(_) => 5,
                            Hostile::Div(_, d) => host[i].wrapping_div(*d),
                            _ => 9,
                        };
                    }
                }
                (ok, r)
            }
            Hostile::Mark(rs) => match (covered(rs), m.view(&ranges(rs))) {
                (Some(cover), Ok(v)) => {
                    cover.iter().for_each(|&i| dirty[i] = true);
                    (true, m.mark_device_dirty(&v))
                }
                (None, Err(_)) => continue,
                _ => return Err(TestCaseError::fail("view validity differs from the model")),
            },
            Hostile::Foreign(shape) if shape == &SHAPE => continue,
            Hostile::Foreign(shape) => (false, m.fill(&View::full(shape), 0)),
            Hostile::Flip(a) => (*a < 2, m.full().flip(*a).map(drop)),
            Hostile::Permute(p) => {
                let ok = p.len() == 2 && p.contains(&0) && p.contains(&1);
                (ok, m.full().permute(p).map(drop))
            }
            Hostile::Sync => {
                // Every element the device did not write holds the host's value.
                (0..N).filter(|&i| !dirty[i]).for_each(|i| device[i] = host[i]);
                (true, m.sync().map(drop))
            }
            Hostile::Download => {
                // The device's bytes win over host writes not uploaded yet.
                (0..N).filter(|&i| dirty[i]).for_each(|i| host[i] = device[i]);
                dirty = [false; N];
                (true, m.download().map(drop))
            }
        };
        if valid {
            prop_assert!(r.is_ok(), "op {} {:?}: {:?}", k, op, r);
        } else {
            prop_assert!(r.is_err(), "op {} {:?} must fail", k, op);
            prop_assert_eq!(state(&m).map_err(f)?, before, "op {} {:?} changed something", k, op);
        }
        let got: Vec<i32> = m.host().iter().copied().collect();
        prop_assert_eq!(&got, &host, "host after op {} {:?}", k, op);
        let on_device: Vec<i32> = m.device_to_host().map_err(f)?.iter().copied().collect();
        prop_assert_eq!(&on_device, &device, "device after op {} {:?}", k, op);
    }
    // Still usable, and coherent once both directions ran.
    m.download().map_err(f)?;
    m.set(&[3, 5], 77).map_err(f)?;
    m.sync().map_err(f)?;
    prop_assert_eq!(m.device().get(&[3, 5]).map_err(f)?, 77);
    prop_assert_eq!(m.host().to_owned(), m.device_to_host().map_err(f)?);
    Ok(())
}

backend_tests!(hostile_mirror_arguments, hostile_ops_match_a_model, hostile_views, empty_and_scalar_mirrors);
