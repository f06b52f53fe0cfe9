//! Pinned source distributions of the projects whose own tests run on gpubuf (pace-util,
//! zarr-python): fetched once with pip into `<target>/<project>-<version>/`, downloaded
//! again only when missing or of another sha256, and the parts the tests need unpacked
//! afresh on every run, so the tests that run are always the published ones.

use crate::python::without_rust;
use crate::sh::{capture, run_ok};
use crate::wheel::target_dir;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One pinned source distribution.
#[derive(Debug, Clone, Copy)]
pub struct Sdist {
    /// The project's name on PyPI (`pace-util`).
    pub project: &'static str,
    /// The release (`0.9.0`).
    pub version: &'static str,
    /// The archive's file name, as pip downloads it.
    pub file: &'static str,
    /// The archive's sha256 as published (hex).
    pub sha256: &'static str,
}

/// The sha256 of `file` (hex), by `python`'s hashlib.
pub fn sha256(python: &Path, file: &Path) -> Option<String> {
    let code = "import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], 'rb').read()).hexdigest())";
    capture(Command::new(python).args(["-c", code]).arg(file)).map(|s| s.trim().to_string())
}

impl Sdist {
    /// `<project>-<version>`, the archive's top folder and the cache folder's name.
    pub fn stem(&self) -> String {
        format!("{}-{}", self.project, self.version)
    }

    /// The cache folder, `<target>/<project>-<version>`.
    pub fn cache_dir(&self) -> PathBuf {
        std::path::absolute(target_dir()).unwrap_or_else(|_| target_dir()).join(self.stem())
    }

    /// The archive in the cache (downloaded by `venv`'s pip when missing or when its hash
    /// is not the pinned one; pip reads its metadata in a build environment of its own),
    /// with `parts` (paths under the archive's top folder) unpacked afresh; returns the
    /// unpacked top folder.
    ///
    /// # Errors
    /// A failed download or unpack, or an archive of another hash.
    pub fn unpack(&self, python: &Path, venv: &Path, parts: &[&str]) -> Result<PathBuf, String> {
        let dir = self.cache_dir();
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let archive = dir.join(self.file);
        if archive.is_file() && sha256(python, &archive).as_deref() != Some(self.sha256) {
            println!("{}: {} has another hash: downloading it again", self.project, archive.display());
            let _ = std::fs::remove_file(&archive);
        }
        if !archive.is_file() {
            let mut pip = Command::new(python);
            pip.args(["-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"])
                // The sdist of this project only: the build requirements pip installs to
                // read its metadata come as wheels (with `:all:` they would be built
                // from source too, numpy among them).
                .args(["--no-binary", self.project, "-d"])
                .arg(&dir)
                .arg(format!("{}=={}", self.project, self.version));
            if !run_ok(without_rust(&mut pip, venv)) {
                return Err(format!("pip download {}=={} failed", self.project, self.version));
            }
        }
        match sha256(python, &archive) {
            Some(h) if h == self.sha256 => {}
            got => {
                let _ = std::fs::remove_file(&archive);
                return Err(format!("{}: sha256 {got:?}, pinned {}", self.file, self.sha256));
            }
        }
        let unpacked = dir.join(self.stem());
        let _ = std::fs::remove_dir_all(&unpacked);
        let paths: Vec<String> = parts.iter().map(|p| format!("{}/{p}", self.stem())).collect();
        if !run_ok(Command::new("tar").arg("-xzf").arg(&archive).arg("-C").arg(&dir).args(&paths)) {
            return Err(format!("unpacking {} from {} failed", paths.join(", "), archive.display()));
        }
        Ok(unpacked)
    }
}
