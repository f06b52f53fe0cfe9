//! `cargo xtask cuda-kernels`: the CUDA backend's own kernels compiled ahead of time by a
//! pinned NVRTC into `crates/gpubuf-cuda/kernels/` (the work is `xtask/cudagen.py`), and
//! the check `test-all` runs that they match `kernels/cuda` and `kernels/shared`.

use crate::sh::run_ok;
use crate::summary::Tally;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The NVRTC the embedded kernels are built with: CUDA 12.0 writes PTX ISA 8.0, which
/// drivers from R525 on JIT-compile. A newer NVRTC writes PTX older drivers refuse.
pub const NVRTC_PIN: &str = "nvidia-cuda-nvrtc-cu12==12.0.140";
/// Where the generated kernels live, from the workspace root.
pub const OUT_DIR: &str = "crates/gpubuf-cuda/kernels";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// The folder the pinned NVRTC is installed into (`pip install --target`), under the
/// target folder.
fn nvrtc_home() -> PathBuf {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"));
    target.join("cuda-kernels-nvrtc-12.0")
}

/// The pinned libnvrtc.so.12, installed into [`nvrtc_home`] first when `install` is set.
fn pinned_nvrtc(install: bool) -> Result<PathBuf, String> {
    let home = nvrtc_home();
    let lib = home.join("nvidia/cuda_nvrtc/lib/libnvrtc.so.12");
    if lib.exists() {
        return Ok(lib);
    }
    if !install {
        return Err(format!("{NVRTC_PIN} is not installed in {}", home.display()));
    }
    let mut pip = Command::new("python3");
    pip.args(["-m", "pip", "install", "--quiet", "--no-deps", "--target"]).arg(&home).arg(NVRTC_PIN);
    if !run_ok(&mut pip) || !lib.exists() {
        return Err(format!("could not install {NVRTC_PIN} into {}", home.display()));
    }
    Ok(lib)
}

fn cudagen(nvrtc: Option<&Path>) -> Command {
    let mut cmd = Command::new("python3");
    cmd.arg(root().join("xtask/cudagen.py")).current_dir(root());
    if let Some(lib) = nvrtc {
        cmd.env("GPUBUF_NVRTC_LIB", lib);
    }
    cmd
}

/// `cargo xtask cuda-kernels`: regenerates the embedded kernels; true on success.
pub fn generate() -> bool {
    let lib = match pinned_nvrtc(true) {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!("xtask: {e}");
            return false;
        }
    };
    run_ok(cudagen(Some(&lib)).args(["generate", OUT_DIR]))
}

