//! Installing what the tests need: PoCL (a real OpenCL device on the CPU) and NVRTC.

use crate::sh::{run_ok, status_ok};
use std::path::PathBuf;
use std::process::Command;

/// Debian packages the OpenCL suite (PoCL) and the MPI suite (Open MPI, and libclang for
/// the MPI bindings) need.
pub const APT_PACKAGES: &[&str] =
    &["pocl-opencl-icd", "ocl-icd-opencl-dev", "clinfo", "libopenmpi-dev", "openmpi-bin", "libclang-dev"];
/// The PyPI package that ships libnvrtc.so.12 (compiles the CUDA kernels without a GPU).
pub const NVRTC_PIP: &str = "nvidia-cuda-nvrtc-cu12";

/// Whether this process runs as root (apt installs directly, mpirun needs a flag).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Whether an OpenCL loader and at least one ICD are installed.
pub fn opencl_installed() -> bool {
    let loader = Command::new("sh")
        .args(["-c", "ldconfig -p | grep -q 'libOpenCL.so'"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    let icd = std::fs::read_dir("/etc/OpenCL/vendors").map(|d| d.count() > 0).unwrap_or(false);
    loader && icd
}

/// Whether Open MPI (mpicc, mpirun) and libclang are installed.
pub fn mpi_installed() -> bool {
    Command::new("sh")
        .args([
            "-c",
            "command -v mpicc >/dev/null && command -v mpirun >/dev/null && ldconfig -p | grep -q libclang",
        ])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// The folder holding libnvrtc.so.12 from the PyPI wheel, if installed.
pub fn nvrtc_dir() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import nvidia.cuda_nvrtc, os; print(os.path.join(list(nvidia.cuda_nvrtc.__path__)[0], 'lib'))",
        ])
        .output()
        .ok()?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    dir.join("libnvrtc.so.12").exists().then_some(dir)
}

/// Installs what is missing. Returns the messages for anything it could not install.
pub fn install() -> Vec<String> {
    let mut problems = Vec::new();
    if opencl_installed() && mpi_installed() {
        println!("deps: OpenCL loader and ICD, Open MPI and libclang present");
    } else if is_root() {
        println!("deps: installing {} with apt-get", APT_PACKAGES.join(" "));
        let ok = status_ok(Command::new("apt-get").arg("update").env("DEBIAN_FRONTEND", "noninteractive"))
            && status_ok(
                Command::new("apt-get")
                    .args(["install", "-y", "--no-install-recommends"])
                    .args(APT_PACKAGES)
                    .env("DEBIAN_FRONTEND", "noninteractive"),
            );
        if !ok || !opencl_installed() {
            problems.push(format!(
                "could not install OpenCL: run `apt-get install -y {}`",
                APT_PACKAGES.join(" ")
            ));
        }
    } else {
        problems.push(format!(
            "OpenCL runtime or Open MPI missing and not root: run `sudo apt-get install -y {}`",
            APT_PACKAGES.join(" ")
        ));
    }
    if nvrtc_dir().is_some() {
        println!("deps: NVRTC present");
    } else {
        println!("deps: installing {NVRTC_PIP} with pip");
        let _ = run_ok(Command::new("python3").args(["-m", "pip", "install", "--quiet", NVRTC_PIP]));
        if nvrtc_dir().is_none() {
            problems.push(format!("NVRTC missing: run `python3 -m pip install {NVRTC_PIP}`"));
        }
    }
    problems
}
