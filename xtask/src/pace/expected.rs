//! pace-util's tests that cannot pass with gpubuf swapped in: the file [`EXPECTED`] that
//! lists them, each with its reason, and pytest's arguments that deselect them.

use super::{EXPECTED, FILES, MPI_FILES};

/// One test that is deselected, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// A pytest node id relative to the sdist's `tests/`, or the start of some (pytest's
    /// `--deselect` takes every test whose id starts with it: a function without `[...]`
    /// stands for all its parameters).
    pub id: String,
    /// Why it cannot pass.
    pub reason: String,
}

/// Reads the expected-failures file: `<id> | <reason>` a line; blank lines and lines
/// starting with `#` are skipped. An id must name one of [`FILES`] or [`MPI_FILES`], then
/// `::` and a test, without spaces; a reason must be given; an id may appear once.
///
/// # Errors
/// The first bad line, by number.
pub fn parse_expected(text: &str) -> Result<Vec<Expected>, String> {
    let files: Vec<&str> = FILES.iter().chain(&MPI_FILES).copied().collect();
    parse_expected_in(text, EXPECTED, &files)
}

/// Reads an expected-failures file `name` as [`parse_expected`] does, for a suite that runs
/// `files` (files, or folders whose files all run), relative to its `tests/`.
///
/// # Errors
/// The first bad line, by number.
pub fn parse_expected_in(text: &str, name: &str, files: &[&str]) -> Result<Vec<Expected>, String> {
    let runs = |file: &str| {
        files.iter().any(|f| {
            file == *f || (!f.ends_with(".py") && file.strip_prefix(f).is_some_and(|r| r.starts_with('/')))
        })
    };
    let mut out: Vec<Expected> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |why: &str| format!("{name} line {}: {why}: `{line}`", i + 1);
        let (id, reason) = line.split_once(" | ").ok_or_else(|| bad("not `<id> | <reason>`"))?;
        let (id, reason) = (id.trim(), reason.trim());
        let (file, test) = id.split_once("::").ok_or_else(|| bad("the id has no `::`"))?;
        if !runs(file) {
            return Err(bad("the id's file is not one of the files that run"));
        }
        if test.is_empty() || id.contains(char::is_whitespace) {
            return Err(bad("the id names no test, or holds a space"));
        }
        if reason.is_empty() {
            return Err(bad("no reason"));
        }
        if out.iter().any(|e| e.id == id) {
            return Err(bad("listed twice"));
        }
        out.push(Expected { id: id.to_string(), reason: reason.to_string() });
    }
    Ok(out)
}

/// pytest's arguments that deselect exactly `expected`.
pub fn deselect_args(expected: &[Expected]) -> Vec<String> {
    expected.iter().flat_map(|e| ["--deselect".to_string(), e.id.clone()]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wheel::root;

    #[test]
    fn the_expected_failures_file_is_read_and_deselected() {
        let text = "# why\n\n test_halo_update.py::test_a[x-1] | asserts pace's cache \n\
                    mpi/test_mpi_halo_update.py::test_b | needs gt4py\n";
        let e = parse_expected(text).unwrap();
        assert_eq!(
            e,
            [
                Expected {
                    id: "test_halo_update.py::test_a[x-1]".into(),
                    reason: "asserts pace's cache".into()
                },
                Expected { id: "mpi/test_mpi_halo_update.py::test_b".into(), reason: "needs gt4py".into() },
            ]
        );
        assert_eq!(
            deselect_args(&e),
            [
                "--deselect",
                "test_halo_update.py::test_a[x-1]",
                "--deselect",
                "mpi/test_mpi_halo_update.py::test_b"
            ]
        );
        for (bad, why) in [
            ("test_halo_update.py::test_a", "not `<id> | <reason>`"),
            ("test_halo_update.py::test_a |  ", "not `<id> | <reason>`"),
            ("test_halo_update.py::test_a | ", "not `<id> | <reason>`"),
            ("test_halo_update.py | r", "has no `::`"),
            ("test_buffer.py::test_a | r", "not one of the files"),
            ("test_halo_update.py:: | r", "names no test"),
            ("test_halo_update.py::test a | r", "names no test"),
            ("test_halo_update.py::a | r\ntest_halo_update.py::a | s", "listed twice"),
        ] {
            let err = parse_expected(bad).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
        let folders = ["test_api.py", "test_codecs"];
        let ok = "test_codecs/test_sharding.py::test_a | r\ntest_api.py::test_b | r";
        assert_eq!(parse_expected_in(ok, "f", &folders).unwrap().len(), 2);
        for bad in ["test_codecsx/test_a.py::t | r", "test_api.pyx::t | r", "test_api.py/x.py::t | r"] {
            let err = parse_expected_in(bad, "f", &folders).unwrap_err();
            assert!(err.contains("not one of the files"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn the_project_s_expected_failures_file_is_valid() {
        let text = std::fs::read_to_string(root().join(EXPECTED)).unwrap();
        let e = parse_expected(&text).unwrap();
        assert!(e.iter().all(|e| e.reason.len() > 10), "{e:?}");
    }
}
