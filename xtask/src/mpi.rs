//! The MPI part of `cargo xtask test-all`: the halo tests under `mpirun -n 4` and `-n 6`,
//! the shared-window link checks under `mpirun -n 4`, the demo's checksum with 1 and 4
//! ranks, and a quick `gpubuf bench mpi` on 6 ranks.

use crate::artifacts::build_executable;
use crate::sh::run_tee;
use crate::summary::Tally;
use std::process::Command;

/// `mpirun --oversubscribe -n <n>` (with `--allow-run-as-root` as root).
pub fn mpirun(n: &str) -> Command {
    let mut cmd = Command::new("mpirun");
    if crate::deps::is_root() {
        cmd.arg("--allow-run-as-root");
    }
    cmd.args(["--oversubscribe", "-n", n]);
    cmd
}

/// Seconds an MPI test run may take (`mpirun --timeout`): the halo tests take well under
/// a minute, so a run still going after this hangs (a rank waiting for one that gave up),
/// and is stopped and counted as a failure instead of holding the step to its limit.
const TEST_TIMEOUT_S: &str = "300";

/// Reads the `N passed, M failed` line rank 0 printed.
fn summary(lines: &[String]) -> Option<(usize, usize)> {
    lines.iter().rev().find_map(|l| {
        let (p, rest) = l.split_once(" passed, ")?;
        let f = rest.strip_suffix(" failed")?;
        Some((p.trim().parse::<usize>().ok()?, f.trim().parse::<usize>().ok()?))
    })
}

/// Builds and runs the MPI tests and the MPI demo; adds everything to `tally`.
pub fn run(tally: &mut Tally) {
    let exe = build_executable(&["test", "--no-run", "-p", "gpubuf-mpi", "--test", "mpi_halo"], "mpi_halo");
    match exe {
        None => tally.fail("mpi: FAILED (building the MPI tests failed)".into()),
        Some(exe) => {
            let (mut passed, mut failed) = (0, 0);
            // The cube once more with the datatype path off at creation: vector messages
            // across rotated edges are then negated by their sender, not their receiver.
            for (n, env) in [("4", None), ("6", None), ("6", Some("GPUBUF_MPI_DATATYPES=0"))] {
                let mut cmd = mpirun(n);
                cmd.args(["--timeout", TEST_TIMEOUT_S]);
                if let Some(env) = env {
                    cmd.args(["-x", env]);
                }
                let (lines, ok) = run_tee(cmd.arg(&exe));
                // A rank that crashed counts even when other tests failed too.
                let crash = crate::summary::crash_report(&lines);
                if let Some(c) = crash {
                    tally.note(format!("mpi: FAILED (mpirun -n {n} {}: {})", env.unwrap_or(""), c.trim()));
                }
                match summary(&lines) {
                    Some((p, f)) => {
                        passed += p;
                        failed += f;
                        if !ok && (f == 0 || crash.is_some()) {
                            failed += 1;
                        }
                    }
                    None => {
                        failed += 1;
                        tally.note(format!(
                            "mpi: FAILED (mpirun -n {n}{}: no summary; a run that hangs is stopped after \
                             {TEST_TIMEOUT_S} s)",
                            env.map(|e| format!(" -x {e}")).unwrap_or_default()
                        ));
                    }
                }
            }
            tally.passed += passed;
            tally.failed += failed;
            tally.note(format!(
                "mpi: mpirun -n 4, -n 6 and -n 6 with datatypes off ran, {passed} passed, {failed} failed"
            ));
        }
    }
    window(tally);
    demo(tally);
}

/// The shared-window tests (`mpi_window`, a libtest binary: every rank runs every test and
/// exits non-zero on a failure) under `mpirun -n 4`: one step.
fn window(tally: &mut Tally) {
    let Some(exe) =
        build_executable(&["test", "--no-run", "-p", "gpubuf-mpi", "--test", "mpi_window"], "mpi_window")
    else {
        tally.fail("mpi window: FAILED (building the tests failed)".into());
        return;
    };
    let mut cmd = mpirun("4");
    cmd.args(["--timeout", TEST_TIMEOUT_S]);
    let (lines, ok) = run_tee(cmd.arg(&exe).args(["--test-threads=1", "--color", "never"]));
    // Every rank's libtest ends with `test result: ok. 1 passed; 0 failed; ...`, but the
    // ranks' output interleaves, and libtest writes `ok` and the counts in two pieces that
    // another rank's output can split: count the pieces with the counts.
    let ran = lines.concat().matches(" passed; 0 failed;").count();
    if ok && ran == 4 {
        tally.passed += 1;
        tally.note("mpi window: mpirun -n 4, every rank passed".into());
    } else {
        tally.fail(format!("mpi window: FAILED ({ran} of 4 ranks passed)"));
    }
}

