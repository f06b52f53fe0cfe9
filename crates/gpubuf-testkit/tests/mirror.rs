//! The mirror on every backend.

use gpubuf::mirror::{DirtyPolicy, Mirror, View};
use gpubuf::{Error, Kernels, Result};
use gpubuf_testkit::backend_tests;
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
    assert!(matches!(m.set(&[0], 1), Err(Error::ShapeMismatch { .. })));
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
    mirror_errors
);
