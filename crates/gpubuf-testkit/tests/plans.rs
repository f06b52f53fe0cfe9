//! Copy plans on every backend: random plans against the reference, scatter round trips,
//! and the errors for bad plans and bad arguments.

use gpubuf::{CopyPlan, DType, Error, Kernels, MemRef, Result, Segment};
use gpubuf_testkit::strategies::{bytes, plan_case, PlanCase};
use gpubuf_testkit::{backend_tests, exec, reference};
use proptest::test_runner::{Config, TestCaseError, TestRunner};

fn runner(cases: u32) -> TestRunner {
    let cases = if cfg!(miri) { cases.min(4) } else { cases };
    TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() })
}

fn fail(e: Error) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

fn to_err(e: proptest::test_runner::TestError<PlanCase>) -> Error {
    Error::invalid(format!("property failed: {e}"))
}

/// Random plans (zero, negative and overlapping strides, negation, every dtype) gather
/// exactly what the reference gathers, leaving unwritten buffer bytes alone.
fn gather_matches_reference<B: Kernels>(b: &B) -> Result<()> {
    runner(96)
        .run(&plan_case(8, 5, false), |case| {
            let initial = bytes(case.plan.buffer_len() * case.dtype.size(), 99);
            let got = exec::gather(b, &case, &initial).map_err(fail)?;
            let want = reference::gather(&case.plan, case.dtype, &case.sources, &initial);
            proptest::prop_assert_eq!(got, want);
            Ok(())
        })
        .map_err(to_err)
}

/// Gather then scatter into zeroed arrays gives back exactly the gathered elements (negation
/// applied twice is the identity), and leaves every other element zero.
fn gather_scatter_round_trip<B: Kernels>(b: &B) -> Result<()> {
    runner(96)
        .run(&plan_case(8, 5, true), |case| {
            let initial = vec![0u8; case.plan.buffer_len() * case.dtype.size()];
            let packed = exec::gather(b, &case, &initial).map_err(fail)?;
            let zeros: Vec<Vec<u8>> = case.sources.iter().map(|s| vec![0u8; s.len()]).collect();
            let back = exec::scatter(b, &case, &packed, &zeros).map_err(fail)?;
            let mut touched: Vec<Vec<bool>> =
                case.sources.iter().map(|s| vec![false; s.len() / case.dtype.size()]).collect();
            for seg in case.plan.segments() {
                seg.for_each(|_, at| touched[seg.source][at] = true);
            }
            let w = case.dtype.size();
            for (i, t) in touched.iter().enumerate() {
                for (e, &hit) in t.iter().enumerate() {
                    let want = if hit {
                        &case.sources[i][e * w..(e + 1) * w]
                    } else {
                        &zeros[i][e * w..(e + 1) * w]
                    };
                    proptest::prop_assert_eq!(
                        &back[i][e * w..(e + 1) * w],
                        want,
                        "source {} element {}",
                        i,
                        e
                    );
                }
            }
            let want = reference::scatter(&case.plan, case.dtype, &packed, &zeros);
            proptest::prop_assert_eq!(back, want);
            Ok(())
        })
        .map_err(to_err)
}

