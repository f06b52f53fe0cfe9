//! The mirror on every backend.

use gpubuf::mirror::{DirtyPolicy, Mirror, View};
use gpubuf::{Error, Kernels, Result};
use gpubuf_testkit::backend_tests;

mod faulty;
use ndarray::{Array1, Array2, ArrayD, IxDyn};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// glumpy's own examples in hull mode give glumpy's pending_data.
fn hull_matches_glumpy<B: Kernels>(b: &B) -> Result<()> {
    let mut m = Mirror::new(b, Array1::<f32>::zeros(16).into_dyn().view(), DirtyPolicy::hull(), None)?;
    let d = m.view(&[5..8])?;
    m.fill(&d, 3.0)?;
    assert_eq!(m.pending(), vec![20..32]);
    assert_eq!(d.extent(4)?, Some(20..32));
    let mut z = Mirror::new(b, Array2::<f32>::zeros((4, 4)).into_dyn().view(), DirtyPolicy::hull(), None)?;
    let col = z.view(&[0..4, 1..2])?;
    z.fill(&col, 1.0)?;
    assert_eq!(z.pending(), vec![4..56]);
    // The same column with exact ranges: four 4-byte runs, 16 bytes instead of 52.
    let mut e = Mirror::new(b, Array2::<f32>::zeros((4, 4)).into_dyn().view(), DirtyPolicy::exact(), None)?;
    e.fill(&col, 1.0)?;
    assert_eq!(e.pending(), vec![4..8, 20..24, 36..40, 52..56]);
    let t = e.sync()?;
    assert_eq!((t.bytes, t.commands), (16, 4));
    assert!(!e.is_dirty());
    assert_eq!(e.device_to_host()?, e.host().to_owned());
    Ok(())
}

#[derive(Debug, Clone)]
enum Mutation {
    Set,
    Fill(i32),
    Copy,
    Add(i32),
    Sub(i32),
    Mul(i32),
    Div(i32),
    Closure,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        Just(Mutation::Set),
        (-50i32..50).prop_map(Mutation::Fill),
        Just(Mutation::Copy),
        (-5i32..5).prop_map(Mutation::Add),
        (-5i32..5).prop_map(Mutation::Sub),
        (-3i32..3).prop_map(Mutation::Mul),
        (1i32..4).prop_map(Mutation::Div),
        Just(Mutation::Closure),
    ]
}

/// A random view of a [4, 5, 6] array: ranges, flips, an axis order.
fn view_spec() -> impl Strategy<Value = Spec> {
    (prop::collection::vec((0usize..6, 0usize..6), 3), prop::collection::vec(any::<bool>(), 3), 0u8..6)
}

type Spec = (Vec<(usize, usize)>, Vec<bool>, u8);

const PERMS: [[usize; 3]; 6] = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];

fn spec_ranges(spec: &Spec, shape: &[usize]) -> Vec<std::ops::Range<usize>> {
    spec.0
        .iter()
        .zip(shape)
        .map(|(&(a, b), &n)| {
            let (lo, hi) = (a.min(b).min(n - 1), a.max(b).min(n));
            lo..hi.max(lo + 1)
        })
        .collect()
}

/// The mirror's view for a spec.
fn make_view(full: &View, spec: &Spec) -> Result<View> {
    let mut v = full.slice(&spec_ranges(spec, &full.shape()))?;
    for (k, &f) in spec.1.iter().enumerate() {
        if f {
            v = v.flip(k)?;
        }
    }
    v.permute(&PERMS[usize::from(spec.2) % 6])
}

/// The base element indices a spec covers, in view order, computed with ndarray's own
/// slicing on an index array (independently of the mirror's layout code).
fn covered(spec: &Spec, shape: &[usize]) -> Vec<usize> {
    let idx = ArrayD::from_shape_vec(IxDyn(shape), (0..shape.iter().product::<usize>()).collect())
        .unwrap_or_else(|e| panic!("{e}"));
    let mut v = idx.view();
    for (ax, r) in spec_ranges(spec, shape).into_iter().enumerate() {
        v.slice_axis_inplace(ndarray::Axis(ax), ndarray::Slice::from(r));
        if spec.1[ax] {
            v.invert_axis(ndarray::Axis(ax));
        }
    }
    v.permuted_axes(PERMS[usize::from(spec.2) % 6].to_vec()).iter().copied().collect()
}

