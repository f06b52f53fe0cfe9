//! Miri over the CPU crates: `cargo +nightly miri test` for core, the CPU backend, buffers
//! and the pool (their own tests), and the CPU bodies of the shared buffer, backend and
//! interop suites.

use crate::sh::{run_tee, status_ok};
use crate::summary::{count, Tally};
use std::process::{Command, Stdio};

/// The runs: package arguments, then test-binary arguments.
///
/// The pool's own unit tests run here; its shared suites (`pool`, `pool_order`) are left to
/// the native runs: they carve multi-MiB segments, minutes per test under Miri.
const RUNS: &[(&[&str], &[&str])] = &[
    (&["-p", "gpubuf-core", "-p", "gpubuf-cpu", "-p", "gpubuf-buffer", "-p", "gpubuf-pool"], &[]),
    (&["-p", "gpubuf-testkit", "--test", "buffers", "--test", "backend"], &["::cpu"]),
    (&["-p", "gpubuf-testkit", "--test", "interop"], &[]),
];

fn miri_works() -> bool {
    status_ok(
        Command::new("cargo")
            .args(["+nightly", "miri", "--version"])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
}

/// Why Miri cannot run here, or `None` when it can (installing the component if a
/// nightly toolchain is present without it).
fn unavailable() -> Option<String> {
    if miri_works() {
        return None;
    }
    let nightly = Command::new("rustup")
        .args(["toolchain", "list"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().any(|l| l.starts_with("nightly")))
        .unwrap_or(false);
    if !nightly {
        return Some("no nightly toolchain".into());
    }
    let _ = status_ok(Command::new("rustup").args([
        "component",
        "add",
        "--toolchain",
        "nightly",
        "miri",
        "rust-src",
    ]));
    if miri_works() {
        None
    } else {
        Some("the nightly toolchain has no miri component and it could not be installed".into())
    }
}

/// Runs Miri when it is available; adds its results to `tally`.
pub fn run(tally: &mut Tally) {
    if let Some(reason) = unavailable() {
        tally.note(format!("miri: skipped ({reason})"));
        return;
    }
    let mut ran = 0;
    let failed_before = tally.failed;
    for (packages, filters) in RUNS {
        let mut cmd = Command::new("cargo");
        cmd.args(["+nightly", "miri", "test", "--no-fail-fast"]).args(*packages).arg("--").args(*filters);
        // Miri's own isolation stays on; proptest case counts shrink under cfg(miri).
        let (lines, ok) = run_tee(&mut cmd);
        let c = count(&lines);
        ran += c.passed;
        tally.tests("miri", &c, ok);
    }
    match tally.failed - failed_before {
        0 => tally.note(format!("miri: ran {ran} tests")),
        f => tally.note(format!("miri: ran {ran} tests, {f} FAILED")),
    }
}
