//! The backend's own kernels compiled ahead of time and embedded in the binary.
//!
//! `cargo xtask cuda-kernels` compiles every kernel source (the CUDA prelude
//! `kernels/cuda/prelude.cuh` before sources of `kernels/shared`) with a pinned NVRTC
//! (12.0) into `crates/gpubuf-cuda/kernels/`: a cubin (SASS) for each of sm_70, sm_75,
//! sm_80, sm_86, sm_89 and sm_90, and PTX for compute_70 at PTX ISA 8.0, which drivers from
//! R525 on JIT-compile for any newer GPU. They are stored zlib-compressed (about 100 KiB
//! for all of them, 1 MiB inflated). A context inflates and loads one of them with
//! `cuModuleLoadData`, in the order of [`candidates`]:
//!
//! 1. the cubin of the device's major version with the highest minor version not above the
//!    device's (a cubin runs on later minor versions of its major: sm_86 on 8.7 and 8.9);
//! 2. else, or when the driver rejects the cubin, the PTX (compute capability 7.0 and up);
//! 3. else, or when the driver rejects the PTX (a driver older than R525 says
//!    `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`), NVRTC compiles the source at run time into a
//!    cubin for the device. Pre-Volta GPUs (6.x and older) always take this path; without
//!    NVRTC they get [`Error::BackendUnavailable`] saying so.
//!
//! The driver alone runs the embedded images: no CUDA toolkit and no NVRTC at run time.

use crate::device::nvrtc_available;
use crate::error::{driver, unavailable};
use cudarc::driver::result;
use cudarc::driver::sys::{CUmodule, CUresult};
use cudarc::nvrtc::{result as nv, sys as nvsys};
use gpubuf_core::{BackendKind, Error, Result};
use std::ffi::{c_char, c_void, CString};

/// One kernel source compiled ahead of time.
#[derive(Debug)]
pub struct Embedded {
    /// The source's name (`plan.cu`), NVRTC's name for it when compiled at run time.
    pub source: &'static str,
    /// The files its text is made of, from the repository root, in order: the CUDA prelude
    /// (`kernels/cuda/prelude.cuh`), then sources under `kernels/shared` that the OpenCL
    /// backend also compiles.
    pub parts: &'static [&'static str],
    /// The CUDA C text: the parts concatenated.
    pub text: &'static str,
    /// NVRTC options besides the architecture, the same for the embedded images and a
    /// compile at run time.
    pub options: &'static [&'static str],
    /// `(architecture, zlib-compressed cubin)`, the architecture as `10 * major + minor`
    /// (`86` for sm_86), in increasing order.
    pub cubins: &'static [(u32, &'static [u8])],
    /// `(virtual architecture, zlib-compressed PTX text)`: PTX for `compute_70` at ISA 8.0,
    /// no NUL byte.
    pub ptx: (u32, &'static [u8]),
}

mod generated {
    use super::Embedded;
    include!("../kernels/embedded.rs");
}

/// The copy-plan gather and scatter kernels (`kernels/shared/plan_blocks.h` after the CUDA
/// prelude) compiled ahead of time.
pub const PLAN: &Embedded = &generated::PLAN;

/// The demo's 5-point heat stencil (`kernels/shared/stencil.h` after the CUDA prelude,
/// `--fmad=false`) compiled ahead of time, its images carrying the signature probe, so
/// [`crate::CudaBackend::embedded_program`] knows its pointer parameters without NVRTC.
pub const STENCIL: &Embedded = &generated::STENCIL;

/// Every embedded source.
pub fn embedded() -> &'static [&'static Embedded] {
    generated::ALL
}

/// A kernel image for one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// The embedded cubin for `sm_<arch>` (`arch` = `10 * major + minor`).
    Cubin(u32),
    /// The embedded PTX for `compute_<arch>`, JIT-compiled by the driver.
    Ptx(u32),
    /// NVRTC at run time, compiling the source into a cubin for the device.
    Nvrtc,
}

impl std::fmt::Display for Choice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Choice::Cubin(a) => write!(f, "embedded cubin sm_{a}"),
            Choice::Ptx(a) => write!(f, "embedded PTX compute_{a}"),
            Choice::Nvrtc => write!(f, "NVRTC at run time"),
        }
    }
}

fn split(arch: u32) -> (u32, u32) {
    (arch / 10, arch % 10)
}

