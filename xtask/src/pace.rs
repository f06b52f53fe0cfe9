//! `cargo xtask pace`: pace-util 0.9.0's own tests with gpubuf swapped in, with no change
//! to their code.
//!
//! pace-util's source distribution (pinned: version and sha256 of the file) is fetched once
//! with pip into `<target>/pace-util-0.9.0/` and downloaded again only when missing or when
//! its hash differs; its `tests/` folder is unpacked afresh on every run, so the tests that
//! run are always the published ones. The `gpubuf` wheel goes into a fresh venv
//! (`<target>/pace-venv`, made as `cargo xtask python` makes its own, or that step's venv
//! when it holds this very wheel) with pace-util's
//! test-only dependency [`TEST_PINS`]. Then pytest runs the halo-transformer, halo-update
//! and partitioner tests ([`FILES`]) with `-p gpubuf.pace_plugin`, which swaps gpubuf in
//! under pace-util for the whole session on the backend named by `GPUBUF_PACE_BACKEND`:
//! once on `cpu`, once on `opencl` when the wheel can open it; and pace-util's MPI halo
//! tests ([`MPI_FILES`]) under `mpirun -n` each of [`MPI_SIZES`] on each backend. The
//! tests listed in [`EXPECTED`] (each with its reason) are deselected and printed; every
//! other failure counts. `cargo xtask pace --baseline` runs the same selection without
//! gpubuf (a plugin that only lets pace-util 0.9.0 import under numpy 2), for comparison.
//! `cargo xtask test-all` runs the parts [`Scope::TestAll`] names (`cargo xtask pace
//! --test-all` runs just those); every part's line gives its wall time.

use crate::python::{parse_summary, venv_with, without_rust, PyCounts, Report};
use crate::sdist::Sdist;
use crate::sh::{capture, run_tee};
use crate::wheel::{self, root, target_dir};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub mod expected;
use expected::{deselect_args, parse_expected};

/// The pace-util release whose tests run.
pub const VERSION: &str = "0.9.0";

/// Its source distribution's file name, as pip downloads it.
pub const SDIST: &str = "pace-util-0.9.0.tar.gz";

/// The sha256 of [`SDIST`] as published.
pub const SDIST_SHA256: &str = "ec8a166c990b8940e53ba8a247788f031f9a18433e599713af31fb4e6f4ae653";

/// What pace-util's tests import beyond pace-util's own dependencies (pinned in
/// [`crate::python::ORACLE_PINS`]) and pytest: mpi4py for the MPI tests, a binary wheel
/// (about 4 MB) that opens the system's Open MPI (`cargo xtask install-deps`) at run time,
/// so nothing is compiled. pace-util declares no test dependencies; its tests' other
/// imports (gt4py, cupy) are optional there and skip their cases when absent. pytest 9's
/// built-in `subtests` fixture serves the halo-update tests.
pub const TEST_PINS: [&str; 1] = ["mpi4py==4.1.2"];

/// The single-process test files, relative to the sdist's `tests/`.
pub const FILES: [&str; 5] = [
    "test_halo_data_transformer.py",
    "test_halo_update.py",
    "test_halo_update_ranks.py",
    "test_partitioner.py",
    "test_partitioner_boundaries.py",
];

/// The MPI test files (each rank runs the same tests; they skip without `mpirun`).
pub const MPI_FILES: [&str; 1] = ["mpi/test_mpi_halo_update.py"];

/// The `mpirun -n` sizes. pace-util's MPI halo tests lay the ranks out as a cubed sphere,
/// `size / 6` ranks a tile in a square: 6 (one rank a tile) and 24 (2 x 2 a tile, so edges
/// between ranks of one tile are exchanged too). Other sizes (4 among them) fail in
/// pace-util's own fixtures ("a partitioner for 0 ranks").
pub const MPI_SIZES: [usize; 2] = [6, 24];

