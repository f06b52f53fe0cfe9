//! `cargo xtask zarr`: zarr-python 3.1.6's own tests with gpubuf's classes as zarr's
//! default buffer and ndbuffer, as a zarr user swaps them: by configuration alone
//! (`ZARR_BUFFER=gpubuf.zarr.CpuBuffer`, `ZARR_NDBUFFER=gpubuf.zarr.CpuNDBuffer`, and
//! `ZARR_CODEC_PIPELINE__PATH=gpubuf.zarr_pipeline.CodecPipeline`, which reads v2 chunks in
//! device memory to the host before numcodecs encodes them; zarr finds the classes through
//! the entry points the gpubuf wheel declares), with no change to zarr's tests and no
//! plugin.
//!
//! zarr's source distribution (pinned: version and sha256) is fetched once with pip into
//! `<target>/zarr-3.1.6/` and unpacked afresh on every run (its `tests/` and the
//! `pyproject.toml` that holds zarr's pytest settings: asyncio mode, warnings as errors).
//! The wheel goes into a fresh venv (`<target>/zarr-venv`, or the Python step's venv when
//! it holds this very wheel) with zarr's test-only dependencies [`TEST_PINS`]. pytest runs
//! [`FILES`] (buffers, the array API, arrays, indexing, codecs and v2 arrays) on `cpu` and,
//! side by side, on `opencl` when the wheel can open it, after a check that zarr's default
//! classes are gpubuf's in that environment.
//! The tests listed in [`EXPECTED`] (each with its reason), and on a device backend those
//! in [`EXPECTED_DEVICE`], are deselected and printed; every other failure counts.

use crate::pace::expected::{deselect_args, parse_expected_in};
use crate::python::{parse_summary, venv_with, without_rust, PyCounts, Report};
use crate::sdist::Sdist;
use crate::sh::{capture, run_ok, run_tee};
use crate::wheel::{self, root, target_dir};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The zarr-python release whose tests run (the version `cargo xtask python` installs).
pub const VERSION: &str = "3.1.6";

/// Its source distribution's file name, as pip downloads it.
pub const SDIST: &str = "zarr-3.1.6.tar.gz";

/// The sha256 of [`SDIST`] as published.
pub const SDIST_SHA256: &str = "d95e72cbea4b90e9a70679468b8266400331756232576ae2b43400ac5108d0eb";

/// zarr's test-only dependencies that the selected files need (its `test` dependency
/// group, less coverage, xdist, codspeed and the docs' tools): asyncio tests, and
/// pytest-benchmark because zarr's pytest settings pass its options.
pub const TEST_PINS: [&str; 3] = ["pytest-asyncio==1.5.0", "pytest-benchmark==5.3.1", "py-cpuinfo2==10.1.1"];

/// The test files and folders that run, relative to the sdist's `tests/`.
pub const FILES: [&str; 6] =
    ["test_buffer.py", "test_api.py", "test_array.py", "test_indexing.py", "test_codecs", "test_v2.py"];

/// The tests that cannot pass on a gpubuf buffer, `<id> | <reason>` a line.
pub const EXPECTED: &str = "crates/gpubuf-python/tests/zarr_expected.txt";

/// The tests that cannot pass on a device buffer (every backend but `cpu`), the same way.
pub const EXPECTED_DEVICE: &str = "crates/gpubuf-python/tests/zarr_expected_device.txt";

/// The entries of the expected-failures file `name`.
fn expected(name: &str) -> Result<Vec<crate::pace::expected::Expected>, String> {
    let text = std::fs::read_to_string(root().join(name)).map_err(|e| format!("{name}: {e}"))?;
    parse_expected_in(&text, name, &FILES)
}

/// pytest's `--deselect` arguments for `entries` (their ids under `tests/`).
fn deselect(entries: &[crate::pace::expected::Expected]) -> Vec<String> {
    deselect_args(entries)
        .into_iter()
        .map(|a| if a == "--deselect" { a } else { format!("tests/{a}") })
        .collect()
}

/// The pinned sdist ([`SDIST`], [`SDIST_SHA256`]).
const ZARR: Sdist = Sdist { project: "zarr", version: VERSION, file: SDIST, sha256: SDIST_SHA256 };

fn target() -> PathBuf {
    std::path::absolute(target_dir()).unwrap_or_else(|_| target_dir())
}

/// The environment variables that make gpubuf's classes on `backend` zarr's defaults.
fn swap_env(cmd: &mut Command, backend: &str) {
    let class = format!("{}{}", backend[..1].to_uppercase(), &backend[1..]);
    cmd.env("ZARR_BUFFER", format!("gpubuf.zarr.{class}Buffer"))
        .env("ZARR_NDBUFFER", format!("gpubuf.zarr.{class}NDBuffer"))
        .env("ZARR_CODEC_PIPELINE__PATH", "gpubuf.zarr_pipeline.CodecPipeline");
}

