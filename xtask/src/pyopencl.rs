//! `cargo xtask pyopencl`: pyopencl 2026.1.4's own memory-pool and allocator tests with
//! gpubuf's `MemoryPool`, `ImmediateAllocator` and `DeferredAllocator` in their place, as a
//! pyopencl user swaps them: `pytest -p gpubuf.pyopencl_plugin` puts gpubuf's classes
//! under the names the tests import (`pyopencl.tools.MemoryPool`, ...), with no change to
//! pyopencl's tests.
//!
//! pyopencl's source distribution (pinned: version and sha256) is fetched once with pip into
//! `<target>/pyopencl-2026.1.4/` and its `test/` unpacked afresh on every run. The wheel
//! runs in the Python step's venv (which holds the pinned pyopencl, the baseline of
//! `python -m gpubuf.bench pool`) or a fresh one. A probe first checks that the plugin
//! swaps the names (one failure if not); then pytest runs [`TESTS`] on every OpenCL device
//! pyopencl finds (its own `ctx_factory` fixture). Nothing is deselected; the tests that
//! do not reach gpubuf are named in docs/python.md with the reason.

use crate::python::{parse_summary, venv_with, without_rust, PyCounts, Report};
use crate::sdist::Sdist;
use crate::sh::{capture, run_ok, run_tee};
use crate::wheel::{self, target_dir};
use std::process::Command;
use std::time::{Duration, Instant};

/// The pyopencl release whose tests run (the version `cargo xtask python` installs).
pub const VERSION: &str = "2026.1.4";

/// The sha256 of its source distribution as published.
pub const SDIST_SHA256: &str = "6cb9544a004609061e86873fe36500da6c2101042e9c7b9c3b804a29a12b98bf";

/// The pinned sdist.
const PYOPENCL: Sdist =
    Sdist { project: "pyopencl", version: VERSION, file: "pyopencl-2026.1.4.tar.gz", sha256: SDIST_SHA256 };

/// pyopencl's tests of its pool, allocators and pooled arrays (node ids under `test/`).
pub const TESTS: [&str; 7] = [
    "test_wrapper.py::test_mempool",
    "test_wrapper.py::test_mempool_2",
    "test_wrapper.py::test_mempool_32bit_issues",
    "test_wrapper.py::test_allocator",
    "test_wrapper.py::test_buffer_release",
    "test_array.py::test_mem_pool_with_arrays",
    "test_array.py::test_map_to_host",
];

/// Runs pyopencl's tests with gpubuf swapped in, when the wheel can open OpenCL (a
/// failure when `require` names `opencl` and it cannot); in the Python step's venv with
/// `reuse` ([`venv_with`]).
///
/// # Errors
/// A description of the step that failed before any test could run.
pub fn run(require: &str, reuse: bool) -> Result<Report, String> {
    let t = Instant::now();
    let wheel = wheel::build()?;
    let dir = std::path::absolute(target_dir()).unwrap_or_else(|_| target_dir()).join("pyopencl-venv");
    let (venv, python) = venv_with(&dir, &wheel, reuse, &[])?;
    let sdist = PYOPENCL.unpack(&python, &venv, &["test"])?;
    println!(
        "pyopencl: wheel, venv and sdist in {}s; pyopencl {VERSION}'s tests from {}",
        t.elapsed().as_secs(),
        sdist.display()
    );
    let mut report = Report::default();
    let code = "import gpubuf; print(','.join(gpubuf.available_backends()))";
    let mut probe = Command::new(&python);
    probe.args(["-c", code]);
    let available = capture(without_rust(&mut probe, &venv)).unwrap_or_default();
    if !available.trim().split(',').any(|b| b == "opencl") {
        if require.split(',').any(|b| b.trim() == "opencl") {
            report.total.failed += 1;
            report.lines.push("pyopencl: FAILED (opencl required, but the wheel cannot open it)".into());
        } else {
            report.lines.push("pyopencl: skipped (the wheel cannot open OpenCL here)".into());
        }
        return Ok(report);
    }
    let check = "import gpubuf.pyopencl_plugin, gpubuf, pyopencl.tools as t; \
                 assert (t.MemoryPool, t.ImmediateAllocator, t.DeferredAllocator) == \
                 (gpubuf.MemoryPool, gpubuf.ImmediateAllocator, gpubuf.DeferredAllocator); \
                 print('pyopencl: pyopencl.tools has gpubuf\\'s pool and allocators')";
    let mut swap = Command::new(&python);
    swap.args(["-c", check]).current_dir(&sdist);
    if !run_ok(without_rust(&mut swap, &venv)) {
        report.total.failed += 1;
        report.lines.push("pyopencl: FAILED (the plugin does not swap pyopencl.tools' names)".into());
        return Ok(report);
    }
    let t = Instant::now();
    let mut cmd = Command::new(&python);
    without_rust(&mut cmd, &venv);
    cmd.args(["-m", "pytest", "-q", "--color=no", "-rfEs", "--tb=short", "-p", "no:cacheprovider"])
        .args(["-p", "gpubuf.pyopencl_plugin"])
        .current_dir(sdist.join("test"))
        .args(TESTS);
    let (lines, ok) = run_tee(&mut cmd);
    let mut c = parse_summary(&lines).unwrap_or(PyCounts { failed: 1, ..PyCounts::default() });
    if !ok && c.failed == 0 {
        c.failed = 1;
    }
    report.add("pyopencl", "opencl", c, t.elapsed());
    Ok(report)
}

/// `cargo xtask pyopencl`: the run above (`GPUBUF_REQUIRE` from the environment) within a
/// limit of 15 minutes (`GPUBUF_STEP_LIMIT` replaces it); true when nothing failed.
pub fn command() -> bool {
    let require = std::env::var("GPUBUF_REQUIRE").unwrap_or_default();
    let limit = crate::sh::limit(Duration::from_secs(15 * 60));
    let (result, stopped) = crate::sh::step("pyopencl", limit, || run(&require, false));
    crate::python::report_command("pyopencl", result, stopped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selection_names_pyopencls_pool_tests() {
        assert!(TESTS.iter().all(|t| t.starts_with("test_") && t.contains(".py::test_")));
        assert!(TESTS.iter().any(|t| t.ends_with("::test_mempool")));
        assert_eq!(PYOPENCL.stem(), "pyopencl-2026.1.4");
    }
}
