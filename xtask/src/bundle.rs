//! `cargo xtask gpu-bundle`: test and bench binaries built with CUDA, in one folder to
//! copy to a machine with a GPU (it needs the NVIDIA driver only, not Rust). Its
//! `run.sh` runs every step, logs each under `$OUT`, prints one summary line per step and
//! fails when any step failed.

use crate::artifacts::build_executable;
use crate::sh::{capture, run_ok};
use std::path::Path;
use std::process::Command;

const RUN_SH: &str = r#"#!/usr/bin/env bash
# Runs every gpubuf test binary with CUDA required, every benchmark on cuda and cpu, and
# the demo; logs and JSON go to $OUT (default: out/ beside this script). One summary line
# per step; exits non-zero when any step failed (a backend that is not there included).
# Needs the NVIDIA driver only: gpubuf's own kernels are embedded compiled. NVRTC is
# used for the user-kernel tests and required only where a library the binaries load
# (cudarc's names: libnvrtc.so, .so.12, .so.11) is found; OpenCL is required, on NVIDIA's
# device, only where `gpubuf info` lists NVIDIA's OpenCL platform. Each step has a time limit
# (STEP_TIMEOUT seconds, default 300); test binaries run JOBS at a time (default 4); the
# benchmarks run on BENCH_BACKENDS (default "cuda cpu"). Where python/ holds a wheel, the
# Python tests run with it (python3 with numpy and pytest; CuPy and PyTorch where present).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
# Empty when unset (a machine with the driver only), which `set -u` would refuse.
LIB_DIRS=${LD_LIBRARY_PATH:-}
# has_lib NAME...: whether the dynamic loader finds one of these file names.
has_lib() {
  local n d
  for n in "$@"; do
    ldconfig -p 2>/dev/null | grep -q " $n " && return 0
    for d in ${LIB_DIRS//:/ }; do [ -e "$d/$n" ] && return 0; done
  done
  return 1
}
require=cpu,cuda
has_lib libnvrtc.so libnvrtc.so.12 libnvrtc.so.11 && require=$require,nvrtc
# NVIDIA's OpenCL platform, where gpubuf sees it: OpenCL is required and runs there.
if "$here/gpubuf" info 2>/dev/null | grep -q '(NVIDIA CUDA)'; then
  require=$require,opencl
  export GPUBUF_OPENCL_DEVICE=${GPUBUF_OPENCL_DEVICE:-nvidia}
fi
export GPUBUF_REQUIRE=${GPUBUF_REQUIRE:-$require}
limit=${STEP_TIMEOUT:-300}
jobs=${JOBS:-4}
out=${OUT:-$here/out}
mkdir -p "$out/rc"
summary=()
failed=0
skipped=0
# record NAME RC: one summary line.
record() {
  if [ "$2" -eq 0 ]; then
    summary+=("ok      $1")
  elif [ "$2" -eq 124 ]; then
    summary+=("FAILED  $1 (timed out after ${limit}s, log: $out/$1.log)")
    failed=$((failed + 1))
  else
    summary+=("FAILED  $1 (exit $2, log: $out/$1.log)")
    failed=$((failed + 1))
  fi
}
# step NAME COMMAND...: runs COMMAND with its output in $out/NAME.log.
step() {
  local name=$1
  shift
  echo "== $name"
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  tail -n 3 "$out/$name.log"
  record "$name" $rc
}
# bench NAME BACKEND: the benchmark's JSON in $out/bench_NAME_BACKEND.json, its plot beside.
bench() {
  step "bench_$1_$2" sh -c '"$0" bench "$1" --backend "$2" --json --plot "$3.png" >"$3.json"' \
    "$here/gpubuf" "$1" "$2" "$out/bench_$1_$2"
}
step gpu nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
step info "$here/gpubuf" info
# The test binaries, JOBS at a time; each writes its exit status to $out/rc/NAME.
names=()
for t in "$here"/tests/*; do
  name="test_$(basename "$t")"
  names+=("$name")
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 0.2; done
  (timeout "$limit" "$t" --test-threads=4 >"$out/$name.log" 2>&1; echo $? >"$out/rc/$name") &
done
wait
for name in "${names[@]}"; do
  echo "== $name"
  tail -n 3 "$out/$name.log"
  record "$name" "$(cat "$out/rc/$name" 2>/dev/null || echo 1)"
done
for b in ${BENCH_BACKENDS:-cuda cpu}; do
  for name in copy pool bufferizer mirror halo demo; do
    bench "$name" "$b"
  done
done
# The Python tests, on CUDA too, where the bundle carries a wheel and python3 has numpy
# and pytest (the MPI tests need mpirun and are left to the MPI step of test-all). Each
# test is named as it starts, unbuffered, so a crash's log ends at the test that crashed
# (and pytest's faulthandler adds its Python stack).
# A python3 without them is a skip, named with what to install, not a failure.
if ls "$here"/python/*.whl >/dev/null 2>&1 && ! python3 -c 'import numpy, pytest' >/dev/null 2>&1; then
  echo "== python"
  summary+=("skipped python (python3 lacks numpy or pytest: python3 -m pip install numpy pytest)")
  skipped=$((skipped + 1))
elif ls "$here"/python/*.whl >/dev/null 2>&1; then
  step python sh -c 'rm -rf "$1/site" && python3 -m pip install -q --no-deps --no-index \
      --target "$1/site" "$0"/python/*.whl && cd "$0/python/crates/gpubuf-python/tests" && \
      PYTHONPATH="$1/site" PYTHONUNBUFFERED=1 \
      python3 -m pytest -v -p no:cacheprovider --ignore mpi -ra .' "$here" "$out"
fi
step demo_cuda "$here/gpubuf" demo --backend cuda --size 512 --steps 200 --out "$out/demo_cuda.png"
# The embedded CUDA stencil against the host stencil's checksum (gpubuf-cli's tests/cli.rs,
# HOST_CHECKSUMS): bit for bit after 61 steps on 64 x 64.
step demo_cuda_bits sh -c '"$0" demo --backend cuda --size 64 --steps 61 --out "$1" | tee /dev/stderr | \
    grep -q "^checksum 8066592cb70833ac "' "$here/gpubuf" "$out/demo_cuda_bits.png"
echo "== summary (GPUBUF_REQUIRE=$GPUBUF_REQUIRE, GPUBUF_OPENCL_DEVICE=${GPUBUF_OPENCL_DEVICE:-}, logs in $out)"
printf '%s\n' "${summary[@]}"
echo "${#summary[@]} steps, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
"#;

/// The wheel (built as `cargo xtask wheel` builds it, CUDA included) and the Python tests,
/// under `dir`; true on success.
fn python_part(dir: &Path) -> bool {
    let wheel = match crate::wheel::build() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("xtask: building the wheel failed: {e}");
            return false;
        }
    };
    let Some(name) = wheel.file_name() else { return false };
    // The repository's layout below `dir`: the tests read docs/python.md from the root.
    let root = crate::wheel::root();
    let tests = "crates/gpubuf-python/tests";
    std::fs::create_dir_all(dir.join("docs")).is_ok()
        && std::fs::copy(&wheel, dir.join(name)).is_ok()
        && std::fs::copy(root.join("docs/python.md"), dir.join("docs/python.md")).is_ok()
        && copy_tree(&root.join(tests), &dir.join(tests))
}

/// Copies the files of `from` (skipping caches) to `to`, recursively.
fn copy_tree(from: &Path, to: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(from) else { return false };
    if std::fs::create_dir_all(to).is_err() {
        return false;
    }
    entries.flatten().all(|e| {
        let name = e.file_name();
        if name == "__pycache__" || name == ".pytest_cache" {
            return true;
        }
        let path = e.path();
        if path.is_dir() {
            copy_tree(&path, &to.join(&name))
        } else {
            std::fs::copy(&path, to.join(&name)).is_ok()
        }
    })
}

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
        "-p",
        "gpubuf-cuda",
        "--features",
        "gpubuf-testkit/cuda,gpubuf-testkit/opencl",
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
                let mut short = name.rsplit_once('-').map(|(a, _)| a.to_string()).unwrap_or(name);
                if dir.join("tests").join(&short).exists() {
                    // Two packages' tests of one name: the second keeps its package's name.
                    let package = v["manifest_path"].as_str().map(Path::new).and_then(|m| m.parent());
                    let package =
                        package.and_then(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned());
                    short = format!("{}_{short}", package.unwrap_or_default());
                }
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
    let ok = std::fs::copy(&cli, dir.join("gpubuf")).is_ok()
        && std::fs::write(dir.join("run.sh"), RUN_SH).is_ok()
        && python_part(&dir.join("python"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir.join("run.sh"), std::fs::Permissions::from_mode(0o755));
    }
    println!(
        "gpu-bundle: {copied} test binaries, the gpubuf binary, the wheel, the Python tests and run.sh in {}",
        dir.display()
    );
    let packed = pack(Path::new("."), "gpu-bundle");
    if let Some(file) = &packed {
        let size = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
        let how = if file.ends_with(".xz") { "tar xJf" } else { "tar xzf" };
        println!(
            "gpu-bundle: packed into {file} ({:.1} MiB; unpack with {how}, then gpu-bundle/run.sh)",
            size as f64 / 1048576.0
        );
    }
    ok && copied > 0 && packed.is_some()
}

/// Packs folder `name` under `root` into one file beside it, for transfers with a size
/// limit, and returns that file's name: `NAME.tar.xz` where `xz` is found, else
/// `NAME.tar.gz`; the other of the two is removed, so no stale pack is left beside the
/// new one. xz's dictionary (8 MiB at its default level) spans several binaries, so the
/// CUDA images that every test binary embeds are stored about once: 36 test binaries, the
/// gpubuf binary and the wheel (96 MiB) take about 18 MiB in xz and 59 MiB in gzip, whose
/// 32 KiB window sees each binary alone.
fn pack(root: &Path, name: &str) -> Option<String> {
    let with_xz = Command::new("xz").arg("--version").output().is_ok_and(|o| o.status.success());
    pack_as(root, name, with_xz)
}

/// [`pack`] in xz (`with_xz`) or gzip.
fn pack_as(root: &Path, name: &str, with_xz: bool) -> Option<String> {
    let xz = format!("{name}.tar.xz");
    let gz = format!("{name}.tar.gz");
    let _ = std::fs::remove_file(root.join(&xz));
    let _ = std::fs::remove_file(root.join(&gz));
    let (file, flag) = if with_xz { (xz, "-cJf") } else { (gz, "-czf") };
    let ok = run_ok(Command::new("tar").current_dir(root).env("XZ_OPT", "-6 -T0").args([flag, &file, name]));
    if ok {
        Some(file)
    } else {
        let _ = std::fs::remove_file(root.join(&file));
        None
    }
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
        run_with(dir, &[])
    }

    fn run_with(dir: &Path, env: &[(&str, &Path)]) -> (bool, String) {
        // No LD_LIBRARY_PATH unless given (cargo sets one for tests): a machine with the
        // driver only and no CUDA toolkit has none.
        let out = Command::new("bash")
            .arg(dir.join("run.sh"))
            .env_remove("LD_LIBRARY_PATH")
            .envs(env.iter().copied())
            .env_remove("GPUBUF_REQUIRE")
            .env("OUT", dir.join("out"))
            .env("PATH", format!("{}:/usr/bin:/bin", dir.join("bin").display()))
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

    /// A wheel in the bundle and a python3 without numpy or pytest: the Python step is a
    /// skip that says what to install, and the run passes; with them, the tests run.
    #[test]
    fn python_tests_without_pytest_are_a_named_skip() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("gpubuf-bundle-python-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(bundle(&dir, false).is_ok());
        for sub in ["python/crates/gpubuf-python/tests", "bin"] {
            assert!(std::fs::create_dir_all(dir.join(sub)).is_ok());
        }
        assert!(std::fs::write(dir.join("python/gpubuf-0-cp310-abi3-linux_x86_64.whl"), b"").is_ok());
        let python = |body: &str| {
            let path = dir.join("bin/python3");
            assert!(std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).is_ok());
            assert!(std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).is_ok());
        };
        python("exit 1"); // no module imports
        let (_, stdout) = run(&dir);
        assert!(stdout.contains("skipped python (python3 lacks numpy or pytest"), "{stdout}");
        assert!(!stdout.contains("FAILED  python") && stdout.contains(" failed, 1 skipped"), "{stdout}");
        python("exit 0"); // imports and the tests pass
        let (_, stdout) = run(&dir);
        assert!(stdout.contains("ok      python"), "{stdout}");
        assert!(stdout.contains(", 0 skipped"), "{stdout}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// NVRTC is required only under a name cudarc loads (a CUDA 13 `libnvrtc.so.13` alone is
    /// not one), OpenCL only where NVIDIA's platform could load: a dry run against fake
    /// library folders.
    #[test]
    fn requirements_follow_the_libraries_the_binaries_can_load() {
        let dir = std::env::temp_dir().join(format!("gpubuf-bundle-libs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(bundle(&dir, false).is_ok());
        let libs = dir.join("libs");
        assert!(std::fs::create_dir_all(&libs).is_ok());
        let line =
            |stdout: &str| stdout.lines().find(|l| l.starts_with("== summary")).unwrap_or("").to_string();
        assert!(std::fs::write(libs.join("libnvrtc.so.13"), b"").is_ok());
        let (_, stdout) = run_with(&dir, &[("LD_LIBRARY_PATH", &libs)]);
        let has_nvrtc_elsewhere = Path::new("/usr/local/cuda/lib64").exists();
        if !has_nvrtc_elsewhere {
            assert!(line(&stdout).contains("GPUBUF_REQUIRE=cpu,cuda,"), "{stdout}");
            assert!(!line(&stdout).contains("nvrtc"), "libnvrtc.so.13 alone: {stdout}");
        }
        assert!(std::fs::write(libs.join("libnvrtc.so.12"), b"").is_ok());
        let (_, stdout) = run_with(&dir, &[("LD_LIBRARY_PATH", &libs)]);
        assert!(line(&stdout).contains("GPUBUF_REQUIRE=cpu,cuda,nvrtc"), "{stdout}");
        assert!(!line(&stdout).contains("opencl"), "no NVIDIA OpenCL platform listed: {stdout}");
        // `gpubuf info` listing NVIDIA's OpenCL platform: OpenCL required, on that device.
        let info = "echo '  [1] NVIDIA H200 (NVIDIA CUDA), 139.8 GiB'";
        assert!(std::fs::write(dir.join("gpubuf"), format!("#!/bin/sh\n{info}\n")).is_ok());
        let (_, stdout) = run_with(&dir, &[("LD_LIBRARY_PATH", &libs)]);
        assert!(line(&stdout).contains("nvrtc,opencl, GPUBUF_OPENCL_DEVICE=nvidia,"), "{stdout}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Both packs unpack to the same files, the other pack is removed, and xz stores two
    /// copies of the same incompressible megabyte about once (gzip twice). Where `xz` is
    /// not installed, only the gzip pack is checked (`pack` then makes no other).
    #[test]
    fn packs_unpack_to_the_folder_and_xz_stores_repeats_once() {
        let root = std::env::temp_dir().join(format!("gpubuf-bundle-pack-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("b/tests")).unwrap();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let data: Vec<u8> = (0..1 << 20)
            .map(|_| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                (x >> 56) as u8
            })
            .collect();
        std::fs::write(root.join("b/tests/one"), &data).unwrap();
        std::fs::write(root.join("b/tests/two"), &data).unwrap();
        std::fs::write(root.join("b/run.sh"), "echo hi\n").unwrap();
        let has_xz = Command::new("xz").arg("--version").output().is_ok_and(|o| o.status.success());
        for (with_xz, file, flag) in [(false, "b.tar.gz", "-xzf"), (true, "b.tar.xz", "-xJf")] {
            if with_xz && !has_xz {
                continue;
            }
            let other = if with_xz { "b.tar.gz" } else { "b.tar.xz" };
            std::fs::write(root.join(other), "stale").unwrap();
            assert_eq!(super::pack_as(&root, "b", with_xz).as_deref(), Some(file));
            assert!(!root.join(other).exists(), "{other} left beside {file}");
            let size = std::fs::metadata(root.join(file)).unwrap().len();
            if with_xz {
                assert!(size < 1_300_000, "xz stored the repeated megabyte twice: {size} bytes");
            } else {
                assert!(size > 2_000_000, "gzip cannot see the repeat: {size} bytes");
            }
            let out = root.join(format!("out-{with_xz}"));
            std::fs::create_dir_all(&out).unwrap();
            let ok = Command::new("tar").arg(flag).arg(root.join(file)).current_dir(&out).status().unwrap();
            assert!(ok.success());
            for f in ["tests/one", "tests/two"] {
                assert!(std::fs::read(out.join("b").join(f)).unwrap() == data, "{f} differs after {file}");
            }
            assert_eq!(std::fs::read_to_string(out.join("b/run.sh")).unwrap(), "echo hi\n");
        }
        let _ = std::fs::remove_dir_all(&root);
    }
}