/// proptest: random writes through random views and every mutation path; after sync the
/// device equals the host and, with gap 0, exactly the written bytes were uploaded.
fn random_writes_sync_exactly<B: Kernels>(b: &B) -> Result<()> {
    let shape = [4usize, 5, 6];
    let ops = prop::collection::vec((view_spec(), mutation()), 1..12);
    TestRunner::new(Config { cases: 48, failure_persistence: None, ..Config::default() })
        .run(&(ops, any::<bool>()), |(ops, hull)| {
            let f = |e: Error| TestCaseError::fail(e.to_string());
            let init = ArrayD::from_shape_fn(IxDyn(&shape), |i| (i[0] * 100 + i[1] * 10 + i[2]) as i32);
            let policy = if hull { DirtyPolicy::hull() } else { DirtyPolicy::exact() };
            let mut m = Mirror::new(b, init.view(), policy, None).map_err(f)?;
            let mut written = vec![false; init.len()];
            let mut model: Vec<i32> = init.iter().copied().collect();
            for (spec, op) in &ops {
                let v = make_view(&m.full(), spec).map_err(f)?;
                let cover = covered(spec, &shape);
                prop_assert_eq!(cover.len(), v.shape().iter().product::<usize>());
                if !matches!(op, Mutation::Set) {
                    for &i in &cover {
                        written[i] = true;
                    }
                }
                let vshape = v.shape();
                let src =
                    ArrayD::from_shape_fn(IxDyn(&vshape), |i| (0..3).map(|k| i[k]).sum::<usize>() as i32);
                for (k, &i) in cover.iter().enumerate() {
                    let x = model[i];
                    model[i] = match op {
                        Mutation::Set if k == 0 => -7,
                        Mutation::Set => x,
                        Mutation::Fill(y) => *y,
                        Mutation::Copy => src.iter().nth(k).copied().unwrap_or(0),
                        Mutation::Add(y) => x.wrapping_add(*y),
                        Mutation::Sub(y) => x.wrapping_sub(*y),
                        Mutation::Mul(y) => x.wrapping_mul(*y),
                        Mutation::Div(y) => x / *y,
                        Mutation::Closure => x ^ 0x55,
                    };
                }
                match op {
                    Mutation::Set => {
                        // `set` takes an index of the whole array: the view's first element.
                        let first = cover[0];
                        written[first] = true;
                        m.set(&[first / 30, (first / 6) % 5, first % 6], -7).map_err(f)?;
                    }
                    Mutation::Fill(x) => m.fill(&v, *x).map_err(f)?,
                    Mutation::Copy => m.copy_from(&v, src.view()).map_err(f)?,
                    Mutation::Add(x) => m.add_assign(&v, *x).map_err(f)?,
                    Mutation::Sub(x) => m.sub_assign(&v, *x).map_err(f)?,
                    Mutation::Mul(x) => m.mul_assign(&v, *x).map_err(f)?,
                    Mutation::Div(x) => m.div_assign(&v, *x).map_err(f)?,
                    Mutation::Closure => m.write(&v, |mut a| a.mapv_inplace(|x| x ^ 0x55)).map_err(f)?,
                }
            }
            // The host array holds exactly what the same writes do to a plain model.
            prop_assert_eq!(m.host().iter().copied().collect::<Vec<i32>>(), model);
            let t = m.sync().map_err(f)?;
            prop_assert_eq!(m.device_to_host().map_err(f)?, m.host().to_owned());
            prop_assert!(!m.is_dirty());
            if !hull {
                let mut uploaded = vec![false; init.len()];
                for r in &t.ranges {
                    uploaded[r.start / 4..r.end / 4].fill(true);
                }
                prop_assert_eq!(uploaded, written, "gap 0 uploads exactly the written bytes");
            }
            Ok(())
        })
        .map_err(|e| Error::invalid(e.to_string()))
}

/// Past 16 ranges the upload is one staging copy plus one scatter launch.
fn many_ranges_use_one_plan<B: Kernels>(b: &B) -> Result<()> {
    let mut m = Mirror::new(b, Array1::<f64>::zeros(1000).into_dyn().view(), DirtyPolicy::exact(), None)?;
    for i in 0..40 {
        m.set(&[i * 23], i as f64 + 0.5)?;
    }
    assert_eq!(m.pending().len(), 40);
    let t = m.sync()?;
    assert_eq!((t.commands, t.bytes), (2, 320));
    assert_eq!(m.device_to_host()?, m.host().to_owned());
    Ok(())
}