/// The argument checks every backend applies before launching.
fn bad_plan_arguments_are_errors<B: Kernels>(b: &B) -> Result<()> {
    let s = b.default_stream();
    let seg = Segment::new(0, 0, &[(4, 1)], 0)?;
    let plan = b.prepare(&CopyPlan::new(vec![4], 4, vec![seg])?, DType::F32)?;
    let small = b.allocate(8)?;
    let src = b.allocate(16)?;
    let dst = b.allocate(16)?;
    // Too short a source, too short a buffer, wrong source count.
    assert!(matches!(
        b.gather(s, &plan, &[MemRef::whole(&small)], MemRef::whole(&dst)),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        b.gather(s, &plan, &[MemRef::whole(&src)], MemRef::whole(&small)),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(b.gather(s, &plan, &[], MemRef::whole(&dst)), Err(Error::InvalidArgument(_))));
    // Misaligned offsets and ranges outside the allocation.
    let big = b.allocate(64)?;
    assert!(b.gather(s, &plan, &[MemRef { memory: &big, offset: 2, len: 16 }], MemRef::whole(&dst)).is_err());
    assert!(b
        .gather(s, &plan, &[MemRef { memory: &big, offset: 60, len: 16 }], MemRef::whole(&dst))
        .is_err());
    // The buffer may not alias a source.
    let alias = b.gather(s, &plan, &[MemRef::new(&big, 0, 16)?], MemRef::new(&big, 8, 16)?);
    assert!(matches!(alias, Err(Error::InvalidArgument(_))), "{alias:?}");
    assert!(b.gather(s, &plan, &[MemRef::new(&big, 0, 16)?], MemRef::new(&big, 16, 16)?).is_ok());
    // Scatter refuses plans that write an element twice and overlapping targets.
    let bcast = Segment::new(0, 0, &[(4, 0)], 0)?;
    let twice = b.prepare(&CopyPlan::new(vec![4], 4, vec![bcast])?, DType::F32)?;
    assert!(matches!(
        b.scatter(s, &twice, MemRef::whole(&dst), &[MemRef::whole(&src)]),
        Err(Error::InvalidPlan(_))
    ));
    let two = CopyPlan::new(vec![4, 4], 8, vec![seg, Segment { source: 1, dst_offset: 4, ..seg }])?;
    let two = b.prepare(&two, DType::F32)?;
    let buf = b.allocate(32)?;
    let overlapping = [MemRef::new(&big, 0, 16)?, MemRef::new(&big, 8, 16)?];
    assert!(b.scatter(s, &two, MemRef::whole(&buf), &overlapping).is_err());
    Ok(())
}

/// Invalid plans never reach a backend: construction rejects them.
fn invalid_plans_are_rejected<B: Kernels>(_b: &B) -> Result<()> {
    let ok = Segment::new(0, 4, &[(3, -2)], 0)?;
    assert!(CopyPlan::new(vec![5], 3, vec![ok]).is_ok());
    assert!(CopyPlan::new(vec![4], 3, vec![ok]).is_err(), "reaches past the end");
    assert!(CopyPlan::new(vec![5], 2, vec![ok]).is_err(), "buffer too short");
    let under = Segment::new(0, 3, &[(3, -2)], 0)?;
    assert!(CopyPlan::new(vec![5], 3, vec![under]).is_err(), "reaches below zero");
    let clash = Segment::new(0, 0, &[(2, 1)], 2)?;
    assert!(CopyPlan::new(vec![5], 6, vec![ok, clash]).is_err(), "buffer ranges overlap");
    assert!(CopyPlan::new(vec![5], 6, vec![Segment { source: 3, ..ok }]).is_err(), "no such source");
    Ok(())
}

/// Plans over many sources (more than one launch's worth on some devices) still work.
fn many_sources<B: Kernels>(b: &B) -> Result<()> {
    let n = 300;
    let segs: Vec<Segment> = (0..n)
        .map(|i| Segment::new(i, 1, &[(2, 1)], 2 * (n - 1 - i)).map(|s| s.negated(i % 2 == 0)))
        .collect::<Result<_>>()?;
    let plan = CopyPlan::new(vec![3; n], 2 * n, segs)?;
    let case = PlanCase {
        dtype: DType::I32,
        sources: (0..n)
            .map(|i| [i as i32, 10 * i as i32, 100 * i as i32].iter().flat_map(|v| v.to_le_bytes()).collect())
            .collect(),
        plan,
    };
    let got = exec::gather(b, &case, &vec![0u8; 8 * n])?;
    let want = reference::gather(&case.plan, case.dtype, &case.sources, &vec![0u8; 8 * n]);
    assert_eq!(got, want);
    let vals: Vec<i32> = got.chunks(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    assert_eq!(&vals[..2], &[10 * (n as i32 - 1), 100 * (n as i32 - 1)]);
    Ok(())
}

/// Gathers large enough for the CPU's streaming stores (at least 4 MiB): long rows at
/// misaligned buffer offsets with odd lengths, negated and not, short runs split over
/// several buffer rows (a rotated halo: the prefetching path), and a transposed block, for
/// every dtype, against the reference; then a scatter of the result back.
fn large_gathers_match_reference<B: Kernels>(b: &B) -> Result<()> {
    // Under Miri (the CPU body only, and slow: about 90 s even so) a small version of the
    // same shapes for one dtype: rows still hold the 3 x 80 rotated block.
    let dtypes: &[DType] = if cfg!(miri) { &[DType::F16] } else { &DType::ALL };
    for &dtype in dtypes {
        let w = dtype.size();
        // Row length in elements: at least 4 KiB for every dtype.
        let c = if cfg!(miri) { 243 } else { 5003 };
        // Two thirds of it is gathered: above 4 MiB.
        let r = if cfg!(miri) { 24 } else { (7 << 20) / (c * w) + 3 };
        let (r1, r2) = (r / 3, 2 * r / 3);
        let mut segs = Vec::new();
        let mut at = 1; // an odd start: no segment begins on a 16-byte boundary by luck
        segs.push(Segment::new(0, 0, &[(r1, c as isize), (c, 1)], at)?);
        at += r1 * c + 3;
        // Negated where the dtype has a negation (not bool).
        let neg = dtype.negatable();
        segs.push(Segment::new(0, r1 * c + 1, &[(r2 - r1, c as isize), (c - 3, 1)], at)?.negated(neg));
        at += (r2 - r1) * (c - 3) + 5;
        // Rotated-halo shape: 3 rows of 80 contiguous in the array, each to its own buffer
        // range (y outermost in the buffer, reversed), 40 "x" steps a whole row apart.
        let x = 40.min(r - r2);
        let top = (r2 * c + 80 * 2) as isize;
        segs.push(
            Segment::new(0, top as usize, &[(3, -80), (x, c as isize), (80, 1)], at)?
                .negated(dtype.is_float()),
        );
        at += 3 * x * 80 + 7;
        // A transposed block: strided on the array side.
        segs.push(Segment::new(1, 2, &[(50, 1), (60, 50)], at)?.negated(neg));
        at += 3000;
        let plan = CopyPlan::new(vec![r * c, 3000 + 2], at, segs)?;
        let case = PlanCase { dtype, sources: vec![bytes(r * c * w, 7), bytes(3002 * w, 8)], plan };
        let initial = bytes(at * w, 9);
        let got = exec::gather(b, &case, &initial)?;
        let want = reference::gather(&case.plan, dtype, &case.sources, &initial);
        assert!(got == want, "{dtype}: the large gather differs from the reference");
        let zeros: Vec<Vec<u8>> = case.sources.iter().map(|s| vec![0u8; s.len()]).collect();
        let back = exec::scatter(b, &case, &got, &zeros)?;
        assert!(back == reference::scatter(&case.plan, dtype, &got, &zeros), "{dtype}: scatter differs");
    }
    Ok(())
}

/// Declared lengths whose byte counts overflow (2^62 + 16 elements over 64-byte ranges)
/// are errors on every dtype, for gather and scatter, with nothing written; the same
/// memory then serves a valid plan.
fn huge_declared_lengths_are_errors<B: Kernels>(b: &B) -> Result<()> {
    let s = b.default_stream();
    let huge = (1usize << 62) + 16;
    let src = exec::upload(b, &bytes(64, 11))?;
    let buf = exec::upload(b, &bytes(64, 12))?;
    let seg = Segment::new(0, 0, &[(4, 1)], 0)?;
    for dtype in DType::ALL {
        for (lens, len) in [(vec![huge], 4), (vec![4], huge)] {
            let plan = b.prepare(&CopyPlan::new(lens, len, vec![seg])?, dtype)?;
            let r = b.gather(s, &plan, &[MemRef::whole(&src)], MemRef::whole(&buf));
            assert!(matches!(r, Err(Error::OutOfBounds { .. })), "{dtype} gather: {r:?}");
            let r = b.scatter(s, &plan, MemRef::whole(&buf), &[MemRef::whole(&src)]);
            assert!(matches!(r, Err(Error::OutOfBounds { .. })), "{dtype} scatter: {r:?}");
        }
        assert_eq!(exec::download(b, &src)?, bytes(64, 11), "{dtype}: the source is untouched");
        assert_eq!(exec::download(b, &buf)?, bytes(64, 12), "{dtype}: the buffer is untouched");
    }
    // Still usable: a valid plan over the same memory.
    let plan =
        b.prepare(&CopyPlan::new(vec![8], 8, vec![Segment::new(0, 7, &[(8, -1)], 0)?])?, DType::F64)?;
    b.gather(s, &plan, &[MemRef::whole(&src)], MemRef::whole(&buf))?;
    let want: Vec<u8> = bytes(64, 11).chunks(8).rev().flatten().copied().collect();
    assert_eq!(exec::download(b, &buf)?, want);
    Ok(())
}

/// A plan that negates refuses bool (no negation), for gather and scatter, with nothing
/// written; the same plan without negation moves bool bytes unchanged.
fn negating_plans_refuse_bool<B: Kernels>(b: &B) -> Result<()> {
    let s = b.default_stream();
    let src = exec::upload(b, &bytes(16, 21))?;
    let buf = exec::upload(b, &bytes(16, 22))?;
    let seg = Segment::new(0, 15, &[(16, -1)], 0)?;
    let plan = b.prepare(&CopyPlan::new(vec![16], 16, vec![seg.negated(true)])?, DType::Bool);
    let plan = match plan {
        Err(e) => e,
        Ok(p) => {
            let g = b.gather(s, &p, &[MemRef::whole(&src)], MemRef::whole(&buf)).unwrap_err();
            let r = b.scatter(s, &p, MemRef::whole(&buf), &[MemRef::whole(&src)]);
            assert!(matches!(r, Err(Error::InvalidArgument(_))), "scatter: {r:?}");
            g
        }
    };
    assert!(matches!(&plan, Error::InvalidArgument(m) if m.contains("bool")), "{plan:?}");
    assert_eq!(exec::download(b, &src)?, bytes(16, 21), "the source is untouched");
    assert_eq!(exec::download(b, &buf)?, bytes(16, 22), "the buffer is untouched");
    let p = b.prepare(&CopyPlan::new(vec![16], 16, vec![seg])?, DType::Bool)?;
    b.gather(s, &p, &[MemRef::whole(&src)], MemRef::whole(&buf))?;
    let want: Vec<u8> = bytes(16, 21).into_iter().rev().collect();
    assert_eq!(exec::download(b, &buf)?, want);
    Ok(())
}

backend_tests!(
    negating_plans_refuse_bool,
    large_gathers_match_reference,
    gather_matches_reference,
    gather_scatter_round_trip,
    bad_plan_arguments_are_errors,
    invalid_plans_are_rejected,
    many_sources,
    huge_declared_lengths_are_errors
);