/// The staleness step of `test-all`: the manifest's hashes against the sources and the
/// embedded files, then (where the pinned NVRTC can be installed) a fresh build compared
/// byte for byte. One summary line; a stale kernel fails the run.
pub fn check(tally: &mut Tally) {
    let hashes_ok = run_ok(cudagen(None).args(["check", OUT_DIR]));
    let fresh = std::env::temp_dir().join(format!("gpubuf-cuda-kernels-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&fresh);
    let rebuilt = match pinned_nvrtc(true) {
        Err(e) => Err(e),
        Ok(lib) if run_ok(cudagen(Some(&lib)).arg("generate").arg(&fresh)) => {
            Ok(run_ok(cudagen(None).args(["same", OUT_DIR]).arg(&fresh)))
        }
        Ok(_) => Err("the pinned NVRTC did not compile the CUDA kernels".to_string()),
    };
    let _ = std::fs::remove_dir_all(&fresh);
    let run = "run `cargo xtask cuda-kernels` and commit crates/gpubuf-cuda/kernels/";
    match (hashes_ok, rebuilt) {
        (true, Ok(true)) => {
            tally.step("cuda kernels embedded: current (manifest hashes; rebuilt and compared)", true)
        }
        (true, Err(why)) => {
            tally.step("cuda kernels embedded: current (manifest hashes)", true);
            tally.note(format!("cuda kernels embedded: not rebuilt to compare ({why})"));
        }
        (true, Ok(false)) => {
            tally.fail(format!("cuda kernels embedded: FAILED (a fresh build differs: {run})"))
        }
        (false, _) => tally.fail(format!("cuda kernels embedded: FAILED (stale: {run})")),
    }
}

#[cfg(test)]
mod tests {
    use super::{root, OUT_DIR};
    use std::path::Path;
    use std::process::Command;

    /// A copy of the script, the sources and the generated kernels under `dir`.
    fn tree(dir: &Path) -> std::io::Result<()> {
        let _ = std::fs::remove_dir_all(dir);
        for sub in ["xtask", "kernels/cuda", "kernels/shared", OUT_DIR] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        std::fs::copy(root().join("xtask/cudagen.py"), dir.join("xtask/cudagen.py"))?;
        for from in ["kernels/cuda", "kernels/shared", OUT_DIR] {
            for f in std::fs::read_dir(root().join(from))? {
                let f = f?;
                std::fs::copy(f.path(), dir.join(from).join(f.file_name()))?;
            }
        }
        Ok(())
    }

    fn check(dir: &Path) -> (bool, String) {
        let out = Command::new("python3")
            .arg(dir.join("xtask/cudagen.py"))
            .args(["check"])
            .arg(dir.join(OUT_DIR))
            .output();
        match out {
            Ok(o) => (o.status.success(), String::from_utf8_lossy(&o.stdout).into_owned()),
            Err(e) => (false, e.to_string()),
        }
    }

    #[test]
    fn a_changed_source_or_output_is_stale() {
        let dir = std::env::temp_dir().join(format!("gpubuf-cudagen-test-{}", std::process::id()));
        assert!(tree(&dir).is_ok());
        let (ok, out) = check(&dir);
        assert!(ok, "the committed kernels match their sources:\n{out}");

        // A change to the shared body (the OpenCL backend compiles it too) or to the prelude.
        for part in ["kernels/shared/plan_blocks.h", "kernels/cuda/prelude.cuh"] {
            let path = dir.join(part);
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(!text.is_empty(), "{part}");
            assert!(std::fs::write(&path, format!("{text}\n// changed\n")).is_ok());
            let (ok, out) = check(&dir);
            assert!(!ok && out.contains(&format!("{part} changed")), "{out}");
            assert!(std::fs::write(&path, &text).is_ok());
        }

        assert!(std::fs::write(dir.join("kernels/shared/extra.h"), "").is_ok());
        let (ok, out) = check(&dir);
        assert!(!ok && out.contains("kernels/shared/extra.h is new"), "{out}");
        assert!(std::fs::remove_file(dir.join("kernels/shared/extra.h")).is_ok());

        // A fresh build in another zlib's bytes is the same build; another image is not.
        let python = |args: &[&std::ffi::OsStr]| {
            Command::new("python3").args(args).output().map(|o| o.status.success()).unwrap_or(false)
        };
        let script = root().join("xtask/cudagen.py");
        let (ours, theirs) = (root().join(OUT_DIR), dir.join(OUT_DIR));
        let same = || python(&[script.as_os_str(), "same".as_ref(), ours.as_os_str(), theirs.as_os_str()]);
        assert!(same());
        let cubin = theirs.join("plan.sm_80.cubin.zlib");
        let recompress = "import sys, zlib; p = sys.argv[1]; d = zlib.decompress(open(p, 'rb').read()); \
                          open(p, 'wb').write(zlib.compress(d, 1))";
        let before = std::fs::read(&cubin).unwrap_or_default();
        assert!(python(&["-c".as_ref(), recompress.as_ref(), cubin.as_os_str()]));
        assert_ne!(std::fs::read(&cubin).unwrap_or_default(), before);
        assert!(same());
        let (ok, out) = check(&dir);
        assert!(!ok && out.contains("plan.sm_80.cubin.zlib differs"), "{out}");
        assert!(std::fs::copy(ours.join("plan.sm_86.cubin.zlib"), &cubin).is_ok());
        assert!(!same());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
