//! Shared pieces of the hostile-input property tests: a runner, number strategies that
//! reach the edges of `usize`, and conversions between proptest and gpubuf errors.

use gpubuf::Error;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};

/// A runner for `cases` cases (at most 8 under Miri), without failure persistence.
pub fn runner(cases: u32) -> TestRunner {
    let cases = if cfg!(miri) { cases.min(8) } else { cases };
    TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() })
}

/// Mostly small numbers, sometimes one at the edge of `usize`.
pub fn big_usize() -> impl Strategy<Value = usize> {
    let edges =
        vec![usize::MAX, usize::MAX - 1, isize::MAX as usize, 1 << 63, 1 << 62, (1 << 62) + 16, 1 << 50];
    prop_oneof![3 => 0usize..70, 1 => prop::sample::select(edges)]
}

/// Offsets: aligned small ones, or an extreme one.
pub fn offset() -> impl Strategy<Value = usize> {
    prop_oneof![3 => (0usize..9).prop_map(|k| 8 * k), 1 => big_usize()]
}

/// Lengths: small ones, or an extreme one.
pub fn length() -> impl Strategy<Value = usize> {
    prop_oneof![3 => 0usize..40, 1 => big_usize()]
}

/// Whether `offset..offset + len` lies in `0..cap`, in arithmetic that cannot wrap.
pub fn fits(offset: usize, len: usize, cap: usize) -> bool {
    offset as u128 + len as u128 <= cap as u128
}

/// A gpubuf error as a failed test case.
pub fn failed(e: Error) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

/// A failed property as a gpubuf error (for test bodies that return `gpubuf::Result`).
pub fn prop_err<T: std::fmt::Debug>(e: TestError<T>) -> Error {
    Error::invalid(format!("property failed: {e}"))
}