/// Device-side changes come back with download, and only those bytes.
fn device_dirty_and_download<B: Kernels>(b: &B) -> Result<()> {
    let mut m = Mirror::new(b, Array2::<i32>::zeros((3, 4)).into_dyn().view(), DirtyPolicy::exact(), None)?;
    let row = m.view(&[1..2, 0..4])?;
    m.device().slice(&[1..2, 0..4])?.fill(9)?; // "device work"
    m.device().set(&[2, 3], 5)?; // not marked: must not come back
    m.mark_device_dirty(&row)?;
    assert_eq!(m.device_pending(), vec![16..32]);
    let t = m.download()?;
    assert_eq!(t.bytes, 16);
    assert_eq!(m.host()[[1, 2]], 9);
    assert_eq!(m.host()[[2, 3]], 0);
    assert!(m.device_pending().is_empty());
    Ok(())
}

/// Mistakes are typed errors.
fn mirror_errors<B: Kernels>(b: &B) -> Result<()> {
    let mut m = Mirror::new(b, Array2::<i32>::zeros((3, 4)).into_dyn().view(), DirtyPolicy::exact(), None)?;
    assert!(matches!(m.view(&[0..4, 0..1]), Err(Error::OutOfBounds { .. })));
    assert!(matches!(m.set(&[3, 0], 1), Err(Error::OutOfBounds { .. })));
    match m.set(&[0], 1) {
        Err(Error::InvalidArgument(msg)) => {
            assert!(msg.contains("[0] has 1, the array has 2 (shape [3, 4])"), "{msg}")
        }
        other => panic!("a 1-axis index of a 2-d mirror gave {other:?}"),
    }
    let v = m.view(&[0..2, 0..2])?;
    assert!(matches!(
        m.copy_from(&v, Array2::<i32>::zeros((3, 2)).into_dyn().view()),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(m.div_assign(&v, 0), Err(Error::InvalidArgument(_))));
    let other = View::full(&[5, 5]);
    assert!(m.fill(&other, 1).is_err(), "a view of another array");
    assert!(!m.is_dirty(), "failed writes mark nothing");
    assert!(v.permute(&[0, 0]).is_err());
    assert!(v.flip(2).is_err());
    Ok(())
}

backend_tests!(
    hull_matches_glumpy,
    random_writes_sync_exactly,
    many_ranges_use_one_plan,
    device_dirty_and_download,
    mirror_errors,
    sync_never_overwrites_device_dirty,
    many_ranges_split_around_device_dirty,
    host_write_on_device_dirty_is_a_conflict,
    mark_device_dirty_rejects_other_arrays,
    set_with_huge_index_is_out_of_bounds,
    panicking_write_keeps_its_bytes_pending,
    failed_transfers_keep_the_dirty_state,
    many_runs_are_not_quadratic
);

fn f32s<B: Kernels>(m: &Mirror<B, f32>) -> Result<(Vec<f32>, Vec<f32>)> {
    Ok((m.host().iter().copied().collect(), m.device_to_host()?.iter().copied().collect()))
}

/// Review item 7: an upload widened by the policy (glumpy's hull, a gap) never covers bytes
/// marked as changed on the device, whichever came first.
fn sync_never_overwrites_device_dirty<B: Kernels>(b: &B) -> Result<()> {
    let policies = [DirtyPolicy::hull(), DirtyPolicy { gap: 64, max_ranges: 4 }, DirtyPolicy::exact()];
    for device_first in [true, false] {
        for policy in policies {
            let mut m = Mirror::new(b, Array1::<f32>::zeros(16).into_dyn().view(), policy, None)?;
            let e8 = m.view(&[8..9])?;
            let device_work = |m: &mut Mirror<B, f32>| -> Result<()> {
                m.device().set(&[8], 5.0)?;
                m.mark_device_dirty(&e8)
            };
            if device_first {
                device_work(&mut m)?;
            }
            m.set(&[0], 1.0)?;
            m.set(&[15], 2.0)?;
            if !device_first {
                device_work(&mut m)?;
            }
            let t = m.sync()?;
            assert!(t.ranges.iter().all(|r| r.end <= 32 || r.start >= 36), "{policy:?}: {:?}", t.ranges);
            m.download()?;
            let mut want = vec![0.0f32; 16];
            (want[0], want[8], want[15]) = (1.0, 5.0, 2.0);
            assert_eq!(f32s(&m)?, (want.clone(), want), "{policy:?}, device first: {device_first}");
            assert!(!m.is_dirty() && m.device_pending().is_empty());
        }
    }
    // upload_all (the untracked upload) also leaves device-dirty bytes alone.
    let mut m = Mirror::new(b, Array1::<f32>::zeros(16).into_dyn().view(), DirtyPolicy::hull(), None)?;
    m.device().set(&[3], 4.0)?;
    m.mark_device_dirty(&m.view(&[3..4])?)?;
    m.set(&[2], 1.0)?;
    let t = m.upload_all()?;
    assert_eq!((t.ranges, t.bytes), (vec![0..12, 16..64], 60));
    m.download()?;
    assert_eq!(m.host()[[3]], 4.0);
    assert_eq!(f32s(&m)?.0, f32s(&m)?.1);
    Ok(())
}

/// The staging path (past 16 ranges) splits around device-dirty bytes too.
fn many_ranges_split_around_device_dirty<B: Kernels>(b: &B) -> Result<()> {
    let mut m = Mirror::new(b, Array1::<f32>::zeros(200).into_dyn().view(), DirtyPolicy::hull(), None)?;
    let mut want = vec![0.0f32; 200];
    for k in 0..50 {
        m.device().set(&[4 * k + 2], 100.0 + k as f32)?;
        m.mark_device_dirty(&m.view(&[4 * k + 2..4 * k + 3])?)?;
        want[4 * k + 2] = 100.0 + k as f32;
    }
    for k in 0..50 {
        m.set(&[4 * k], k as f32)?;
        want[4 * k] = k as f32;
    }
    let t = m.sync()?;
    assert_eq!((t.ranges.len(), t.commands, t.bytes), (50, 2, 4 * (197 - 49)));
    let d = m.download()?;
    assert_eq!(d.bytes, 200);
    assert_eq!(f32s(&m)?, (want.clone(), want));
    Ok(())
}

fn is_conflict(r: &Result<()>) -> bool {
    matches!(r, Err(Error::InvalidArgument(s)) if s.contains("conflict"))
}

/// The host writing bytes the device changed (and that were not downloaded) is a typed
/// conflict that changes nothing: the host's copy of them is stale.
fn host_write_on_device_dirty_is_a_conflict<B: Kernels>(b: &B) -> Result<()> {
    let mut m = Mirror::new(b, Array1::<i32>::zeros(16).into_dyn().view(), DirtyPolicy::exact(), None)?;
    m.device().set(&[8], 5)?;
    m.mark_device_dirty(&m.view(&[8..9])?)?;
    m.set(&[0], 1)?;
    let state = |m: &Mirror<B, i32>| (m.host().to_owned(), m.pending(), m.device_pending());
    let before = state(&m);
    let around = m.view(&[6..10])?;
    assert!(is_conflict(&m.set(&[8], 7)));
    assert!(is_conflict(&m.fill(&around, 3)));
    assert!(is_conflict(&m.add_assign(&m.full(), 1)));
    assert!(is_conflict(&m.copy_from(&around, ndarray::arr1(&[1, 2, 3, 4]).into_dyn().view())));
    let mut called = false;
    assert!(is_conflict(&m.write(&around.flip(0)?, |_| called = true)));
    assert!(!called, "the closure does not run");
    assert_eq!(state(&m), before, "a conflict changes nothing");
    // Bytes next to the device-dirty ones are free.
    m.fill(&m.view(&[9..12])?, 2)?;
    // After the download the device's bytes are on the host and writable.
    m.download()?;
    assert_eq!(m.host()[[8]], 5);
    m.add_assign(&m.view(&[8..9])?, 1)?;
    m.sync()?;
    assert_eq!(m.device().get(&[8])?, 6);
    assert_eq!(m.device_to_host()?, m.host().to_owned());
    // The other order has a documented winner: marking bytes the host wrote and did not
    // upload drops those host writes (the device work came later).
    m.set(&[3], 1)?;
    m.device().set(&[3], 9)?;
    m.mark_device_dirty(&m.view(&[3..4])?)?;
    assert!(m.pending().is_empty());
    m.sync()?;
    m.download()?;
    assert_eq!((m.host()[[3]], m.device().get(&[3])?), (9, 9));
    Ok(())
}

/// Review item 9: a view of another array is refused, as by `write`.
fn mark_device_dirty_rejects_other_arrays<B: Kernels>(b: &B) -> Result<()> {
    let mut m = Mirror::new(b, Array2::<f32>::zeros((4, 4)).into_dyn().view(), DirtyPolicy::exact(), None)?;
    let other = View::full(&[2, 8]).slice(&[1..2, 0..8])?;
    assert!(matches!(m.mark_device_dirty(&other), Err(Error::ShapeMismatch { .. })));
    assert!(matches!(m.mark_device_dirty(&View::full(&[16])), Err(Error::ShapeMismatch { .. })));
    assert!(m.device_pending().is_empty(), "nothing marked");
    m.mark_device_dirty(&m.view(&[1..2, 0..4])?)?;
    assert_eq!(m.device_pending(), vec![16..32]);
    Ok(())
}

/// `set` with an index at the end of `usize` is out of bounds, not an overflow.
fn set_with_huge_index_is_out_of_bounds<B: Kernels>(b: &B) -> Result<()> {
    let mut m = Mirror::new(b, Array1::<u8>::zeros(4).into_dyn().view(), DirtyPolicy::exact(), None)?;
    assert!(matches!(m.set(&[usize::MAX], 1), Err(Error::OutOfBounds { .. })));
    let mut m2 = Mirror::new(b, Array2::<u8>::zeros((2, 3)).into_dyn().view(), DirtyPolicy::hull(), None)?;
    assert!(matches!(m2.set(&[1, usize::MAX], 1), Err(Error::OutOfBounds { .. })));
    assert!(!m.is_dirty() && !m2.is_dirty());
    m.set(&[3], 7)?;
    m.sync()?;
    assert_eq!(m.device().to_vec()?, [0, 0, 0, 7]);
    Ok(())
}

/// A write closure that panics half-way leaves its bytes pending, so the next sync still
/// brings the device level with the host.
fn panicking_write_keeps_its_bytes_pending<B: Kernels>(b: &B) -> Result<()> {
    let mut m = Mirror::new(b, Array1::<i32>::zeros(16).into_dyn().view(), DirtyPolicy::exact(), None)?;
    let v = m.view(&[4..8])?;
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        m.write(&v, |mut a| {
            a[[0]] = 1;
            panic!("a write closure gives up half-way");
        })
    }));
    assert!(r.is_err());
    assert_eq!(m.host()[[4]], 1);
    assert_eq!(m.pending(), vec![16..32]);
    m.sync()?;
    assert_eq!(m.device_to_host()?, m.host().to_owned());
    Ok(())
}

