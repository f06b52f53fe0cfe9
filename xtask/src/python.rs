//! The Python part of `cargo xtask test-all` (and `cargo xtask python` alone): a virtual
//! environment under the target directory with pinned maturin, numpy and pytest from PyPI,
//! pace-util as the halo tests' oracle, zarr-python for `gpubuf.zarr`, hypothesis for the fuzz
//! tests, the `gpubuf` wheel built by maturin and installed there, then the pytest suite of
//! `crates/gpubuf-python/tests`, its fuzz tests (`tests/fuzz`) bounded by [`FUZZ_SECONDS`].

use crate::sh::{run_ok, run_tee};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The packages the suite needs, pinned (maturin builds the wheel; numpy and pytest run it).
pub const PIP_PINS: [&str; 3] = ["maturin==1.16.0", "numpy==2.4.6", "pytest==9.2.0"];

/// pace-util, the oracle `tests/test_halo.py` compares gpubuf's halo transformer with,
/// installed with `--no-deps` and pinned with exactly what `import pace.util` needs. Its
/// declared dependencies are these four and numpy; its `netcdf` and `zarr` extras (xarray,
/// pandas, scipy, zarr: tens of MB) are left out, as nothing on the path
/// `pace.util.halo_data_transformer` imports them. About 2 MB in all (cftime is the one
/// binary wheel, abi3). pace-util 0.9.0 imports `numpy.lib.index_tricks`, which numpy 2
/// renamed: the test maps the old name to the new module before importing it.
pub const ORACLE_PINS: [&str; 5] =
    ["pace-util==0.9.0", "cftime==1.6.6.1", "f90nml==1.5.0", "fsspec==2026.9.0", "typing-extensions==4.16.0"];

/// pyopencl, the baseline of `python -m gpubuf.bench pool` on OpenCL (its `MemoryPool` on
/// the same device), so the smoke test runs that path too: a 0.8 MB wheel with its own
/// OpenCL loader, and its dependencies but numpy and typing-extensions (pinned above),
/// installed with `--no-deps` like the oracle.
pub const BASELINE_PINS: [&str; 4] =
    ["pyopencl==2026.1.4", "pytools==2026.1.1", "platformdirs==4.14.7", "siphash24==1.9"];

/// zarr-python, which `gpubuf.zarr` implements the buffer prototype of (`tests/test_zarr.py`
/// writes real stores with it), with exactly what `import zarr` needs, installed with
/// `--no-deps` like the oracle: zarr's declared dependencies are these four, numpy,
/// packaging (pytest's) and typing-extensions (pinned above); donfig's is pyyaml. About
/// 10.5 MB in all, numcodecs's wheel (9.3 MB, its compressors built in) the bulk.
pub const ZARR_PINS: [&str; 5] =
    ["zarr==3.1.6", "numcodecs==0.16.6", "donfig==0.8.1.post1", "google-crc32c==1.9.0", "pyyaml==6.0.3"];

/// hypothesis, the engine of the fuzz tests in `crates/gpubuf-python/tests/fuzz` (random
/// keys, region writes, dtype views, DLPack and array-interface objects against numpy),
/// installed with `--no-deps` like the oracle with its one dependency pinned: about 1.2 MB.
/// This version needs Python 3.11 or later.
pub const FUZZ_PINS: [&str; 2] = ["hypothesis==6.170.15", "sortedcontainers==2.4.0"];

/// The fuzz tests' time budget in seconds when `GPUBUF_FUZZ_SECONDS` is not set: shared
/// among their properties (`tests/fuzz/conftest.py`), each stopping when its share is spent,
/// after its corpus and at least a few random examples.
pub const FUZZ_SECONDS: u32 = 60;

/// What the pytest run reported.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PyCounts {
    /// Tests that passed.
    pub passed: usize,
    /// Tests that failed, and tests that errored in setup or collection.
    pub failed: usize,
    /// Tests skipped (a backend that cannot run here and is not required).
    pub skipped: usize,
}

/// The workspace root (xtask lives one level below it).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The cargo target directory (`CARGO_TARGET_DIR` or `<root>/target`).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// Reads pytest's closing line (`3 failed, 58 passed, 2 skipped in 4.10s`, or past a
/// minute `in 84.92s (0:01:24)`, with or without the `=` rule around it); `None` when there
/// is none.
pub fn parse_summary(lines: &[String]) -> Option<PyCounts> {
    lines.iter().rev().find_map(|line| {
        let line = line.trim().trim_matches('=').trim();
        let (counts, time) = line.rsplit_once(" in ")?;
        // `4.10s`, or past a minute `84.92s (0:01:24)`.
        let time = time.split_once(" (").map_or(time, |(t, _)| t);
        if !time.trim_end().ends_with('s') {
            return None;
        }
        let mut c = PyCounts::default();
        let mut any = false;
        for part in counts.split(", ") {
            let (n, what) = part.trim().split_once(' ')?;
            let n: usize = n.parse().ok()?;
            match what {
                "passed" => c.passed += n,
                "failed" | "error" | "errors" => c.failed += n,
                "skipped" => c.skipped += n,
                // xfailed, xpassed, deselected, warnings: not counted.
                _ => {}
            }
            any = true;
        }
        any.then_some(c)
    })
}

