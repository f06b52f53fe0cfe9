//! The Python part of `cargo xtask test-all` (and `cargo xtask python` alone): the
//! `gpubuf` wheel of `cargo xtask wheel` (built once, checked by auditwheel), installed in
//! a fresh virtual environment under the target directory whose `PATH` holds no Rust
//! toolchain, as a Python user installs it, with pinned numpy and pytest from PyPI,
//! pace-util as the halo tests' oracle, zarr-python for `gpubuf.zarr`, hypothesis for the
//! fuzz tests; then the pytest suite of `crates/gpubuf-python/tests`, its fuzz tests
//! (`tests/fuzz`) bounded by [`FUZZ_SECONDS`].

use crate::sh::{run_ok, run_tee};
use crate::wheel::{self, root, target_dir};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The packages the suite needs, pinned, installed with the wheel (numpy is its dependency;
/// pytest runs the suite).
pub const PIP_PINS: [&str; 2] = ["numpy==2.4.6", "pytest==9.2.0"];

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

/// mpi4py, the communicators `gpubuf.mpi` works over (`tests/mpi`): a binary wheel (about
/// 4 MB) that opens the system's Open MPI (`cargo xtask install-deps`) at run time.
pub const MPI_PINS: [&str; 1] = ["mpi4py==4.1.2"];

/// The `mpirun -n` sizes of `tests/mpi`: a 2x2 periodic tile, and a 2x3 tile and a cubed
/// sphere of one rank a face.
pub const MPI_SIZES: [usize; 2] = [4, 6];

/// The fuzz tests' time budget in seconds when `GPUBUF_FUZZ_SECONDS` is not set: shared
/// among their properties (`tests/fuzz/conftest.py`), each stopping when its share is spent,
/// after its corpus and at least a few random examples.
pub const FUZZ_SECONDS: u32 = 30;

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

/// The environment variables that lead a build to a Rust toolchain (cargo sets `CARGO`
/// and `RUSTC` for the programs it runs, `cargo xtask` among them): removed for the venv.
const RUST_VARS: [&str; 6] = ["CARGO", "RUSTC", "RUSTDOC", "RUSTUP_TOOLCHAIN", "RUSTUP_HOME", "CARGO_HOME"];

/// `path` (a `PATH` value) without the folders that hold `cargo`, `rustc` or `rustup`.
pub fn path_without_rust(path: &OsStr) -> OsString {
    let rust = |dir: &Path| ["cargo", "rustc", "rustup"].iter().any(|t| dir.join(t).exists());
    std::env::join_paths(std::env::split_paths(path).filter(|d| !rust(d))).unwrap_or_default()
}

/// `cmd` as in the activated venv `venv`, with no Rust toolchain on its `PATH`.
pub fn without_rust<'a>(cmd: &'a mut Command, venv: &Path) -> &'a mut Command {
    let path = path_without_rust(&std::env::var_os("PATH").unwrap_or_default());
    let path = std::env::join_paths(std::iter::once(venv.join("bin")).chain(std::env::split_paths(&path)))
        .unwrap_or(path);
    for v in RUST_VARS {
        cmd.env_remove(v);
    }
    cmd.env("PATH", path).env("VIRTUAL_ENV", venv)
}