/// The demo: the same checksum with 1 and 4 ranks; then the benchmark's smoke run.
fn demo(tally: &mut Tally) {
    let Some(bin) = build_executable(&["build", "-p", "gpubuf-cli", "--features", "mpi"], "gpubuf") else {
        tally.fail("demo: FAILED (building the demo with MPI failed)".into());
        return;
    };
    bench(tally, &bin);
    let checksum = |n: &str| -> Option<String> {
        let out = std::env::temp_dir().join(format!("gpubuf-demo-{n}.png"));
        let mut cmd = mpirun(n);
        cmd.arg(&bin).args(["demo", "--size", "64", "--steps", "40", "--out"]).arg(&out);
        let (lines, ok) = run_tee(&mut cmd);
        ok.then(|| lines.iter().find_map(|l| l.strip_prefix("checksum ").map(String::from))).flatten()
    };
    match (checksum("1"), checksum("4")) {
        (Some(a), Some(b)) if a == b => {
            tally.passed += 1;
            tally.note(format!("demo: 1 rank and 4 ranks agree ({a})"));
        }
        (a, b) => {
            tally.fail(format!("demo: FAILED (checksums differ or missing: 1 rank {a:?}, 4 ranks {b:?})"))
        }
    }
}

/// The entries `gpubuf bench mpi` reports per case and kind, each against the raw exchange.
const BENCH_WAYS: [&str; 5] = ["update", "window", "messages", "packed", "floor"];

/// `gpubuf bench mpi --quick` on 6 ranks: every case, kind and way reported with a
/// positive time and ratio.
fn bench(tally: &mut Tally, bin: &std::path::Path) {
    let mut cmd = mpirun("6");
    cmd.arg(bin).args(["bench", "mpi", "--backend", "cpu", "--quick", "--reps", "3", "--json"]);
    let (lines, ok) = run_tee(&mut cmd);
    let missing = bench_missing(&lines);
    if ok && missing.is_empty() {
        tally.passed += 1;
        tally.note("mpi bench: mpirun -n 6 gpubuf bench mpi --quick reported every way".into());
    } else {
        tally.fail(format!("mpi bench: FAILED (exit ok: {ok}; missing or not positive: {missing:?})"));
    }
}

/// The entries of a `gpubuf bench mpi` JSON report (the last line that parses) that are
/// missing, or whose value or ratio is not a positive number.
fn bench_missing(lines: &[String]) -> Vec<String> {
    let report = lines.iter().rev().find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok());
    let results = report.as_ref().and_then(|r| r["results"].as_array()).cloned().unwrap_or_default();
    let positive = |v: &serde_json::Value| v.as_f64().is_some_and(|x| x > 0.0 && x.is_finite());
    let mut missing = Vec::new();
    for case in ["c48", "c96"] {
        for kind in ["scalar", "vector"] {
            for way in BENCH_WAYS {
                let name = format!("{case}/{kind}_{way}_us");
                let found = results.iter().find(|e| e["name"] == name.as_str());
                if !found.is_some_and(|e| positive(&e["value"]) && positive(&e["ratio"])) {
                    missing.push(name);
                }
            }
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(names: &[&str]) -> Vec<String> {
        let entries: Vec<String> = names
            .iter()
            .map(|n| format!(r#"{{"name":"{n}","value":5.0,"unit":"us","baseline":2.0,"ratio":2.5}}"#))
            .collect();
        vec!["progress".into(), format!(r#"{{"bench":"mpi","results":[{}]}}"#, entries.join(","))]
    }

    #[test]
    fn every_way_of_every_case_is_required() {
        let mut all = Vec::new();
        for case in ["c48", "c96"] {
            for kind in ["scalar", "vector"] {
                for way in BENCH_WAYS {
                    all.push(format!("{case}/{kind}_{way}_us"));
                }
            }
        }
        let names: Vec<&str> = all.iter().map(String::as_str).collect();
        assert!(bench_missing(&report(&names)).is_empty());
        assert_eq!(bench_missing(&report(&names[1..])), vec!["c48/scalar_update_us".to_string()]);
        assert_eq!(bench_missing(&["no report".into()]).len(), all.len());
        let last = report(&names).pop().unwrap_or_default();
        let zero = last.replacen("\"value\":5.0", "\"value\":0.0", 1);
        assert_eq!(bench_missing(&[zero]), vec!["c48/scalar_update_us".to_string()]);
    }
}