/// The images to try, in order, on a device of compute capability `major.minor`: the best
/// embedded cubin if one runs there, the PTX if the device is at least its virtual
/// architecture, and NVRTC last. Pure: no driver involved.
pub fn candidates(e: &Embedded, major: u32, minor: u32) -> Vec<Choice> {
    let mut out = Vec::with_capacity(3);
    let cubin =
        e.cubins.iter().map(|&(a, _)| a).filter(|&a| split(a).0 == major && split(a).1 <= minor).max();
    if let Some(a) = cubin {
        out.push(Choice::Cubin(a));
    }
    if (major, minor) >= split(e.ptx.0) {
        out.push(Choice::Ptx(e.ptx.0));
    }
    out.push(Choice::Nvrtc);
    out
}

/// Whether the driver refused an image as not runnable here (so the next candidate is
/// tried), rather than failing for another reason (out of memory, a lost context).
pub fn image_rejected(code: CUresult) -> bool {
    matches!(
        code,
        CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION
            | CUresult::CUDA_ERROR_INVALID_PTX
            | CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU
            | CUresult::CUDA_ERROR_INVALID_IMAGE
            | CUresult::CUDA_ERROR_INVALID_SOURCE
            | CUresult::CUDA_ERROR_JIT_COMPILER_NOT_FOUND
            | CUresult::CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC
    )
}

/// The largest image [`inflate`] accepts: far above any kernel image.
const MAX_IMAGE: usize = 64 << 20;

/// An embedded image, inflated.
///
/// # Errors
/// [`Error::BackendUnavailable`] when the image does not inflate (a corrupt build).
pub fn inflate(compressed: &[u8]) -> Result<Vec<u8>> {
    miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(compressed, MAX_IMAGE)
        .map_err(|e| unavailable(format!("an embedded kernel image does not inflate: {:?}", e.status)))
}

/// The bytes of `data` in 8-byte aligned words followed by at least one zero byte: the
/// driver reads an ELF image through aligned loads, and PTX as a NUL-terminated string.
fn aligned(data: &[u8]) -> Vec<u64> {
    let mut words = vec![0u64; data.len() / 8 + 1];
    for (w, chunk) in words.iter_mut().zip(data.chunks(8)) {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        *w = u64::from_ne_bytes(b);
    }
    words
}

/// Loads `e` into the context current on this thread, for a device of compute capability
/// `major.minor`, trying [`candidates`] in order; NVRTC compiles `e.text` when no embedded
/// image runs. Returns the module and the image that was loaded.
///
/// # Errors
/// As [`load_with`].
pub(crate) fn load(e: &Embedded, major: u32, minor: u32) -> Result<(CUmodule, Choice)> {
    load_with(e, major, minor, |_, image| {
        let image = aligned(&image);
        // SAFETY: `image` is a cubin (ELF) or NUL-terminated PTX, 8-byte aligned, alive
        // for the call; the driver copies what it keeps.
        unsafe { result::module::load_data(image.as_ptr() as *const c_void) }
    })
}

/// Tries [`candidates`] in order, handing each image (inflated, or compiled by NVRTC from
/// `e.text` with `e.options`) to `load` until one is not rejected ([`image_rejected`]).
///
/// # Errors
/// [`Error::BackendUnavailable`] when no embedded image runs here and NVRTC is missing;
/// [`Error::Build`] when NVRTC cannot compile for the device; [`Error::Driver`] when the
/// driver fails other than by rejecting an image.
pub(crate) fn load_with<T>(
    e: &Embedded,
    major: u32,
    minor: u32,
    mut load: impl FnMut(Choice, Vec<u8>) -> std::result::Result<T, result::DriverError>,
) -> Result<(T, Choice)> {
    let span = tracing::debug_span!(
        "cuda.load_module",
        source = e.source,
        capability = %format!("{major}.{minor}"),
        image = tracing::field::Empty,
    );
    let _span = span.enter();
    let mut rejected = Vec::new();
    for choice in candidates(e, major, minor) {
        let image = match choice {
            Choice::Cubin(a) => match e.cubins.iter().find(|c| c.0 == a) {
                Some(c) => inflate(c.1)?,
                None => continue,
            },
            Choice::Ptx(_) => inflate(e.ptx.1)?,
            Choice::Nvrtc => {
                if let Err(err) = nvrtc_available() {
                    let tried =
                        if rejected.is_empty() { "none embedded fits".into() } else { rejected.join("; ") };
                    return Err(unavailable(format!(
                        "no embedded image of {} runs on compute capability {major}.{minor} ({tried}), \
                         and NVRTC cannot compile one: {err}",
                        e.source
                    )));
                }
                nvrtc_cubin(e.source, e.text, e.options, major, minor)?
            }
        };
        match load(choice, image) {
            Ok(module) => {
                span.record("image", tracing::field::display(choice));
                tracing::debug!(image = %choice, "kernel module loaded");
                return Ok((module, choice));
            }
            Err(err) if image_rejected(err.0) && choice != Choice::Nvrtc => {
                tracing::debug!(image = %choice, code = ?err.0, "driver rejected the image");
                rejected.push(format!("{choice} rejected: {:?}", err.0));
            }
            Err(err) => return Err(driver(err, &format!("cuModuleLoadData({choice})"))),
        }
    }
    Err(unavailable(format!("no kernel image of {} could be loaded", e.source)))
}

