//! `cargo xtask gpu-bundle`: test and bench binaries built with CUDA, in one folder to
//! copy to a machine with a GPU (it needs the NVIDIA driver only, not Rust). Its
//! `run.sh` runs every step, logs each under `$OUT`, prints one summary line per step and
//! fails when any step failed.

use crate::artifacts::build_executable;
use crate::sh::capture;
use std::path::Path;
use std::process::Command;

const RUN_SH: &str = r#"#!/usr/bin/env bash
# Runs every gpubuf test binary with CUDA required, every benchmark on cuda and cpu, and
# the demo; logs and JSON go to $OUT (default: out/ beside this script). One summary line
# per step; exits non-zero when any step failed (a backend that is not there included).
# Needs the NVIDIA driver only: gpubuf's own kernels are embedded compiled. NVRTC (the
# CUDA toolkit, or `pip install nvidia-cuda-nvrtc-cu12` with its lib folder on
# LD_LIBRARY_PATH) is used for the user-kernel tests, and required where it is found.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
require=cpu,cuda
if ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so' || ls /usr/local/cuda/lib64/libnvrtc.so* >/dev/null 2>&1; then
  require=$require,nvrtc
fi
# NVIDIA's driver ships an OpenCL platform: where one is registered, OpenCL must run too.
if ls /etc/OpenCL/vendors/nvidia*.icd >/dev/null 2>&1; then require=$require,opencl; fi
export GPUBUF_REQUIRE=${GPUBUF_REQUIRE:-$require}
out=${OUT:-$here/out}
mkdir -p "$out"
summary=()
failed=0
# step NAME COMMAND...: runs COMMAND with its output in $out/NAME.log.
step() {
  local name=$1
  shift
  echo "== $name"
  "$@" >"$out/$name.log" 2>&1
  local rc=$?
  tail -n 3 "$out/$name.log"
  if [ $rc -eq 0 ]; then
    summary+=("ok      $name")
  else
    summary+=("FAILED  $name (exit $rc, log: $out/$name.log)")
    failed=$((failed + 1))
  fi
}
# bench NAME BACKEND: the benchmark's JSON in $out/bench_NAME_BACKEND.json, its plot beside.
bench() {
  step "bench_$1_$2" sh -c '"$0" bench "$1" --backend "$2" --json --plot "$3.png" >"$3.json"' \
    "$here/gpubuf" "$1" "$2" "$out/bench_$1_$2"
}
step gpu nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
step info "$here/gpubuf" info
for t in "$here"/tests/*; do
  step "test_$(basename "$t")" "$t" --test-threads=4
done
for b in cuda cpu; do
  for name in copy pool bufferizer mirror halo demo; do
    bench "$name" "$b"
  done
done
step demo_cuda "$here/gpubuf" demo --backend cuda --size 512 --steps 200 --out "$out/demo_cuda.png"
echo "== summary (GPUBUF_REQUIRE=$GPUBUF_REQUIRE, logs in $out)"
printf '%s\n' "${summary[@]}"
echo "${#summary[@]} steps, $failed failed"
[ $failed -eq 0 ]
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
        "cuda,opencl",
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

#[cfg(test)]
mod tests {
    use super::RUN_SH;
    use std::path::Path;
    use std::process::Command;

    /// A fake bundle: `gpubuf` and the test binaries are shell scripts that pass or fail.
    fn bundle(dir: &Path, failing_test: bool) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(dir.join("tests"))?;
        let script = |path: &Path, body: &str| -> std::io::Result<()> {
            std::fs::write(path, format!("#!/bin/sh\n{body}\n"))?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        };
        script(&dir.join("run.sh"), RUN_SH.trim_start_matches("#!/usr/bin/env bash\n"))?;
        script(&dir.join("gpubuf"), "echo '{\"bench\":\"x\"}'; exit 0")?;
        script(&dir.join("tests/good"), "echo 'test result: ok'")?;
        let bad = if failing_test { "echo 'test result: FAILED'; exit 101" } else { "exit 0" };
        script(&dir.join("tests/bad"), bad)
    }

    fn run(dir: &Path) -> (bool, String) {
        let out = Command::new("bash")
            .arg(dir.join("run.sh"))
            .env("OUT", dir.join("out"))
            .env("PATH", format!("{}:/usr/bin:/bin", dir.join("no-such-dir").display()))
            .output();
        match out {
            Ok(o) => (o.status.success(), String::from_utf8_lossy(&o.stdout).into_owned()),
            Err(e) => (false, e.to_string()),
        }
    }

    #[test]
    fn a_failed_step_fails_the_run_and_is_named() {
        let dir = std::env::temp_dir().join(format!("gpubuf-bundle-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(bundle(&dir, true).is_ok());
        let (ok, stdout) = run(&dir);
        assert!(!ok, "a failing test binary must fail the run:\n{stdout}");
        assert!(stdout.contains("FAILED  test_bad (exit 101"), "{stdout}");
        assert!(stdout.contains("ok      test_good"), "{stdout}");
        assert!(stdout.contains("ok      bench_halo_cuda"), "{stdout}");
        assert!(dir.join("out/bench_copy_cuda.json").exists(), "the bench JSON lands under $OUT");
        // Without nvidia-smi (no driver) the gpu step fails too, and says so.
        if !Path::new("/usr/bin/nvidia-smi").exists() && !Path::new("/bin/nvidia-smi").exists() {
            assert!(stdout.contains("FAILED  gpu"), "{stdout}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