/// Makes a fresh virtual environment at `dir` (the one left by the last run removed), with
/// no Rust toolchain on its `PATH`, and installs `wheel` there with [`PIP_PINS`] (binaries
/// only), then [`ORACLE_PINS`], [`BASELINE_PINS`], [`ZARR_PINS`] and [`FUZZ_PINS`]
/// (`--no-deps`); checks that the venv finds no `cargo` or `rustc` and imports `gpubuf`
/// from its own site-packages. Returns its python.
pub fn fresh_venv(dir: &Path, wheel: &Path) -> Result<PathBuf, String> {
    let _ = std::fs::remove_dir_all(dir);
    let host = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    // Found on this PATH: the folder of a Python installed next to cargo is left out below.
    let found = std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join(&host)).find(|f| f.is_file()));
    let host = found.filter(|_| !host.contains('/')).unwrap_or_else(|| PathBuf::from(&host));
    if !run_ok(without_rust(Command::new(&host).args(["-m", "venv"]).arg(dir), dir)) {
        return Err(format!("`{} -m venv {}` failed", host.display(), dir.display()));
    }
    let python = dir.join("bin").join("python");
    let pip = |extra: &[&str], pins: &[&str], wheel: Option<&Path>| {
        let mut pip = Command::new(&python);
        pip.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"]).args(extra);
        pip.args(wheel).args(pins);
        if run_ok(without_rust(&mut pip, dir)) {
            Ok(())
        } else {
            Err(format!("pip install {} failed", pins.join(" ")))
        }
    };
    // gpubuf's own dependency (numpy) resolved together with the pins.
    pip(&["--only-binary", ":all:"], &PIP_PINS, Some(wheel))?;
    pip(
        &["--no-deps"],
        &[&ORACLE_PINS[..], &BASELINE_PINS, &ZARR_PINS, &FUZZ_PINS, &MPI_PINS].concat(),
        None,
    )?;
    let check = "import shutil, sys, gpubuf; \
        tools = [t for t in ('cargo', 'rustc') if shutil.which(t)]; \
        assert not tools, f'{tools} on PATH'; \
        assert gpubuf.__file__.startswith(sys.prefix), gpubuf.__file__; \
        print('python: no cargo or rustc on PATH; gpubuf from', gpubuf.__file__)";
    let mut import = Command::new(&python);
    import.args(["-c", check]).current_dir(dir);
    if !run_ok(without_rust(&mut import, dir)) {
        return Err("the wheel's venv finds a Rust toolchain or no installed gpubuf".into());
    }
    Ok(python)
}

/// A venv with `wheel`, every pin of [`fresh_venv`] and `extra` (binary wheels, installed
/// without dependencies): with `reuse`, the Python step's own (`<target>/wheel-venv`, which
/// test-all has just made with the same wheel), so the later steps skip a venv of their
/// own; else (or when it is missing) a fresh one in `dir`. Returns the venv and its python.
///
/// # Errors
/// As [`fresh_venv`]; a failed install of `extra`.
pub fn venv_with(
    dir: &Path,
    wheel: &Path,
    reuse: bool,
    extra: &[&str],
) -> Result<(PathBuf, PathBuf), String> {
    let shared = std::path::absolute(target_dir()).unwrap_or_else(|_| target_dir()).join("wheel-venv");
    let (venv, python) = if reuse && shared.join("bin").join("python").is_file() {
        println!("python: reusing {} (test-all made it with this wheel)", shared.display());
        let python = shared.join("bin").join("python");
        (shared, python)
    } else {
        (dir.to_path_buf(), fresh_venv(dir, wheel)?)
    };
    let mut pip = Command::new(&python);
    pip.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"])
        .args(["--only-binary", ":all:"])
        .args(extra);
    if !extra.is_empty() && !run_ok(without_rust(&mut pip, &venv)) {
        return Err(format!("pip install {} failed", extra.join(" ")));
    }
    Ok((venv, python))
}

/// The totals of a peer project's suite (pace-util's, zarr's), and a line for each part.
#[derive(Debug, Default)]
pub struct Report {
    /// Every part added up.
    pub total: PyCounts,
    /// `<suite> <part>: N passed, M failed, K skipped (Ts)`, or why a part did not run.
    pub lines: Vec<String>,
}

impl Report {
    /// Adds the counts of `suite`'s `part`, which took `took`, and its line.
    pub fn add(&mut self, suite: &str, part: &str, c: PyCounts, took: std::time::Duration) {
        self.total.passed += c.passed;
        self.total.failed += c.failed;
        self.total.skipped += c.skipped;
        self.lines.push(format!(
            "{suite} {part}: {} passed, {} failed, {} skipped ({}s)",
            c.passed,
            c.failed,
            c.skipped,
            took.as_secs()
        ));
    }
}

/// Prints a peer suite's report (a line a part, then the totals, a step stopped at its
/// limit counted as one failure) or why it could not run; true when nothing failed.
pub fn report_command(name: &str, result: Result<Report, String>, stopped: Option<String>) -> bool {
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
            println!("{name}: {} passed, {failed} failed, {} skipped", r.total.passed, r.total.skipped);
            failed == 0
        }
        Err(e) => {
            eprintln!("{name}: FAILED ({e})");
            false
        }
    }
}

