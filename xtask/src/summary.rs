//! The closing tally of `cargo xtask test-all`: every test and every step counts.

use std::collections::BTreeMap;

/// Passed and failed counts over tests and steps.
#[derive(Default)]
pub struct Tally {
    /// Tests (and steps) that passed.
    pub passed: usize,
    /// Tests and steps that failed.
    pub failed: usize,
    /// Lines for the summary, in order.
    pub lines: Vec<String>,
}

impl Tally {
    /// A step that either worked or did not (fmt, clippy, an example): one pass or one failure.
    pub fn step(&mut self, name: &str, ok: bool) {
        if ok {
            self.passed += 1;
            self.lines.push(format!("{name}: ok"));
        } else {
            self.failed += 1;
            self.lines.push(format!("{name}: FAILED"));
        }
    }

    /// A failure with its reason.
    pub fn fail(&mut self, line: String) {
        self.failed += 1;
        self.lines.push(line);
    }

    /// A line that changes no count.
    pub fn note(&mut self, line: String) {
        self.lines.push(line);
    }

    /// Adds a test run: its counted results (crashed binaries and the tests they never
    /// ran included, each crash named), and one failure more when the command failed
    /// without naming a failed test (a build error, a timeout).
    pub fn tests(&mut self, what: &str, counts: &Counts, exited_ok: bool) {
        self.passed += counts.passed;
        self.failed += counts.failed;
        for c in &counts.crashed {
            self.lines.push(format!("{what}: FAILED ({c})"));
        }
        if !exited_ok && counts.failed == 0 {
            self.failed += 1;
            self.lines.push(format!("{what}: FAILED (exited non-zero; no test reported a failure)"));
        }
    }
}

/// Results read from libtest output.
#[derive(Default)]
pub struct Counts {
    /// Passed tests per backend (`cpu`, `opencl`, `cuda`).
    pub per: BTreeMap<&'static str, usize>,
    /// Passed tests.
    pub passed: usize,
    /// Failed tests, and for each test binary that ended without its closing
    /// `test result:` line (a crash, or stopped at a time limit) the tests it never
    /// reported (at least one).
    pub failed: usize,
    /// Ignored tests.
    pub ignored: usize,
    /// One line per test binary that ended without its closing line.
    pub crashed: Vec<String>,
}

/// The first line in which a launcher (mpirun, cargo, a shell) reports that a process
/// died of a signal or aborted, if any.
pub fn crash_report(lines: &[String]) -> Option<&String> {
    const MARKS: [&str; 5] = [
        "exited on signal",
        "MPI_ABORT was invoked",
        "process didn't exit successfully",
        "Segmentation fault",
        "core dumped",
    ];
    lines.iter().find(|l| MARKS.iter().any(|m| l.contains(m)))
}

/// One test binary's part of cargo's output: from cargo's `Running <target> (<path>)` or
/// `Doc-tests <crate>` line to the next one.
#[derive(Default)]
struct Section {
    /// The target cargo named (empty when no `Running` line preceded the output).
    name: String,
    /// The count of libtest's `running N tests` line.
    expected: Option<usize>,
    /// Result lines seen.
    seen: usize,
    /// Whether libtest's `test result:` line was seen.
    closed: bool,
    /// Whether cargo said the process did not exit successfully.
    died: bool,
    /// Passed and failed result lines counted.
    passed: usize,
    failed: usize,
    /// The passed and failed counts of libtest's `test result:` line, when it has them.
    reported: Option<(usize, usize)>,
}

/// The `N passed` and `M failed` counts of a libtest `test result:` line's text.
fn reported(result: &str) -> Option<(usize, usize)> {
    let mut passed = None;
    let mut failed = None;
    for part in result.split([';', '.']).map(str::trim) {
        if let Some(n) = part.strip_suffix(" passed") {
            passed = n.trim().parse().ok();
        } else if let Some(n) = part.strip_suffix(" failed") {
            failed = n.trim().parse().ok();
        }
    }
    Some((passed?, failed?))
}

