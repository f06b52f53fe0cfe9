//! gpubuf-testkit: run one test body on every backend.
//!
//! Write the body once, generic over the backend, and list it in [`backend_tests!`]:
//!
//! ```
//! use gpubuf::{Kernels, NDBuffer, Result};
//!
//! fn zeros_are_zero<B: Kernels>(b: &B) -> Result<()> {
//!     assert!(NDBuffer::<B, f32>::zeros(b, &[3, 4])?.all_equal(0.0)?);
//!     Ok(())
//! }
//! gpubuf_testkit::backend_tests!(zeros_are_zero);
//! # fn main() {}
//! ```
//!
//! This makes tests `zeros_are_zero::cpu`, `zeros_are_zero::opencl`,
//! `zeros_are_zero::opencl_blocks` and `zeros_are_zero::opencl_items` (with the `opencl`
//! feature; the last two run the OpenCL device with its plan kernels forced to the block
//! shape, which GPUs use by default, and to the per-work-item shape, so each shape runs on
//! every OpenCL device; the row shape is the default on CPU devices) and `zeros_are_zero::cuda` (with `cuda`). A backend whose runtime or device is
//! missing is skipped with its reason on stderr, unless its name is listed in the
//! `GPUBUF_REQUIRE` environment variable (`cpu,opencl`), in which case the test fails:
//! `cargo xtask test-all` sets it for every backend it reports as run.

pub mod exec;
pub mod gated;
pub mod hostile;
pub mod reference;
pub mod strategies;

use gpubuf::cpu::CpuBackend;
#[cfg(any(feature = "opencl", feature = "cuda"))]
use gpubuf::Error;
use gpubuf::{BackendKind, Result};
use std::sync::OnceLock;

/// Writes a line to the process's stderr directly, past libtest's output capture, so a
/// skip is visible in a passing run. The line and its newline go in one write: written
/// in pieces (as `writeln!` does on the unbuffered stderr), libtest's `test ... ok` from
/// another thread could land between them where both streams share a pipe, and a
/// harness reading that pipe line by line would miss the result.
pub fn say(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_all(format!("{line}\n").as_bytes());
}

/// This test binary run again as a child process that runs the ignored test `name` alone,
/// in the environment the process started with. An OpenCL loader splits
/// `OCL_ICD_FILENAMES` at its `:` by writing NULs into the environment itself (seen with
/// `libpocl.so.2:libnvidia-opencl.so.1`: the process, and any child inheriting its
/// environment, then saw `libpocl.so.2` and no NVIDIA platform). So the environment is
/// read from `/proc/self/environ`, the process's initial block, where such a split shows as
/// a piece without `=` after its variable, and each piece is joined back with `:`.
/// Callers add the variables the child is about.
pub fn child_test(name: &str) -> std::process::Command {
    let exe = std::env::current_exe().unwrap_or_default();
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["--exact", name, "--ignored", "--nocapture", "--test-threads=1"]);
    #[cfg(unix)]
    if let Ok(initial) = std::fs::read("/proc/self/environ") {
        use std::os::unix::ffi::OsStrExt;
        cmd.env_clear();
        for (key, value) in initial_environment(&initial) {
            cmd.env(std::ffi::OsStr::from_bytes(&key), std::ffi::OsStr::from_bytes(&value));
        }
    }
    cmd
}

/// The variables of an initial environment block (NUL-separated `KEY=value` entries), a
/// piece without `=` joined to the value before it with `:` (see [`child_test`]).
pub fn initial_environment(block: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut vars: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for entry in block.split(|&b| b == 0).filter(|e| !e.is_empty()) {
        match (entry.iter().position(|&b| b == b'='), vars.last_mut()) {
            (Some(at), _) => vars.push((entry[..at].to_vec(), entry[at + 1..].to_vec())),
            (None, Some((_, value))) => {
                value.push(b':');
                value.extend_from_slice(entry);
            }
            (None, None) => {}
        }
    }
    vars
}

/// Whether `kind` must be available (listed in `GPUBUF_REQUIRE`).
pub fn required(kind: BackendKind) -> bool {
    std::env::var("GPUBUF_REQUIRE")
        .map(|v| v.split(',').any(|s| s.trim().eq_ignore_ascii_case(kind.name())))
        .unwrap_or(false)
}

/// Turns "backend unavailable" into a skip (or a failure when required).
#[cfg(any(feature = "opencl", feature = "cuda"))]
fn available<B: Clone>(kind: BackendKind, opened: &std::result::Result<B, Error>) -> Option<B> {
    match opened {
        Ok(b) => Some(b.clone()),
        Err(e) if required(kind) => panic!("{kind} is required (GPUBUF_REQUIRE) but unavailable: {e}"),
        Err(e) => {
            say(&format!("{kind} skipped: {e}"));
            None
        }
    }
}

/// The shared CPU backend.
pub fn cpu() -> CpuBackend {
    static B: OnceLock<CpuBackend> = OnceLock::new();
    B.get_or_init(CpuBackend::new).clone()
}