/// Which parts run: everything, or the subset `cargo xtask test-all` runs within its time
/// budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `cargo xtask pace`: [`FILES`] on each backend, and [`MPI_FILES`] under each of
    /// [`MPI_SIZES`] on each backend.
    All,
    /// `cargo xtask test-all`: [`FILES`] on each backend and [`MPI_FILES`] under
    /// `mpirun -n 6` on each backend; `-n 24` is left out, the slowest parts (24
    /// processes on the machine's cores: about 2 minutes on the CPU and 3.5 on OpenCL of
    /// the 10 all parts take on 2 cores), to keep within CI's time budget. What it adds over
    /// `-n 6` is several ranks to a tile, which the single-process `test_halo_update.py`
    /// runs too (a 3 x 3 layout a tile, pace's in-process communicator).
    TestAll,
}

impl Scope {
    /// The `mpirun -n` sizes that run on each backend.
    pub fn mpi_sizes(self) -> &'static [usize] {
        match self {
            Scope::All => &MPI_SIZES,
            Scope::TestAll => &MPI_SIZES[..1],
        }
    }
}

/// The tests that cannot pass with gpubuf swapped in, one a line with its reason.
pub const EXPECTED: &str = "crates/gpubuf-python/tests/pace_expected.txt";

/// The plugin that swaps gpubuf in (part of the wheel).
pub const PLUGIN: &str = "gpubuf.pace_plugin";

/// The baseline's plugin: pace-util 0.9.0 imports `numpy.lib.index_tricks`, which numpy 2
/// renamed; this maps the old name to the new module and does nothing else.
const BASELINE_PLUGIN: &str = "\"\"\"Lets pace-util 0.9.0 import under numpy 2; nothing else.\"\"\"
import sys

try:
    import numpy.lib.index_tricks  # noqa: F401
