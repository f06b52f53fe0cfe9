//! `cargo xtask gpu-bundle`: test and bench binaries built with CUDA, in one folder to
//! copy to a machine with a GPU (it needs the NVIDIA driver and NVRTC, not Rust).

use crate::artifacts::build_executable;
use crate::sh::capture;
use std::path::Path;
use std::process::Command;

const RUN_SH: &str = r#"#!/usr/bin/env bash
# Runs every gpubuf test binary on the CUDA backend, then the copy benchmark.
# Needs the NVIDIA driver and NVRTC (libnvrtc.so.12: the CUDA toolkit, or
# `pip install nvidia-cuda-nvrtc-cu12` with its lib folder on LD_LIBRARY_PATH).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export GPUBUF_REQUIRE=cpu,cuda,nvrtc
out=${OUT:-$here/out}
mkdir -p "$out"
status=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
for t in "$here"/tests/*; do
  echo "== $(basename "$t")"
  "$t" --test-threads=4 2>&1 | tee -a "$out/tests.txt" || status=1
done
"$here/gpubuf" info | tee "$out/info.txt"
"$here/gpubuf" bench copy --backend cuda --json --plot "$out/copy_cuda.svg" | tee "$out/copy_cuda.json" || status=1
"$here/gpubuf" bench copy --backend cpu --json | tee "$out/copy_cpu.json" || status=1
exit $status
"#;

/// Builds the bundle; true on success.
pub fn build() -> bool {
    let dir = Path::new("gpu-bundle");
    let _ = std::fs::remove_dir_all(dir);
    if std::fs::create_dir_all(dir.join("tests")).is_err() {
        return false;
    }
    let Some(json) = capture(Command::new("cargo").args([
        "test",
        "--no-run",
        "--profile",
        "gpu",
        "-p",
        "gpubuf-testkit",
        "--features",
        "cuda",
        "--message-format=json",
    ])) else {
        eprintln!("xtask: building the test binaries failed");
        return false;
    };
    let mut copied = 0;
    for line in json.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if v["reason"] == "compiler-artifact" && v["profile"]["test"] == true {
            if let Some(exe) = v["executable"].as_str() {
                let name =
                    Path::new(exe).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                let short = name.rsplit_once('-').map(|(a, _)| a.to_string()).unwrap_or(name);
                if std::fs::copy(exe, dir.join("tests").join(short)).is_ok() {
                    copied += 1;
                }
            }
        }
    }
    let Some(cli) = build_executable(
        &["build", "--profile", "gpu", "-p", "gpubuf-cli", "--features", "cuda,opencl"],
        "gpubuf",
    ) else {
        eprintln!("xtask: building the gpubuf binary failed");
        return false;
    };
    let ok =
        std::fs::copy(&cli, dir.join("gpubuf")).is_ok() && std::fs::write(dir.join("run.sh"), RUN_SH).is_ok();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir.join("run.sh"), std::fs::Permissions::from_mode(0o755));
    }
    println!("gpu-bundle: {copied} test binaries, the gpubuf binary and run.sh in {}", dir.display());
    ok && copied > 0
}