/// `source` compiled by NVRTC with `options` into a cubin for `sm_<major><minor>`.
fn nvrtc_cubin(name: &str, source: &str, options: &[&str], major: u32, minor: u32) -> Result<Vec<u8>> {
    let _span = tracing::debug_span!("cuda.nvrtc", source = name).entered();
    let build = |log: String| Error::Build { backend: BackendKind::Cuda, log };
    let arch = major.saturating_mul(10).saturating_add(minor);
    let archs = nvrtc_archs();
    if let (Some(lo), Some(hi)) = (archs.first(), archs.last()) {
        if !archs.contains(&arch) {
            return Err(build(format!(
                "the installed NVRTC compiles for sm_{lo} to sm_{hi}, not for compute capability \
                 {major}.{minor} (sm_{arch}): install an NVRTC that still supports it (CUDA 12 \
                 covers sm_50 to sm_90)"
            )));
        }
    }
    let src = CString::new(source).map_err(|_| Error::invalid("CUDA source holds a NUL byte"))?;
    let cname = CString::new(name).map_err(|_| Error::invalid("source name holds a NUL byte"))?;
    let prog = Program(nv::create_program(&src, Some(&cname)).map_err(|e| build(format!("{e:?}")))?);
    let mut opts = vec![format!("--gpu-architecture=sm_{major}{minor}")];
    opts.extend(options.iter().map(|o| o.to_string()));
    // SAFETY: `prog.0` is a live program destroyed only by `prog`'s drop, after these
    // calls; the option holds no NUL byte; the cubin buffer is the size NVRTC reported.
    unsafe {
        if let Err(err) = nv::compile_program(prog.0, &opts) {
            let log = nv::get_program_log(prog.0).map(text).unwrap_or_default();
            return Err(build(format!("{log}\n(nvrtcCompileProgram: {err:?}; options {opts:?})")));
        }
        let mut size = 0usize;
        nvsys::nvrtcGetCUBINSize(prog.0, &mut size).result().map_err(|e| build(format!("{e:?}")))?;
        let mut cubin = vec![0u8; size];
        nvsys::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr() as *mut c_char)
            .result()
            .map_err(|e| build(format!("{e:?}")))?;
        Ok(cubin)
    }
}

/// The architectures the loaded NVRTC compiles for, ascending (empty if it cannot say).
pub(crate) fn nvrtc_archs() -> Vec<u32> {
    let mut n: std::ffi::c_int = 0;
    // SAFETY: writes one int.
    if unsafe { nvsys::nvrtcGetNumSupportedArchs(&mut n) }.result().is_err() || n <= 0 {
        return Vec::new();
    }
    let mut archs = vec![0 as std::ffi::c_int; n as usize];
    // SAFETY: the buffer holds the `n` ints NVRTC reported.
    if unsafe { nvsys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) }.result().is_err() {
        return Vec::new();
    }
    let mut archs: Vec<u32> = archs.into_iter().filter_map(|a| u32::try_from(a).ok()).collect();
    archs.sort_unstable();
    archs
}

fn text(raw: Vec<c_char>) -> String {
    let bytes: Vec<u8> = raw.into_iter().take_while(|&c| c != 0).map(|c| c as u8).collect();
    String::from_utf8_lossy(&bytes).trim_end().to_string()
}

/// Destroys an NVRTC program once.
struct Program(nvsys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by `create_program`, destroyed only here.
        let _ = unsafe { nv::destroy_program(self.0) };
    }
}

#[cfg(test)]
#[path = "aot_tests.rs"]
mod tests;