except ImportError:
    import numpy.lib._index_tricks_impl as tricks

    sys.modules.setdefault(\"numpy.lib.index_tricks\", tricks)
";

/// The check beside [`PLUGIN`]: once the session has started (after the plugin's own
/// start), pace-util's `HaloDataTransformer.get` must come from a gpubuf module, or the
/// session stops (no summary: a failure), so a plugin that swaps nothing cannot pass
/// pace-util's own numbers off as gpubuf's.
const SWAPPED_PLUGIN: &str = "\"\"\"Stops the session unless pace-util's transformers are gpubuf's.\"\"\"
import pytest


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    from pace.util.halo_data_transformer import HaloDataTransformer

    get = HaloDataTransformer.get
    where = f\"{getattr(get, '__module__', None)}.{getattr(get, '__qualname__', get)}\"
    if not where.startswith(\"gpubuf\"):
        pytest.exit(f\"gpubuf is not swapped in: HaloDataTransformer.get is {where}\", returncode=3)
";

/// The counts of one `mpirun` from each rank's closing line (`None`: a rank that printed
/// none), in rank order: rank 0's passed and skipped (every rank runs the same tests), the
/// most failures any rank reported, and one more failure for each rank without a closing
/// line or missing (`size` ranks expected).
pub fn combine_ranks(ranks: &[Option<PyCounts>], size: usize) -> PyCounts {
    let mut c = ranks.first().copied().flatten().unwrap_or_default();
    c.failed = ranks.iter().flatten().map(|r| r.failed).max().unwrap_or(0);
    c.failed += ranks.iter().filter(|r| r.is_none()).count() + size.saturating_sub(ranks.len());
    c
}

/// Each rank's closing line from an `mpirun --output-filename <dir>` (Open MPI writes
/// `<dir>/1/rank.<n>/stdout`, `<n>` zero-padded past 9 ranks), in rank order.
fn rank_summaries(dir: &Path) -> Vec<Option<PyCounts>> {
    let mut ranks: Vec<(usize, Option<PyCounts>)> = std::fs::read_dir(dir.join("1"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| {
            let n = e.file_name().to_str()?.strip_prefix("rank.")?.parse().ok()?;
            let out = std::fs::read_to_string(e.path().join("stdout")).unwrap_or_default();
            let lines: Vec<String> = out.lines().map(String::from).collect();
            Some((n, parse_summary(&lines)))
        })
        .collect();
    ranks.sort_by_key(|r| r.0);
    ranks.into_iter().map(|r| r.1).collect()
}

/// The target folder, absolute (the runs below happen in other folders, so a relative
/// `CARGO_TARGET_DIR` is taken from the folder xtask started in).
fn target() -> PathBuf {
    std::path::absolute(target_dir()).unwrap_or_else(|_| target_dir())
}

/// The pinned sdist ([`SDIST`], [`SDIST_SHA256`]).
const PACE: Sdist = Sdist { project: "pace-util", version: VERSION, file: SDIST, sha256: SDIST_SHA256 };

/// The sdist's cache folder, `<target>/pace-util-0.9.0`.
pub fn cache_dir() -> PathBuf {
    PACE.cache_dir()
}

/// How gpubuf is (or is not) swapped in for a run.
#[derive(Debug, Clone, Copy)]
enum Swap<'a> {
    /// `-p gpubuf.pace_plugin` with `GPUBUF_PACE_BACKEND` set to this backend, checked.
    Gpubuf(&'a str),
    /// pace-util alone (the baseline plugin).
    Baseline,
}

impl Swap<'_> {
    fn label(&self) -> &str {
        match self {
            Swap::Gpubuf(b) => b,
            Swap::Baseline => "baseline",
        }
    }
}

/// Where a run happens: the venv, its python, the sdist's tests, the deselections and the
/// folder of xtask's own plugins.
struct Setup {
    venv: PathBuf,
    python: PathBuf,
    tests: PathBuf,
    deselect: Vec<String>,
    plugins: PathBuf,
}

impl Setup {
    /// `cmd` (the venv's python, or `mpirun ... python`) completed to run pytest over
    /// `files` with `swap`, in the venv, from the tests folder.
    fn pytest(&self, mut cmd: Command, files: &[&str], swap: Swap<'_>) -> Command {
        without_rust(&mut cmd, &self.venv);
        cmd.args(["-m", "pytest", "-q", "--color=no", "-rfE", "--tb=short", "-p", "no:cacheprovider"])
            .arg("--rootdir")
            .arg(&self.tests)
            .current_dir(&self.tests)
            .env("PYTHONPATH", &self.plugins);
        match swap {
            Swap::Gpubuf(backend) => {
                cmd.args(["-p", PLUGIN, "-p", "pace_swapped"]).env("GPUBUF_PACE_BACKEND", backend);
            }
            Swap::Baseline => {
                cmd.args(["-p", "pace_numpy2"]).env_remove("GPUBUF_PACE_BACKEND");
            }
        }
        cmd.args(&self.deselect).args(files.iter().map(|f| self.tests.join(f)));
        cmd
    }

    /// The single-process files with `swap`.
    fn single(&self, swap: Swap<'_>) -> PyCounts {
        let mut cmd = self.pytest(Command::new(&self.python), &FILES, swap);
        let (lines, ok) = run_tee(&mut cmd);
        let mut c = parse_summary(&lines).unwrap_or(PyCounts { failed: 1, ..PyCounts::default() });
        if !ok && c.failed == 0 {
            c.failed = 1;
        }
        c
    }

    /// The MPI files with `swap` under `mpirun -n size`.
    fn mpi(&self, swap: Swap<'_>, size: usize) -> PyCounts {
        let out = cache_dir().join("mpi-out").join(format!("{}-n{size}", swap.label()));
        let _ = std::fs::remove_dir_all(&out);
        let mut mpirun = Command::new("mpirun");
        if crate::deps::is_root() {
            mpirun.arg("--allow-run-as-root");
        }
        mpirun.arg("--oversubscribe").arg("--output-filename").arg(&out).args(["-n", &size.to_string()]);
        mpirun.arg(&self.python);
        let mut cmd = self.pytest(mpirun, &MPI_FILES, swap);
        let (_, ok) = run_tee(&mut cmd);
        let mut c = combine_ranks(&rank_summaries(&out), size);
        if !ok && c.failed == 0 {
            c.failed = 1;
        }
        c
    }
}

/// Runs pace-util's tests in a fresh venv with the `gpubuf` wheel ([`wheel::build`]), on
/// `cpu` and on `opencl` when the wheel can open it (a failure when `require`, a
/// comma-separated list as `GPUBUF_REQUIRE`, names it and it cannot), or with `baseline`
/// without gpubuf; the parts `scope` names. Returns the counts and a line a part, each
/// with its wall time.
///
/// # Errors
/// A description of the step that failed before any test could run.
pub fn run(require: &str, baseline: bool, scope: Scope, reuse: bool) -> Result<Report, String> {
    let text = std::fs::read_to_string(root().join(EXPECTED)).map_err(|e| format!("{EXPECTED}: {e}"))?;
    let expected = parse_expected(&text)?;
    let t = Instant::now();
    let wheel = wheel::build()?;
    println!("pace: wheel in {}s", t.elapsed().as_secs());
    let t = Instant::now();
    let (venv, python) = venv_with(&target().join("pace-venv"), &wheel, reuse, &TEST_PINS)?;
    let tests = PACE.unpack(&python, &venv, &["tests"])?.join("tests");
    println!("pace: venv and sdist in {}s", t.elapsed().as_secs());
    println!("pace: pace-util {VERSION}'s tests from {}", tests.display());
    println!("pace: {} deselected ({EXPECTED}):", expected.len());
    for e in &expected {
        println!("pace:   {} ({})", e.id, e.reason);
    }
    let plugins = cache_dir().join("plugins");
    std::fs::create_dir_all(&plugins)
        .and_then(|()| std::fs::write(plugins.join("pace_numpy2.py"), BASELINE_PLUGIN))
        .and_then(|()| std::fs::write(plugins.join("pace_swapped.py"), SWAPPED_PLUGIN))
        .map_err(|e| format!("cannot write xtask's pytest plugins: {e}"))?;
    let setup = Setup { venv, python, tests, deselect: deselect_args(&expected), plugins };
    let mut report = Report::default();
    let swaps: Vec<Swap<'_>> = if baseline {
        vec![Swap::Baseline]
    } else {
        let code = "import gpubuf; print(','.join(gpubuf.available_backends()))";
        let mut probe = Command::new(&setup.python);
        probe.args(["-c", code]);
        let available = capture(without_rust(&mut probe, &setup.venv)).unwrap_or_default();
        let opencl = available.trim().split(',').any(|b| b == "opencl");
        let mut swaps = vec![Swap::Gpubuf("cpu")];
        if opencl {
            swaps.push(Swap::Gpubuf("opencl"));
        } else if require.split(',').any(|b| b.trim() == "opencl") {
            report.total.failed += 1;
            report.lines.push("pace opencl: FAILED (required, but the wheel cannot open it)".into());
        } else {
            report.lines.push("pace opencl: skipped (the wheel cannot open it here)".into());
        }
        swaps
    };
    // The single-process runs go side by side (each mostly waits on one core; their output
    // interleaves, each one's counts come from its own closing line), the MPI runs after
    // them one at a time (each uses every core).
    let singles: Vec<(PyCounts, Duration)> = std::thread::scope(|s| {
        let runs: Vec<_> = swaps
            .iter()
            .map(|&swap| {
                let setup = &setup;
                s.spawn(move || {
                    let t = Instant::now();
                    (setup.single(swap), t.elapsed())
                })
            })
            .collect();
        runs.into_iter()
            .map(|h| h.join().unwrap_or((PyCounts { failed: 1, ..PyCounts::default() }, Duration::ZERO)))
            .collect()
    });
    for (&swap, (c, took)) in swaps.iter().zip(singles) {
        report.add("pace", swap.label(), c, took);
    }
    for &swap in &swaps {
        for &size in scope.mpi_sizes() {
            let t = Instant::now();
            let c = setup.mpi(swap, size);
            report.add("pace", &format!("{} mpirun -n {size}", swap.label()), c, t.elapsed());
        }
    }
    Ok(report)
}

/// `cargo xtask pace [--baseline | --test-all]`: the run above (`GPUBUF_REQUIRE` from the
/// environment; `--test-all`: [`Scope::TestAll`], as `cargo xtask test-all` runs it),
/// within a limit of 60 minutes (`GPUBUF_STEP_LIMIT` replaces it); true when nothing failed.
pub fn command(baseline: bool, scope: Scope) -> bool {
    let require = std::env::var("GPUBUF_REQUIRE").unwrap_or_default();
    let limit = crate::sh::limit(Duration::from_secs(60 * 60));
    let (result, stopped) = crate::sh::step("pace", limit, || run(&require, baseline, scope, false));
    crate::python::report_command("pace", result, stopped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_all_leaves_out_only_24_ranks() {
        assert_eq!(Scope::All.mpi_sizes(), [6, 24]);
        assert_eq!(Scope::TestAll.mpi_sizes(), [6]);
    }

    #[test]
    fn a_report_adds_up_its_parts_each_with_its_time() {
        let mut r = Report::default();
        r.add("pace", "cpu", PyCounts { passed: 5, failed: 1, skipped: 2 }, Duration::from_millis(102_400));
        r.add(
            "pace",
            "cpu mpirun -n 6",
            PyCounts { passed: 3, failed: 0, skipped: 4 },
            Duration::from_secs(20),
        );
        assert_eq!(r.total, PyCounts { passed: 8, failed: 1, skipped: 6 });
        assert_eq!(
            r.lines,
            [
                "pace cpu: 5 passed, 1 failed, 2 skipped (102s)",
                "pace cpu mpirun -n 6: 3 passed, 0 failed, 4 skipped (20s)"
            ]
        );
    }

    #[test]
    fn an_mpi_run_counts_every_rank() {
        let c = |passed, failed| Some(PyCounts { passed, failed, skipped: 3 });
        assert_eq!(combine_ranks(&[c(5, 0), c(5, 0)], 2), PyCounts { passed: 5, failed: 0, skipped: 3 });
        // A failure on any rank counts, the most of any rank.
        assert_eq!(
            combine_ranks(&[c(5, 0), c(3, 2), c(4, 1)], 3),
            PyCounts { passed: 5, failed: 2, skipped: 3 }
        );
        // A rank without a closing line, and a rank missing altogether, each count.
        assert_eq!(combine_ranks(&[c(5, 0), None], 3), PyCounts { passed: 5, failed: 2, skipped: 3 });
        assert_eq!(combine_ranks(&[], 6), PyCounts { failed: 6, ..PyCounts::default() });
    }

    #[test]
    fn rank_outputs_are_read_in_rank_order() {
        let dir = std::env::temp_dir().join(format!("xtask-pace-ranks-{}", std::process::id()));
        for (rank, last) in [("rank.10", "1 failed, 2 passed in 0.1s"), ("rank.02", "9 passed in 0.1s")] {
            std::fs::create_dir_all(dir.join("1").join(rank)).unwrap();
            std::fs::write(dir.join("1").join(rank).join("stdout"), format!("....\n{last}\n")).unwrap();
        }
        std::fs::create_dir_all(dir.join("1").join("rank.3")).unwrap();
        let got = rank_summaries(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            got,
            [
                Some(PyCounts { passed: 9, ..PyCounts::default() }),
                None,
                Some(PyCounts { passed: 2, failed: 1, skipped: 0 })
            ]
        );
    }
}