/// The shared OpenCL backend of this test binary (programs build once), if available.
#[cfg(feature = "opencl")]
pub fn opencl() -> Option<gpubuf::opencl::OpenClBackend> {
    static B: OnceLock<std::result::Result<gpubuf::opencl::OpenClBackend, Error>> = OnceLock::new();
    available(BackendKind::OpenCl, B.get_or_init(gpubuf::opencl::OpenClBackend::new))
}

/// The shared OpenCL backend with its plan kernels forced to the block shape (the GPU
/// shape), on the same context as [`opencl`], if available.
#[cfg(feature = "opencl")]
pub fn opencl_blocks() -> Option<gpubuf::opencl::OpenClBackend> {
    opencl().map(|b| b.with_plan_kernel(gpubuf::opencl::PlanKernel::Blocks))
}

/// The shared OpenCL backend with its plan kernels forced to the per-work-item shape, on
/// the same context as [`opencl`], if available.
#[cfg(feature = "opencl")]
pub fn opencl_items() -> Option<gpubuf::opencl::OpenClBackend> {
    opencl().map(|b| b.with_plan_kernel(gpubuf::opencl::PlanKernel::Items))
}

/// The shared CUDA backend of this test binary, if available.
#[cfg(feature = "cuda")]
pub fn cuda() -> Option<gpubuf::cuda::CudaBackend> {
    static B: OnceLock<std::result::Result<gpubuf::cuda::CudaBackend, Error>> = OnceLock::new();
    available(BackendKind::Cuda, B.get_or_init(gpubuf::cuda::CudaBackend::new))
}

fn check(kind: BackendKind, r: Result<()>) {
    if let Err(e) = r {
        panic!("test body failed on {kind}: {e}");
    }
}

/// Runs `f` on the CPU backend.
pub fn run_cpu(f: impl FnOnce(&CpuBackend) -> Result<()>) {
    check(BackendKind::Cpu, f(&cpu()));
}

/// Runs `f` on OpenCL, or skips.
#[cfg(feature = "opencl")]
pub fn run_opencl(f: impl FnOnce(&gpubuf::opencl::OpenClBackend) -> Result<()>) {
    if let Some(b) = opencl() {
        check(BackendKind::OpenCl, f(&b));
    }
}

/// Runs `f` on OpenCL with the block-shaped plan kernels, or skips.
#[cfg(feature = "opencl")]
pub fn run_opencl_blocks(f: impl FnOnce(&gpubuf::opencl::OpenClBackend) -> Result<()>) {
    if let Some(b) = opencl_blocks() {
        check(BackendKind::OpenCl, f(&b));
    }
}

/// Runs `f` on OpenCL with the per-work-item plan kernels, or skips.
#[cfg(feature = "opencl")]
pub fn run_opencl_items(f: impl FnOnce(&gpubuf::opencl::OpenClBackend) -> Result<()>) {
    if let Some(b) = opencl_items() {
        check(BackendKind::OpenCl, f(&b));
    }
}

/// Runs `f` on CUDA, or skips.
#[cfg(feature = "cuda")]
pub fn run_cuda(f: impl FnOnce(&gpubuf::cuda::CudaBackend) -> Result<()>) {
    if let Some(b) = cuda() {
        check(BackendKind::Cuda, f(&b));
    }
}

/// Runs `f` on CUDA where NVRTC can compile user kernels too, or skips with the reason
/// (a failure where `GPUBUF_REQUIRE` names `nvrtc`): a machine with the driver alone
/// runs gpubuf's own kernels but compiles no source at run time.
///
/// # Panics
/// When `f` fails, or NVRTC is missing while `GPUBUF_REQUIRE` names `nvrtc` (as for
/// [`run_cuda`]'s backend).
#[cfg(feature = "cuda")]
pub fn run_cuda_nvrtc(f: impl FnOnce(&gpubuf::cuda::CudaBackend) -> Result<()>) {
    let Some(b) = cuda() else { return };
    if let Err(e) = gpubuf::cuda::nvrtc_available() {
        let wanted = std::env::var("GPUBUF_REQUIRE").is_ok_and(|v| v.split(',').any(|s| s.trim() == "nvrtc"));
        assert!(!wanted, "nvrtc is required (GPUBUF_REQUIRE) but unavailable: {e}");
        say(&format!("cuda user kernels skipped: {e}"));
        return;
    }
    check(BackendKind::Cuda, f(&b));
}

#[cfg(feature = "opencl")]
#[doc(hidden)]
#[macro_export]
macro_rules! __on_opencl {
    ($($t:tt)*) => { $($t)* };
}
#[cfg(not(feature = "opencl"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __on_opencl {
    ($($t:tt)*) => {};
}
#[cfg(feature = "cuda")]
#[doc(hidden)]
#[macro_export]
macro_rules! __on_cuda {
    ($($t:tt)*) => { $($t)* };
}
#[cfg(not(feature = "cuda"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __on_cuda {
    ($($t:tt)*) => {};
}