/// Makes the virtual environment (once) with [`PIP_PINS`], [`ORACLE_PINS`],
/// [`BASELINE_PINS`], [`ZARR_PINS`] and [`FUZZ_PINS`] installed;
/// returns its python. A stamp file of the pins makes a second call install nothing.
fn venv(dir: &Path) -> Result<PathBuf, String> {
    let python = dir.join("bin").join("python");
    if !python.exists() {
        let host = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        if !run_ok(Command::new(&host).args(["-m", "venv"]).arg(dir)) {
            return Err(format!("`{host} -m venv {}` failed", dir.display()));
        }
    }
    let stamp = dir.join("gpubuf-pins.txt");
    let want = [&PIP_PINS[..], &ORACLE_PINS, &BASELINE_PINS, &ZARR_PINS, &FUZZ_PINS].concat().join("\n");
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(want.as_str()) {
        let pip = |extra: &[&str], pins: &[&str]| {
            let mut pip = Command::new(&python);
            pip.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
                .args(extra)
                .args(pins);
            if run_ok(&mut pip) {
                Ok(())
            } else {
                Err(format!("pip install {} failed", pins.join(" ")))
            }
        };
        pip(&[], &PIP_PINS)?;
        pip(&["--no-deps"], &[&ORACLE_PINS[..], &BASELINE_PINS, &ZARR_PINS, &FUZZ_PINS].concat())?;
        std::fs::write(&stamp, want).map_err(|e| format!("writing {}: {e}", stamp.display()))?;
    }
    Ok(python)
}

/// Builds the wheel (release) into `<target>/python-wheels` and installs it in the venv.
fn build_and_install(python: &Path, target: &Path) -> Result<(), String> {
    let wheels = target.join("python-wheels");
    // Only this build's wheel is left there to install.
    let _ = std::fs::remove_dir_all(&wheels);
    let mut build = Command::new(python);
    build
        .args(["-m", "maturin", "build", "--release", "--quiet", "-m"])
        .arg(root().join("crates/gpubuf-python/Cargo.toml"))
        .arg("--out")
        .arg(&wheels)
        .arg("--interpreter")
        .arg(python)
        .env("CARGO_TARGET_DIR", target);
    if !run_ok(&mut build) {
        return Err("maturin build failed".into());
    }
    let wheel = std::fs::read_dir(&wheels)
        .map_err(|e| format!("reading {}: {e}", wheels.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| format!("no wheel in {}", wheels.display()))?;
    let mut install = Command::new(python);
    install
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--force-reinstall",
            "--no-deps",
        ])
        .arg(&wheel);
    if !run_ok(&mut install) {
        return Err(format!("pip install {} failed", wheel.display()));
    }
    Ok(())
}

/// Runs the Python suite: venv, wheel, pytest with `GPUBUF_REQUIRE` set to `require` (a
/// comma-separated list of backends that must run, as for the Rust suites). Returns the
/// counts, or why no test could run (a failed venv, install, build, or no closing line).
/// A pytest that exits non-zero without reporting a failure is counted as one failure.
///
/// # Errors
/// A description of the step that failed before pytest reported.
pub fn run(require: &str) -> Result<PyCounts, String> {
    let target = target_dir();
    let python = venv(&target.join("python-venv"))?;
    build_and_install(&python, &target)?;
    let fuzz = std::env::var("GPUBUF_FUZZ_SECONDS").unwrap_or_else(|_| FUZZ_SECONDS.to_string());
    println!(
        "python: fuzz budget {fuzz} s (GPUBUF_FUZZ_SECONDS), corpus in crates/gpubuf-python/tests/fuzz/corpus"
    );
    let mut pytest = Command::new(&python);
    pytest
        .args(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"])
        .arg(root().join("crates/gpubuf-python/tests"))
        .env("GPUBUF_REQUIRE", require)
        .env("GPUBUF_FUZZ_SECONDS", &fuzz);
    let (lines, ok) = run_tee(&mut pytest);
    let mut counts = parse_summary(&lines).ok_or("pytest printed no summary line (no test ran)")?;
    if !ok && counts.failed == 0 {
        counts.failed = 1;
    }
    Ok(counts)
}

/// `cargo xtask python`: only the Python suite, with `GPUBUF_REQUIRE` taken from the
/// environment (empty: a backend that cannot run is skipped); true when nothing failed.
pub fn command() -> bool {
    match run(&std::env::var("GPUBUF_REQUIRE").unwrap_or_default()) {
        Ok(c) => {
            println!("python: {} passed, {} failed, {} skipped", c.passed, c.failed, c.skipped);
            c.failed == 0
        }
        Err(e) => {
            eprintln!("python: FAILED ({e})");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytest_summaries_are_read() {
        let l = |s: &str| vec!["x".to_string(), s.to_string()];
        assert_eq!(
            parse_summary(&l("===== 2 failed, 58 passed, 3 skipped, 1 warning in 4.10s =====")),
            Some(PyCounts { passed: 58, failed: 2, skipped: 3 })
        );
        assert_eq!(
            parse_summary(&l("61 passed in 0.50s")),
            Some(PyCounts { passed: 61, ..PyCounts::default() })
        );
        assert_eq!(parse_summary(&l("1 error in 0.1s")), Some(PyCounts { failed: 1, ..PyCounts::default() }));
        assert_eq!(
            parse_summary(&l("375 passed, 1 skipped in 84.92s (0:01:24)")),
            Some(PyCounts { passed: 375, skipped: 1, ..PyCounts::default() })
        );
        assert_eq!(parse_summary(&l("no tests ran in 0.01s")), None);
        assert_eq!(parse_summary(&l("tests/test_pool.py ....")), None);
    }
}