impl Section {
    /// Adds this section's crash, if it is one, to `c`, and the results its `test result:`
    /// line counts beyond the result lines read.
    fn finish(self, c: &mut Counts) {
        let name = if self.name.is_empty() { "a test binary".to_string() } else { self.name };
        match self.expected {
            Some(n) if !self.closed => {
                let unrun = n.saturating_sub(self.seen).max(1);
                c.failed += unrun;
                c.crashed.push(format!(
                    "{name} ended without its result line after {} of {n} tests: a crash or a stop; \
                     {unrun} counted as failed",
                    self.seen
                ));
            }
            None if self.died => {
                c.failed += 1;
                c.crashed.push(format!("{name} did not exit successfully before running any test"));
            }
            _ => {}
        }
        // Results whose line did not start a line of its own (another thread's output
        // landed between libtest's `test NAME ... ` and its result): the binary's own
        // summary has them.
        if let Some((passed, failed)) = self.reported {
            c.passed += passed.saturating_sub(self.passed);
            c.failed += failed.saturating_sub(self.failed);
        }
    }
}

/// Counts `test NAME ... ok` lines per backend: names ending in `::opencl` (or
/// `::opencl_blocks` / `::opencl_items`, a plan kernel shape forced) / `::cuda` are that
/// backend's; everything else (CPU bodies, unit, doc and cross-backend tests)
/// counts for the CPU.
///
/// A test binary whose output ends without libtest's `test result:` line (it crashed, or
/// was stopped) counts as failed: each of its tests that reported no result (at least
/// one). Sections are told apart by cargo's `Running` and `Doc-tests` lines (on stderr:
/// read with it merged, as [`crate::sh::run_tee`] does) and libtest's `running N tests`.
pub fn count(lines: &[String]) -> Counts {
    let mut c = Counts { per: BTreeMap::from([("cpu", 0), ("opencl", 0), ("cuda", 0)]), ..Counts::default() };
    let mut section = Section::default();
    for l in lines {
        let t = l.trim();
        if let Some(target) = t.strip_prefix("Running ").or_else(|| t.strip_prefix("Doc-tests ")) {
            std::mem::take(&mut section).finish(&mut c);
            section.name = target.to_string();
            continue;
        }
        if let Some(n) = t.strip_prefix("running ").and_then(|r| r.split_whitespace().next()) {
            if let Ok(n) = n.parse::<usize>() {
                if section.expected.is_some() {
                    std::mem::take(&mut section).finish(&mut c);
                }
                section.expected = Some(n);
                continue;
            }
        }
        if let Some(result) = t.strip_prefix("test result: ") {
            section.closed = true;
            section.reported = reported(result);
            continue;
        }
        // Cargo's word that this binary failed; with no `running N tests` before it, the
        // binary (or the runner cargo gave it, as under Miri) died before any test.
        if t.contains("process didn't exit successfully")
            || t.starts_with("error: test failed, to rerun pass")
        {
            section.died = true;
        }
        let Some(rest) = l.strip_prefix("test ") else { continue };
        let Some((name, result)) = rest.rsplit_once(" ... ") else { continue };
        section.seen += 1;
        match result.trim() {
            "ok" => {
                c.passed += 1;
                section.passed += 1;
                let opencl = ["::opencl", "::opencl_blocks", "::opencl_items"];
                let key = if opencl.iter().any(|s| name.ends_with(s)) {
                    "opencl"
                } else if name.ends_with("::cuda") {
                    "cuda"
                } else {
                    "cpu"
                };
                *c.per.entry(key).or_default() += 1;
            }
            r if r.starts_with("FAILED") => {
                c.failed += 1;
                section.failed += 1;
            }
            r if r.starts_with("ignored") => c.ignored += 1,
            _ => section.seen -= 1,
        }
    }
    section.finish(&mut c);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_step_is_counted() {
        let mut t = Tally::default();
        t.step("fmt", false);
        let c = count(&["test a::cpu ... ok".into(), "test b::opencl ... FAILED".into()]);
        t.tests("cargo test", &c, false);
        t.tests("build", &Counts::default(), false);
        assert_eq!((t.passed, t.failed), (1, 3));
        assert_eq!(c.per["opencl"], 0);
    }

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(String::from).collect()
    }

    #[test]
    fn a_crashed_binary_counts_when_another_test_failed_too() {
        let out = lines(
            "     Running unittests src/lib.rs (target/debug/deps/a-1)\n\
             running 2 tests\n\
             test a::x ... ok\n\
             test a::y ... FAILED\n\
             test result: FAILED. 1 passed; 1 failed; 0 ignored\n\
             error: test failed, to rerun pass `-p a --lib`\n\
             \x20    Running tests/b.rs (target/debug/deps/b-2)\n\
             running 5 tests\n\
             test b::one ... ok\n\
             error: test failed, to rerun pass `-p a --test b`\n\
             Caused by:\n\
             \x20 process didn't exit successfully: `target/debug/deps/b-2` (signal: 11, SIGSEGV: invalid memory reference)\n\
             \x20   Doc-tests a\n\
             running 1 test\n\
             test src/lib.rs - f (line 3) ... ok\n\
             test result: ok. 1 passed; 0 failed",
        );
        let c = count(&out);
        assert_eq!((c.passed, c.failed), (3, 1 + 4));
        assert_eq!(c.crashed.len(), 1);
        assert!(c.crashed[0].starts_with("tests/b.rs (target/debug/deps/b-2) ended"), "{}", c.crashed[0]);
        let mut t = Tally::default();
        t.tests("cargo test", &c, false);
        assert_eq!(t.failed, 5);
        assert!(t.lines[0].contains("after 1 of 5 tests"), "{:?}", t.lines);
    }

    #[test]
    fn a_binary_dying_before_its_tests_and_one_cut_at_the_end_count() {
        let c = count(&lines(
            "Running tests/z.rs (z)\nCaused by: process didn't exit successfully: `z` (exit status: 127)\n\
             Running tests/w.rs (w)\nrunning 3 tests\ntest w::a ... ok\ntest w::b ... ok\ntest w::c ... ok",
        ));
        assert_eq!((c.passed, c.failed, c.crashed.len()), (3, 2, 2));
        // A runner that failed before the binary printed anything (cargo-miri's panic):
        // cargo's `error: test failed` line alone marks it.
        let c = count(&lines(
            "Running unittests src/lib.rs (m-1)\nthread 'main' panicked at cargo-miri/src/util.rs\n\
             error: test failed, to rerun pass `-p m --lib`\nRunning tests/n.rs (n-2)\nrunning 1 test\n\
             test n ... FAILED\ntest result: FAILED. 0 passed; 1 failed\nerror: test failed, to rerun pass `-p m --test n`",
        ));
        assert_eq!((c.failed, c.crashed.len()), (2, 1));
        assert!(c.crashed[0].starts_with("unittests src/lib.rs (m-1) did not exit"), "{:?}", c.crashed);
        // Complete runs count nothing extra, with or without cargo's lines.
        let c = count(&lines(
            "running 1 test\ntest q ... ok\ntest result: ok.\nrunning 0 tests\ntest result: ok.",
        ));
        assert_eq!((c.passed, c.failed), (1, 0));
        assert!(c.crashed.is_empty());
    }

    #[test]
    fn a_real_crash_is_counted() {
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", "echo 'running 4 tests'; echo 'test t::a ... FAILED'; kill -SEGV $$"]);
        let (out, ok) = crate::sh::run_tee(&mut cmd);
        let c = count(&out);
        assert!(!ok);
        assert_eq!((c.passed, c.failed), (0, 4));
    }

    #[test]
    fn results_split_by_other_output_count_from_the_summary_line() {
        // A skip message from another thread between libtest's `test NAME ... ` and its
        // result: neither line is a result line, the binary's summary still counts both.
        let c = count(&lines(
            "running 3 tests\n\
             test a::x ... ok\n\
             test a::y ... cuda skipped: no driver\n\
             ok\n\
             test a::z ... opencl skipped: no device\n\
             FAILED\n\
             test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s",
        ));
        assert_eq!((c.passed, c.failed), (2, 1));
        assert!(c.crashed.is_empty());
        assert_eq!(reported("ok. 22 passed; 0 failed; 1 ignored; finished in 0.45s"), Some((22, 0)));
        assert_eq!(reported("ok."), None);
    }

    #[test]
    fn forced_opencl_shapes_count_for_opencl() {
        let lines: Vec<String> = ["a::opencl", "a::opencl_blocks", "a::opencl_items", "a::cpu", "opencl_x"]
            .iter()
            .map(|n| format!("test {n} ... ok"))
            .collect();
        let c = count(&lines);
        assert_eq!((c.per["opencl"], c.per["cpu"]), (3, 2));
    }
}
