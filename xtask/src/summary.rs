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

    /// Adds a test run: its counted results, and one failure more when the command failed
    /// without naming a failed test (a build error, a crash, a timeout).
    pub fn tests(&mut self, what: &str, counts: &Counts, exited_ok: bool) {
        self.passed += counts.passed;
        self.failed += counts.failed;
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
    /// Failed tests.
    pub failed: usize,
    /// Ignored tests.
    pub ignored: usize,
}

/// Counts `test NAME ... ok` lines per backend: names ending in `::opencl` (or
/// `::opencl_blocks` / `::opencl_items`, a plan kernel shape forced) / `::cuda` are that
/// backend's; everything else (CPU bodies, unit, doc and cross-backend tests)
/// counts for the CPU.
pub fn count(lines: &[String]) -> Counts {
    let mut c = Counts { per: BTreeMap::from([("cpu", 0), ("opencl", 0), ("cuda", 0)]), ..Counts::default() };
    for l in lines {
        let Some(rest) = l.strip_prefix("test ") else { continue };
        let Some((name, result)) = rest.rsplit_once(" ... ") else { continue };
        match result.trim() {
            "ok" => {
                c.passed += 1;
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
            r if r.starts_with("FAILED") => c.failed += 1,
            r if r.starts_with("ignored") => c.ignored += 1,
            _ => {}
        }
    }
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
