//! `cargo xtask cuda-kernels`: the CUDA backend's own kernels compiled ahead of time by a
//! pinned NVRTC into `crates/gpubuf-cuda/kernels/` (the work is `xtask/cudagen.py`), and
//! the check `test-all` runs that they match `kernels/cuda/*.cu`.

use crate::sh::{capture, run_ok};
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

/// The virtual environment holding the pinned NVRTC, under the target folder.
fn venv() -> PathBuf {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"));
    target.join("cuda-kernels-nvrtc-12.0")
}

/// The pinned libnvrtc.so.12, installed into [`venv`] first when `install` is set.
fn pinned_nvrtc(install: bool) -> Result<PathBuf, String> {
    let env = venv();
    let python = env.join("bin/python");
    let find = || {
        let out = capture(Command::new(&python).args([
            "-c",
            "import nvidia.cuda_nvrtc, os; print(os.path.join(list(nvidia.cuda_nvrtc.__path__)[0], 'lib'))",
        ]))?;
        let lib = PathBuf::from(out.trim()).join("libnvrtc.so.12");
        lib.exists().then_some(lib)
    };
    if let Some(lib) = find() {
        return Ok(lib);
    }
    if !install {
        return Err(format!("{NVRTC_PIN} is not installed in {}", env.display()));
    }
    let made = python.exists()
        || run_ok(Command::new("python3").args(["-m", "venv"]).arg(&env))
        || run_ok(Command::new("python3").args(["-m", "venv", "--without-pip"]).arg(&env));
    if !made {
        return Err(format!("could not create a virtual environment in {}", env.display()));
    }
    if !run_ok(Command::new(&python).args(["-m", "pip", "install", "--quiet", NVRTC_PIN])) {
        return Err(format!("could not install {NVRTC_PIN} into {}", env.display()));
    }
    find().ok_or_else(|| format!("{NVRTC_PIN} installed but libnvrtc.so.12 not found"))
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

/// Files of `a` and `b` that differ in content or exist in one only.
fn differing(a: &Path, b: &Path) -> Vec<String> {
    let names = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .map(|it| it.filter_map(|f| f.ok()?.file_name().into_string().ok()).collect())
            .unwrap_or_default();
        v.sort();
        v
    };
    let (na, nb) = (names(a), names(b));
    let mut all: Vec<&String> = na.iter().chain(nb.iter()).collect();
    all.sort();
    all.dedup();
    all.into_iter()
        .filter(|n| std::fs::read(a.join(n)).ok() != std::fs::read(b.join(n)).ok())
        .cloned()
        .collect()
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
            Ok(differing(&root().join(OUT_DIR), &fresh))
        }
        Ok(_) => Err("the pinned NVRTC did not compile kernels/cuda/*.cu".to_string()),
    };
    let _ = std::fs::remove_dir_all(&fresh);
    let run = "run `cargo xtask cuda-kernels` and commit crates/gpubuf-cuda/kernels/";
    match (hashes_ok, rebuilt) {
        (true, Ok(diff)) if diff.is_empty() => {
            tally.step("cuda kernels embedded: current (manifest hashes; rebuilt byte for byte)", true)
        }
        (true, Err(why)) => {
            tally.step("cuda kernels embedded: current (manifest hashes)", true);
            tally.note(format!("cuda kernels embedded: not rebuilt to compare ({why})"));
        }
        (true, Ok(diff)) => tally.fail(format!(
            "cuda kernels embedded: FAILED (a fresh build differs in {}: {run})",
            diff.join(", ")
        )),
        (false, _) => tally.fail(format!("cuda kernels embedded: FAILED (stale: {run})")),
    }
}

#[cfg(test)]
mod tests {
    use super::{differing, root, OUT_DIR};
    use std::path::Path;
    use std::process::Command;

    /// A copy of the script, the sources and the generated kernels under `dir`.
    fn tree(dir: &Path) -> std::io::Result<()> {
        let _ = std::fs::remove_dir_all(dir);
        for sub in ["xtask", "kernels/cuda", OUT_DIR] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        std::fs::copy(root().join("xtask/cudagen.py"), dir.join("xtask/cudagen.py"))?;
        for from in ["kernels/cuda", OUT_DIR] {
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

        let cu = dir.join("kernels/cuda/plan.cu");
        let text = std::fs::read_to_string(&cu).unwrap_or_default();
        assert!(std::fs::write(&cu, format!("{text}\n// changed\n")).is_ok());
        let (ok, out) = check(&dir);
        assert!(!ok && out.contains("kernels/cuda/plan.cu changed"), "{out}");
        assert!(std::fs::write(&cu, &text).is_ok());

        assert!(std::fs::write(dir.join("kernels/cuda/extra.cu"), "").is_ok());
        let (ok, out) = check(&dir);
        assert!(!ok && out.contains("extra.cu is new"), "{out}");
        assert!(std::fs::remove_file(dir.join("kernels/cuda/extra.cu")).is_ok());

        let cubin = dir.join(OUT_DIR).join("plan.sm_80.cubin");
        let mut bytes = std::fs::read(&cubin).unwrap_or_default();
        bytes[100] ^= 1;
        assert!(std::fs::write(&cubin, &bytes).is_ok());
        let (ok, out) = check(&dir);
        assert!(!ok && out.contains("plan.sm_80.cubin differs"), "{out}");
        assert_eq!(differing(&root().join(OUT_DIR), &dir.join(OUT_DIR)), ["plan.sm_80.cubin"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