/// Runs the suite on `backend`: first a check that zarr's default classes are gpubuf's
/// there (one failure if not), then pytest over [`FILES`] less `deselect`.
fn run_on(backend: &str, python: &Path, venv: &Path, sdist: &Path, deselect: &[String]) -> PyCounts {
    let check = format!(
        "import zarr.registry as r; b, n = r.get_buffer_class(), r.get_ndbuffer_class(); \
         assert b.__module__ == n.__module__ == 'gpubuf.zarr', (b, n); \
         assert n.backend.name == '{backend}', n.backend; p = r.get_pipeline_class(); \
         assert p.__module__ == 'gpubuf.zarr_pipeline', p; \
         print('zarr {backend}: default classes', b.__name__, n.__name__, p.__name__)"
    );
    let mut probe = Command::new(python);
    probe.args(["-c", &check]).current_dir(sdist);
    swap_env(&mut probe, backend);
    if !run_ok(without_rust(&mut probe, venv)) {
        println!("zarr {backend}: FAILED (zarr's default classes are not gpubuf's)");
        return PyCounts { failed: 1, ..PyCounts::default() };
    }
    let mut cmd = Command::new(python);
    without_rust(&mut cmd, venv);
    swap_env(&mut cmd, backend);
    cmd.args(["-m", "pytest", "-q", "--color=no", "-rfE", "--tb=short", "-p", "no:cacheprovider"])
        .current_dir(sdist)
        .args(deselect)
        .args(FILES.iter().map(|f| format!("tests/{f}")));
    let (lines, ok) = run_tee(&mut cmd);
    let mut c = parse_summary(&lines).unwrap_or(PyCounts { failed: 1, ..PyCounts::default() });
    if !ok && c.failed == 0 {
        c.failed = 1;
    }
    c
}

/// Runs zarr's tests with gpubuf swapped in on `cpu`, and on `opencl` when the wheel can
/// open it (a failure when `require`, a comma-separated list as `GPUBUF_REQUIRE`, names
/// it and it cannot); in the Python step's venv with `reuse` ([`venv_with`]).
///
/// # Errors
/// A description of the step that failed before any test could run.
pub fn run(require: &str, reuse: bool) -> Result<Report, String> {
    let everywhere = expected(EXPECTED)?;
    let device = expected(EXPECTED_DEVICE)?;
    let t = Instant::now();
    let wheel = wheel::build()?;
    let (venv, python) = venv_with(&target().join("zarr-venv"), &wheel, reuse, &TEST_PINS)?;
    // The tests and the pyproject.toml that holds zarr's pytest settings.
    let sdist = ZARR.unpack(&python, &venv, &["tests", "pyproject.toml"])?;
    println!(
        "zarr: wheel, venv and sdist in {}s; zarr {VERSION}'s tests from {}",
        t.elapsed().as_secs(),
        sdist.display()
    );
    for (name, list) in [(EXPECTED, &everywhere), (EXPECTED_DEVICE, &device)] {
        println!("zarr: {} deselected ({name}):", list.len());
        for e in list {
            println!("zarr:   {} ({})", e.id, e.reason);
        }
    }
    let mut report = Report::default();
    let code = "import gpubuf; print(','.join(gpubuf.available_backends()))";
    let mut probe = Command::new(&python);
    probe.args(["-c", code]);
    let available = capture(without_rust(&mut probe, &venv)).unwrap_or_default();
    let mut backends = vec!["cpu"];
    if available.trim().split(',').any(|b| b == "opencl") {
        backends.push("opencl");
    } else if require.split(',').any(|b| b.trim() == "opencl") {
        report.total.failed += 1;
        report.lines.push("zarr opencl: FAILED (required, but the wheel cannot open it)".into());
    } else {
        report.lines.push("zarr opencl: skipped (the wheel cannot open it here)".into());
    }
    // The backends run side by side (each pytest mostly waits on one core), their output
    // interleaved; each one's counts come from its own closing line.
    let results: Vec<(&str, PyCounts, Duration)> = std::thread::scope(|scope| {
        let runs: Vec<_> = backends
            .iter()
            .map(|&backend| {
                let mut out = deselect(&everywhere);
                if backend != "cpu" {
                    out.extend(deselect(&device));
                }
                let (python, venv, sdist) = (&python, &venv, &sdist);
                scope.spawn(move || {
                    let t = Instant::now();
                    (backend, run_on(backend, python, venv, sdist, &out), t.elapsed())
                })
            })
            .collect();
        runs.into_iter()
            .map(|h| h.join().unwrap_or(("?", PyCounts { failed: 1, ..PyCounts::default() }, Duration::ZERO)))
            .collect()
    });
    for (backend, c, took) in results {
        report.add("zarr", backend, c, took);
    }
    Ok(report)
}

/// `cargo xtask zarr`: the run above (`GPUBUF_REQUIRE` from the environment) within a
/// limit of 30 minutes (`GPUBUF_STEP_LIMIT` replaces it); true when nothing failed.
pub fn command() -> bool {
    let require = std::env::var("GPUBUF_REQUIRE").unwrap_or_default();
    let limit = crate::sh::limit(Duration::from_secs(30 * 60));
    let (result, stopped) = crate::sh::step("zarr", limit, || run(&require, false));
    crate::python::report_command("zarr", result, stopped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_project_s_zarr_expected_failures_files_are_valid() {
        for name in [EXPECTED, EXPECTED_DEVICE] {
            let e = expected(name).unwrap();
            assert!(!e.is_empty() && e.iter().all(|e| e.reason.len() > 10), "{name}: {e:?}");
            assert!(deselect(&e).iter().skip(1).step_by(2).all(|a| a.starts_with("tests/test_")));
        }
    }

    #[test]
    fn the_swap_names_gpubuf_s_classes() {
        let mut cmd = Command::new("true");
        swap_env(&mut cmd, "opencl");
        let envs: Vec<_> = cmd.get_envs().map(|(k, v)| (k.to_owned(), v.map(|v| v.to_owned()))).collect();
        assert!(envs.contains(&("ZARR_BUFFER".into(), Some("gpubuf.zarr.OpenclBuffer".into()))));
        assert!(envs.contains(&("ZARR_NDBUFFER".into(), Some("gpubuf.zarr.OpenclNDBuffer".into()))));
        let pipeline = Some("gpubuf.zarr_pipeline.CodecPipeline".into());
        assert!(envs.contains(&("ZARR_CODEC_PIPELINE__PATH".into(), pipeline)));
    }
}
