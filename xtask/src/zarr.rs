//! `cargo xtask zarr`: zarr-python 3.1.6's own tests with gpubuf's classes as zarr's
//! default buffer and ndbuffer, as a zarr user swaps them: by configuration alone
//! (`ZARR_BUFFER=gpubuf.zarr.CpuBuffer`, `ZARR_NDBUFFER=gpubuf.zarr.CpuNDBuffer`; zarr
//! finds the classes through the entry points the gpubuf wheel declares), with no change
//! to zarr's tests and no plugin.
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
use crate::pace::sha256;
use crate::python::{parse_summary, venv_with, without_rust, PyCounts};
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

fn target() -> PathBuf {
    std::path::absolute(target_dir()).unwrap_or_else(|_| target_dir())
}

/// The sdist's cache folder, `<target>/zarr-3.1.6`.
fn cache_dir() -> PathBuf {
    target().join(format!("zarr-{VERSION}"))
}

/// The sdist in the cache (downloaded when missing or of another hash), its `tests/` and
/// `pyproject.toml` unpacked afresh; returns the unpacked root.
fn sdist_root(python: &Path, venv: &Path) -> Result<PathBuf, String> {
    let dir = cache_dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let archive = dir.join(SDIST);
    if archive.is_file() && sha256(python, &archive).as_deref() != Some(SDIST_SHA256) {
        println!("zarr: {} has another hash: downloading it again", archive.display());
        let _ = std::fs::remove_file(&archive);
    }
    if !archive.is_file() {
        let mut pip = Command::new(python);
        pip.args(["-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"])
            .args(["--no-binary", ":all:", "-d"])
            .arg(&dir)
            .arg(format!("zarr=={VERSION}"));
        if !run_ok(without_rust(&mut pip, venv)) {
            return Err(format!("pip download zarr=={VERSION} failed"));
        }
    }
    match sha256(python, &archive) {
        Some(h) if h == SDIST_SHA256 => {}
        got => {
            let _ = std::fs::remove_file(&archive);
            return Err(format!("{SDIST}: sha256 {got:?}, pinned {SDIST_SHA256}"));
        }
    }
    let unpacked = dir.join(format!("zarr-{VERSION}"));
    let _ = std::fs::remove_dir_all(&unpacked);
    let parts = [format!("zarr-{VERSION}/tests"), format!("zarr-{VERSION}/pyproject.toml")];
    if !run_ok(Command::new("tar").arg("-xzf").arg(&archive).arg("-C").arg(&dir).args(&parts)) {
        return Err(format!("unpacking {} from {} failed", parts.join(", "), archive.display()));
    }
    Ok(unpacked)
}

/// The environment variables that make gpubuf's classes on `backend` zarr's defaults.
fn swap_env(cmd: &mut Command, backend: &str) {
    let class = format!("{}{}", backend[..1].to_uppercase(), &backend[1..]);
    cmd.env("ZARR_BUFFER", format!("gpubuf.zarr.{class}Buffer"))
        .env("ZARR_NDBUFFER", format!("gpubuf.zarr.{class}NDBuffer"));
}

/// Runs the suite on `backend`: first a check that zarr's default classes are gpubuf's
/// there (one failure if not), then pytest over [`FILES`] less `deselect`.
fn run_on(backend: &str, python: &Path, venv: &Path, sdist: &Path, deselect: &[String]) -> PyCounts {
    let check = format!(
        "import zarr.registry as r; b, n = r.get_buffer_class(), r.get_ndbuffer_class(); \
         assert b.__module__ == n.__module__ == 'gpubuf.zarr', (b, n); \
         assert n.backend.name == '{backend}', n.backend; print('zarr {backend}: default classes', b.__name__, n.__name__)"
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

/// The totals of a run, and a line for each backend.
#[derive(Debug, Default)]
pub struct Report {
    /// Every backend added up.
    pub total: PyCounts,
    /// `zarr <backend>: N passed, M failed, K skipped (Ts)`, or why it did not run.
    pub lines: Vec<String>,
}

impl Report {
    fn add(&mut self, part: &str, c: PyCounts, took: Duration) {
        self.total.passed += c.passed;
        self.total.failed += c.failed;
        self.total.skipped += c.skipped;
        self.lines.push(format!(
            "zarr {part}: {} passed, {} failed, {} skipped ({}s)",
            c.passed,
            c.failed,
            c.skipped,
            took.as_secs()
        ));
    }
}

/// Runs zarr's tests with gpubuf swapped in on `cpu`, and on `opencl` when the wheel can
/// open it (a failure when `require`, a comma-separated list as `GPUBUF_REQUIRE`, names
/// it and it cannot).
///
/// # Errors
/// A description of the step that failed before any test could run.
pub fn run(require: &str) -> Result<Report, String> {
    let everywhere = expected(EXPECTED)?;
    let device = expected(EXPECTED_DEVICE)?;
    let t = Instant::now();
    let wheel = wheel::build()?;
    let (venv, python) = venv_with(&target().join("zarr-venv"), &wheel)?;
    let mut pip = Command::new(&python);
    pip.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"])
        .args(["--only-binary", ":all:"])
        .args(TEST_PINS);
    if !run_ok(without_rust(&mut pip, &venv)) {
        return Err(format!("pip install {} failed", TEST_PINS.join(" ")));
    }
    let sdist = sdist_root(&python, &venv)?;
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
        report.add(backend, c, took);
    }
    Ok(report)
}

/// `cargo xtask zarr`: the run above (`GPUBUF_REQUIRE` from the environment) within a
/// limit of 30 minutes (`GPUBUF_STEP_LIMIT` replaces it); true when nothing failed.
pub fn command() -> bool {
    let require = std::env::var("GPUBUF_REQUIRE").unwrap_or_default();
    let limit = crate::sh::limit(Duration::from_secs(30 * 60));
    let (result, stopped) = crate::sh::step("zarr", limit, || run(&require));
    match result {
        Ok(r) => {
            println!();
            for l in &r.lines {
                println!("{l}");
            }
            let mut failed = r.total.failed;
            if let Some(s) = stopped {
                println!("{s}");
                failed += 1;
            }
            println!("zarr: {} passed, {failed} failed, {} skipped", r.total.passed, r.total.skipped);
            failed == 0
        }
        Err(e) => {
            eprintln!("zarr: FAILED ({e})");
            false
        }
    }
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
    }
}