/// Makes a module per body with one `#[test]` per compiled backend (`cpu`, `opencl`,
/// `opencl_blocks`, `opencl_items`, `cuda`). Each body is `fn name<B: gpubuf::Kernels>(b: &B) -> gpubuf::Result<()>`.
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),+ $(,)?) => {
        $(
            mod $name {
                #[test]
                fn cpu() {
                    $crate::run_cpu(|b| super::$name(b));
                }
                $crate::__on_opencl! {
                    #[test]
                    fn opencl() {
                        $crate::run_opencl(|b| super::$name(b));
                    }
                    #[test]
                    fn opencl_blocks() {
                        $crate::run_opencl_blocks(|b| super::$name(b));
                    }
                    #[test]
                    fn opencl_items() {
                        $crate::run_opencl_items(|b| super::$name(b));
                    }
                }
                $crate::__on_cuda! {
                    #[test]
                    fn cuda() {
                        $crate::run_cuda(|b| super::$name(b));
                    }
                }
            }
        )+
    };
}

/// Calls `f` with every available backend; `f` is a [`gpubuf::BackendVisitor`]-like
/// closure set: use [`EachBackend`] to collect one result per backend.
pub trait EachBackend {
    /// What one backend produces.
    type Output;
    /// Runs on one backend.
    ///
    /// # Errors
    /// What the body returns.
    fn run<B: gpubuf::Kernels>(&self, b: &B) -> Result<Self::Output>;
}

/// The backends that can run here, CPU first.
pub fn available_backends() -> Vec<BackendKind> {
    #[allow(unused_mut)]
    let mut out = vec![BackendKind::Cpu];
    #[cfg(feature = "opencl")]
    if opencl().is_some() {
        out.push(BackendKind::OpenCl);
    }
    #[cfg(feature = "cuda")]
    if cuda().is_some() {
        out.push(BackendKind::Cuda);
    }
    out
}

/// Whether a cross-backend comparison can run: at least two backends are available. With
/// fewer it says on stderr that the test was skipped (once per test binary) and returns
/// false; when `GPUBUF_REQUIRE` is set it panics instead, so a run that promised backends
/// cannot pass by comparing one backend with itself.
///
/// # Panics
/// When fewer than two backends run and `GPUBUF_REQUIRE` is set.
pub fn cross_backend_ready() -> bool {
    static SAID: std::sync::Once = std::sync::Once::new();
    let kinds = available_backends();
    if kinds.len() >= 2 {
        return true;
    }
    let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
    let required = std::env::var("GPUBUF_REQUIRE").map(|v| !v.trim().is_empty()).unwrap_or(false);
    if required {
        panic!("cross-backend test with only {names:?} (GPUBUF_REQUIRE is set): build with the opencl or cuda feature on a machine that runs it");
    }
    SAID.call_once(|| {
        say(&format!(
            "cross-backend tests skipped: only {names:?} can run (enable the opencl or cuda feature)"
        ))
    });
    false
}

/// Runs `body` on every available backend; returns `(backend, output)` pairs, CPU first.
/// OpenCL runs once as it is and then once with each other plan kernel shape forced
/// (blocks, items, rows): three runs on every OpenCL device.
///
/// # Errors
/// The first error a backend returns.
pub fn on_every_backend<E: EachBackend>(body: &E) -> Result<Vec<(BackendKind, E::Output)>> {
    #[allow(unused_mut)]
    let mut out = vec![(BackendKind::Cpu, body.run(&cpu())?)];
    #[cfg(feature = "opencl")]
    if let Some(b) = opencl() {
        out.push((BackendKind::OpenCl, body.run(&b)?));
        for kernel in [
            gpubuf::opencl::PlanKernel::Blocks,
            gpubuf::opencl::PlanKernel::Items,
            gpubuf::opencl::PlanKernel::Rows,
        ] {
            // The handle's own shape already ran (an unusable setting fails in its run).
            if b.plan_kernel().ok() != Some(kernel) {
                out.push((BackendKind::OpenCl, body.run(&b.with_plan_kernel(kernel))?));
            }
        }
    }
    #[cfg(feature = "cuda")]
    if let Some(b) = cuda() {
        out.push((BackendKind::Cuda, body.run(&b)?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::initial_environment;

    #[test]
    fn a_variable_split_in_place_is_joined_back() {
        let block = b"A=1\0OCL_ICD_FILENAMES=libpocl.so.2\0libnvidia-opencl.so.1\0B=x=y\0\0";
        let vars = initial_environment(block);
        let text: Vec<(String, String)> = vars
            .into_iter()
            .map(|(k, v)| {
                (String::from_utf8_lossy(&k).into_owned(), String::from_utf8_lossy(&v).into_owned())
            })
            .collect();
        assert_eq!(
            text,
            [
                ("A".into(), "1".into()),
                ("OCL_ICD_FILENAMES".into(), "libpocl.so.2:libnvidia-opencl.so.1".into()),
                ("B".into(), "x=y".into())
            ]
        );
        assert!(initial_environment(b"orphan\0").is_empty(), "a piece with nothing before it is dropped");
    }
}