/// A sync or download failing part-way keeps every range marked; retrying finishes it.
fn failed_transfers_keep_the_dirty_state<B: Kernels>(b: &B) -> Result<()> {
    let f = faulty::Faulty::new(b);
    for n in [3usize, 40] {
        let mut m = Mirror::new(&f, Array1::<i32>::zeros(200).into_dyn().view(), DirtyPolicy::exact(), None)?;
        for k in 0..n {
            m.set(&[k * 4], k as i32 + 1)?;
            m.device().set(&[k * 4 + 2], -(k as i32))?;
            m.mark_device_dirty(&m.view(&[k * 4 + 2..k * 4 + 3])?)?;
        }
        let (pending, device_pending) = (m.pending(), m.device_pending());
        f.fail_after(1);
        assert!(matches!(m.sync(), Err(Error::Driver { .. })));
        assert!(matches!(m.download(), Err(Error::Driver { .. })));
        f.disarm();
        assert_eq!((m.pending(), m.device_pending()), (pending, device_pending));
        m.sync()?;
        m.download()?;
        assert!(!m.is_dirty() && m.device_pending().is_empty());
        assert_eq!(m.device_to_host()?, m.host().to_owned());
        assert_eq!(m.host()[[(n - 1) * 4 + 2]], -(n as i32 - 1));
    }
    Ok(())
}

/// A column of 150 000 rows is 150 000 runs: marking it (host or device side) must take
/// time linear in the runs (it was quadratic: about 17 s for 80 000 runs in release).
fn many_runs_are_not_quadratic<B: Kernels>(b: &B) -> Result<()> {
    let rows = 150_000;
    let mut m =
        Mirror::new(b, Array2::<i32>::zeros((rows, 2)).into_dyn().view(), DirtyPolicy::exact(), None)?;
    let t = std::time::Instant::now();
    let col = m.view(&[0..rows, 0..1])?;
    m.fill(&col, 1)?;
    m.mark_device_dirty(&col)?;
    m.fill(&m.view(&[0..rows, 1..2])?, 2)?;
    m.sync()?;
    m.download()?;
    // A bound no linear implementation comes near, on any machine.
    assert!(t.elapsed() < std::time::Duration::from_secs(30), "took {:?}", t.elapsed());
    assert_eq!(m.host()[[rows - 1, 0]], 0, "the device's column came back");
    assert_eq!(m.device().get(&[rows - 1, 1])?, 2);
    Ok(())
}