/// Runs the Python suite: the wheel built and checked ([`wheel::build`]), installed in a
/// fresh venv (`<target>/wheel-venv`) with no Rust toolchain on its `PATH`, then pytest
/// there with `GPUBUF_REQUIRE` set to `require` (a comma-separated list of backends that
/// must run, as for the Rust suites). Returns the counts, or why no test could run (a
/// failed build, check, venv or install, or no closing line). A pytest that exits non-zero
/// without reporting a failure is counted as one failure.
///
/// # Errors
/// A description of the step that failed before pytest reported.
pub fn run(require: &str) -> Result<PyCounts, String> {
    let wheel = wheel::build()?;
    let venv = target_dir().join("wheel-venv");
    let python = fresh_venv(&venv, &wheel)?;
    let fuzz = std::env::var("GPUBUF_FUZZ_SECONDS").unwrap_or_else(|_| FUZZ_SECONDS.to_string());
    println!(
        "python: fuzz budget {fuzz} s (GPUBUF_FUZZ_SECONDS), corpus in crates/gpubuf-python/tests/fuzz/corpus"
    );
    let tests = root().join("crates/gpubuf-python/tests");
    let mut pytest = Command::new(&python);
    pytest
        .args(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"])
        .arg(&tests)
        .arg("--ignore")
        .arg(tests.join("mpi"))
        .env("GPUBUF_REQUIRE", require)
        .env("GPUBUF_FUZZ_SECONDS", &fuzz);
    let (lines, ok) = run_tee(without_rust(&mut pytest, &venv));
    let mut counts = parse_summary(&lines).ok_or("pytest printed no summary line (no test ran)")?;
    if !ok && counts.failed == 0 {
        counts.failed = 1;
    }
    for size in MPI_SIZES {
        let c = mpi_pytest(&python, &venv, &tests.join("mpi"), size);
        println!(
            "python mpirun -n {size}: {} passed, {} failed, {} skipped (over the ranks)",
            c.passed, c.failed, c.skipped
        );
        counts.passed += c.passed;
        counts.failed += c.failed;
        counts.skipped += c.skipped;
    }
    Ok(counts)
}

/// pytest over `tests` under `mpirun -n size`, each rank's output in a folder of its own
/// (`--output-filename`); the counts of every rank added up, a rank without its closing
/// line one failure.
pub fn mpi_pytest(python: &Path, venv: &Path, tests: &Path, size: usize) -> PyCounts {
    let out = target_dir().join("python-mpi-out").join(format!("n{size}"));
    let _ = std::fs::remove_dir_all(&out);
    let mut cmd = crate::mpi::mpirun(&size.to_string());
    cmd.arg("--output-filename").arg(&out).arg(python);
    cmd.args(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--color", "no"]).arg(tests);
    let (_, ok) = run_tee(without_rust(&mut cmd, venv));
    let mut c = PyCounts::default();
    for rank in 0..size {
        let file = out.join("1").join(format!("rank.{rank}")).join("stdout");
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(String::from).collect();
        match parse_summary(&lines) {
            Some(r) => {
                c.passed += r.passed;
                c.failed += r.failed;
                c.skipped += r.skipped;
            }
            None => c.failed += 1,
        }
    }
    if !ok && c.failed == 0 {
        c.failed = 1;
    }
    c
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

    #[test]
    fn the_wheel_venv_path_holds_no_rust_toolchain() {
        let base = std::env::temp_dir().join(format!("xtask-path-{}", std::process::id()));
        let (rust, rustup, plain) = (base.join("cargo-bin"), base.join("toolchain"), base.join("bin"));
        for d in [&rust, &rustup, &plain] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(rust.join("cargo"), "").unwrap();
        std::fs::write(rustup.join("rustc"), "").unwrap();
        std::fs::write(plain.join("python3"), "").unwrap();
        let path = std::env::join_paths([&rust, &plain, &rustup, &plain]).unwrap();
        let kept: Vec<PathBuf> = std::env::split_paths(&path_without_rust(&path)).collect();
        let _ = std::fs::remove_dir_all(&base);
        assert_eq!(kept, [plain.clone(), plain]);
    }
}
