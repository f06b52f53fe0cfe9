//! `NDBuffer::take` and `NDBuffer::put` (integer-array indexing on the device) on every
//! backend, against the same selection made on the host: random shapes, views (strided,
//! transposed, reversed), indices in any order with repeats.

use gpubuf::{Error, Kernels, NDBuffer, Result};
use gpubuf_testkit::backend_tests;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// A case: a shape, a view of it, flat indices into the view, values to put.
#[derive(Debug, Clone)]
struct Case {
    shape: Vec<usize>,
    transpose: bool,
    step: usize,
    indices: Vec<usize>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(1usize..6, 1..=3),
        any::<bool>(),
        1usize..3,
        prop::collection::vec(any::<u16>(), 0..40),
    )
        .prop_map(|(shape, transpose, step, raw)| Case {
            shape,
            transpose,
            step,
            indices: raw.into_iter().map(usize::from).collect(),
        })
}

/// The view of the case over `base` (on any backend) and its values in C order on the host.
fn view<B: Kernels>(b: &B, c: &Case) -> Result<(NDBuffer<B, i32>, Vec<i32>)> {
    let n: usize = c.shape.iter().product();
    let data: Vec<i32> = (0..n as i32).map(|v| v * 7 - 3).collect();
    let base = NDBuffer::<B, i32>::from_slice(b, &c.shape, &data)?;
    let mut v = if c.transpose { base.transpose(None)? } else { base };
    let last = v.ndim() - 1;
    let len = v.shape()[last];
    let mut ranges: Vec<std::ops::Range<usize>> = v.shape().iter().map(|&e| 0..e).collect();
    if c.step > 1 && len > 1 {
        ranges[last] = 1..len;
        v = v.slice(&ranges)?;
    }
    let host = v.to_vec()?;
    Ok((v, host))
}

fn take_matches_host<B: Kernels>(b: &B) -> Result<()> {
    let mut runner = TestRunner::new(Config { cases: 64, failure_persistence: None, ..Config::default() });
    runner
        .run(&case(), |c| {
            let (v, host) = view(b, &c).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let idx: Vec<usize> = c.indices.iter().map(|&i| i % host.len()).collect();
            let got =
                v.take(&idx).and_then(|t| t.to_vec()).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let want: Vec<i32> = idx.iter().map(|&i| host[i]).collect();
            prop_assert_eq!(got, want);
            Ok(())
        })
        .map_err(|e| Error::invalid(e.to_string()))
}

fn put_matches_host<B: Kernels>(b: &B) -> Result<()> {
    let mut runner = TestRunner::new(Config { cases: 64, failure_persistence: None, ..Config::default() });
    runner
        .run(&case(), |c| {
            let (v, mut host) = view(b, &c).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let idx: Vec<usize> = c.indices.iter().map(|&i| i % host.len()).collect();
            let vals: Vec<i32> = (0..idx.len() as i32).map(|k| 1000 + k).collect();
            let dev = NDBuffer::<B, i32>::from_slice(b, &[vals.len()], &vals)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            v.put(&idx, &dev).map_err(|e| TestCaseError::fail(e.to_string()))?;
            for (k, &i) in idx.iter().enumerate() {
                host[i] = vals[k]; // the last of repeats wins, as numpy assigns
            }
            prop_assert_eq!(v.to_vec().map_err(|e| TestCaseError::fail(e.to_string()))?, host);
            Ok(())
        })
        .map_err(|e| Error::invalid(e.to_string()))
}

/// Bad input is an error that writes nothing; the array stays usable.
fn bad_indices_are_errors<B: Kernels>(b: &B) -> Result<()> {
    let a = NDBuffer::<B, i32>::from_slice(b, &[2, 3], &[1, 2, 3, 4, 5, 6])?;
    assert!(matches!(a.take(&[0, 6]), Err(Error::OutOfBounds { .. })));
    assert!(matches!(a.take(&[usize::MAX]), Err(Error::OutOfBounds { .. })));
    let v = NDBuffer::<B, i32>::from_slice(b, &[2], &[9, 9])?;
    assert!(matches!(a.put(&[1, 6], &v), Err(Error::OutOfBounds { .. })));
    assert!(matches!(a.put(&[1], &v), Err(Error::ShapeMismatch { .. })));
    assert_eq!(a.to_vec()?, [1, 2, 3, 4, 5, 6], "nothing written");
    assert_eq!(a.take(&[])?.shape(), [0]);
    a.put(&[], &NDBuffer::<B, i32>::from_slice(b, &[0], &[])?)?;
    // A value that is a view of the array itself is read before anything is written.
    let flat = a.reshape(&[6])?;
    a.put(&[5, 4, 3, 2, 1, 0], &flat)?;
    assert_eq!(a.to_vec()?, [6, 5, 4, 3, 2, 1]);
    assert_eq!(a.take(&[5, 5, 0])?.to_vec()?, [1, 1, 6]);
    Ok(())
}

backend_tests!(take_matches_host, put_matches_host, bad_indices_are_errors);
