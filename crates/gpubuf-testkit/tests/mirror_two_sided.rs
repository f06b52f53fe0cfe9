//! The mirror's two sides on every backend: host writes, device writes (marked), syncs and
//! downloads interleaved under random policies lose nothing, checked element by element.

use gpubuf::mirror::{DirtyPolicy, Mirror, View};
use gpubuf::{Error, Kernels, Result};
use gpubuf_testkit::backend_tests;
use ndarray::{ArrayD, IxDyn};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const SHAPE: [usize; 2] = [4, 6];
const N: usize = 24;

fn policy() -> impl Strategy<Value = DirtyPolicy> {
    prop_oneof![
        Just(DirtyPolicy::exact()),
        Just(DirtyPolicy::hull()),
        (0usize..64, 0usize..4).prop_map(|(gap, max_ranges)| DirtyPolicy { gap, max_ranges }),
        Just(DirtyPolicy { gap: usize::MAX, max_ranges: 0 }),
        Just(DirtyPolicy { gap: 0, max_ranges: usize::MAX }),
    ]
}

/// A view of the [4, 6] array: a range per axis, flips, transposed or not.
type Spec = ((usize, usize), (usize, usize), bool, bool, bool);

fn spec() -> impl Strategy<Value = Spec> {
    ((0usize..4, 1usize..5), (0usize..6, 1usize..7), any::<bool>(), any::<bool>(), any::<bool>())
}

/// The view and the base elements it covers.
fn make(m_full: &View, s: &Spec) -> Result<(View, Vec<usize>)> {
    let r0 = s.0 .0..(s.0 .0 + s.0 .1).min(4);
    let r1 = s.1 .0..(s.1 .0 + s.1 .1).min(6);
    let mut v = m_full.slice(&[r0.clone(), r1.clone()])?;
    if s.2 {
        v = v.flip(0)?;
    }
    if s.3 {
        v = v.flip(1)?;
    }
    if s.4 {
        v = v.t();
    }
    Ok((v, r0.flat_map(|i| r1.clone().map(move |j| i * 6 + j)).collect()))
}

#[derive(Debug, Clone)]
enum Op {
    HostFill(Spec, i32),
    HostAdd(Spec, i32),
    HostSet(usize, i32),
    Device(Spec, i32),
    Sync,
    UploadAll,
    Download,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (spec(), -99i32..99).prop_map(|(s, v)| Op::HostFill(s, v)),
        (spec(), -9i32..9).prop_map(|(s, v)| Op::HostAdd(s, v)),
        (0usize..N, -99i32..99).prop_map(|(i, v)| Op::HostSet(i, v)),
        (spec(), 100i32..200).prop_map(|(s, v)| Op::Device(s, v)),
        Just(Op::Sync),
        Just(Op::UploadAll),
        Just(Op::Download),
    ]
}

/// proptest: host writes, device writes (marked), syncs and downloads in any order and under
/// any policy lose nothing: after every step the host and the device hold exactly what an
/// element model says (uploads never cover device-dirty elements, host writes to them are
/// conflicts that change nothing, downloads bring back exactly them).
fn two_sided_model<B: Kernels>(b: &B) -> Result<()> {
    let ops = prop::collection::vec(op(), 1..24);
    TestRunner::new(Config { cases: 96, failure_persistence: None, ..Config::default() })
        .run(&(policy(), ops), |(policy, ops)| {
            let f = |e: Error| TestCaseError::fail(e.to_string());
            let init = ArrayD::from_shape_fn(IxDyn(&SHAPE), |i| (i[0] * 6 + i[1]) as i32);
            let mut m = Mirror::new(b, init.view(), policy, None).map_err(f)?;
            let mut host: Vec<i32> = init.iter().copied().collect();
            let mut dev = host.clone();
            let mut dirty = [false; N];
            for (k, op) in ops.iter().enumerate() {
                match op {
                    Op::HostFill(s, _) | Op::HostAdd(s, _) | Op::Device(s, _) => {
                        let (v, cover) = make(&m.full(), s).map_err(f)?;
                        let conflict = cover.iter().any(|&i| dirty[i]);
                        let r = match op {
                            Op::HostFill(_, x) => m.fill(&v, *x),
                            Op::HostAdd(_, x) => m.add_assign(&v, *x),
                            _ => Ok(()),
                        };
                        match op {
                            Op::Device(_, x) => {
                                for &i in &cover {
                                    m.device().set(&[i / 6, i % 6], *x).map_err(f)?;
                                    (dev[i], dirty[i]) = (*x, true);
                                }
                                m.mark_device_dirty(&v).map_err(f)?;
                            }
                            _ if conflict => prop_assert!(
                                matches!(r, Err(Error::InvalidArgument(_))),
                                "op {} {:?}: {:?}",
                                k,
                                op,
                                r
                            ),
                            _ => {
                                r.map_err(f)?;
                                for &i in &cover {
                                    host[i] = match op {
                                        Op::HostFill(_, x) => *x,
                                        Op::HostAdd(_, x) => host[i] + x,
                                        _ => host[i],
                                    };
                                }
                            }
                        }
                    }
                    Op::HostSet(i, x) => {
                        let r = m.set(&[i / 6, i % 6], *x);
                        if dirty[*i] {
                            prop_assert!(matches!(r, Err(Error::InvalidArgument(_))));
                        } else {
                            r.map_err(f)?;
                            host[*i] = *x;
                        }
                    }
                    Op::Sync | Op::UploadAll => {
                        let t = if matches!(op, Op::Sync) { m.sync() } else { m.upload_all() }.map_err(f)?;
                        for r in &t.ranges {
                            prop_assert!(
                                (r.start / 4..r.end.div_ceil(4)).all(|i| !dirty[i]),
                                "{:?}",
                                t.ranges
                            );
                        }
                        for i in 0..N {
                            if !dirty[i] {
                                dev[i] = host[i];
                            }
                        }
                    }
                    Op::Download => {
                        m.download().map_err(f)?;
                        for i in 0..N {
                            if std::mem::take(&mut dirty[i]) {
                                host[i] = dev[i];
                            }
                        }
                    }
                }
                let got_host: Vec<i32> = m.host().iter().copied().collect();
                let got_dev: Vec<i32> = m.device_to_host().map_err(f)?.iter().copied().collect();
                prop_assert_eq!(&got_host, &host, "host after op {} {:?}", k, op);
                prop_assert_eq!(&got_dev, &dev, "device after op {} {:?}", k, op);
            }
            m.sync().map_err(f)?;
            m.download().map_err(f)?;
            prop_assert_eq!(m.host().to_owned(), m.device_to_host().map_err(f)?);
            prop_assert!(!m.is_dirty() && m.device_pending().is_empty());
            Ok(())
        })
        .map_err(|e| Error::invalid(e.to_string()))
}

backend_tests!(two_sided_model);
