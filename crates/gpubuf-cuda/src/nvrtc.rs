//! CUDA C user programs compiled to PTX by NVRTC, with the caller's options (no GPU needed).

use crate::device::nvrtc_available;
use cudarc::nvrtc::result as nv;
use gpubuf_core::{BackendKind, Error, Result};
use std::ffi::{c_char, CString};

/// The option added unless the caller's options name `fmad`: no fused multiply-add
/// contraction, so `a * b + c` rounds twice as on the CPU and on OpenCL (where programs get
/// `#pragma OPENCL FP_CONTRACT OFF`).
pub const NO_FMAD: &str = "--fmad=false";

/// The NVRTC options a user program is compiled with: `options` split at whitespace (no
/// quoting: an option cannot hold a space), with [`NO_FMAD`] put first unless one of them
/// names `fmad` (`--fmad=true`, `-fmad=false`, ...).
///
/// # Errors
/// [`Error::InvalidArgument`] when `options` holds a NUL byte.
pub fn build_options(options: &str) -> Result<Vec<String>> {
    if let Some(at) = options.find('\0') {
        return Err(Error::invalid(format!("NVRTC options {options:?} hold a NUL byte at {at}")));
    }
    let mut out: Vec<String> = options.split_whitespace().map(str::to_string).collect();
    if !out.iter().any(|o| o.trim_start_matches('-').starts_with("fmad")) {
        out.insert(0, NO_FMAD.to_string());
    }
    Ok(out)
}

/// Compiles a CUDA C `source` with NVRTC and `options` (see [`build_options`]) and returns
/// its PTX. Kernels are looked up by name in the PTX: declare them `extern "C"`.
///
/// # Errors
/// [`Error::BackendUnavailable`] without NVRTC; [`Error::InvalidArgument`] when the source
/// or options hold a NUL byte; [`Error::Build`] with NVRTC's log when the source does not
/// compile or an option is not understood.
pub fn compile_user_ptx(source: &str, options: &str) -> Result<String> {
    let opts = build_options(options)?;
    let src = CString::new(source)
        .map_err(|e| Error::invalid(format!("CUDA source holds a NUL byte at {}", e.nul_position())))?;
    nvrtc_available()?;
    let _span = tracing::debug_span!("cuda.user_nvrtc", bytes = source.len()).entered();
    let build = |log: String| Error::Build { backend: BackendKind::Cuda, log };
    let prog = nv::create_program(&src, Some(c"user.cu"))
        .map_err(|e| build(format!("nvrtcCreateProgram: {e:?}")))?;
    let program = Program(prog);
    // SAFETY: `prog` was created above and is destroyed once, by `program`'s drop, after
    // these calls; no option holds a NUL byte (checked by `build_options`), so cudarc's
    // C-string conversion cannot panic.
    unsafe {
        if let Err(e) = nv::compile_program(program.0, &opts) {
            let log = nv::get_program_log(program.0).map(text).unwrap_or_default();
            return Err(build(format!("{log}\n(nvrtcCompileProgram: {e:?}; options {opts:?})")));
        }
        nv::get_ptx(program.0).map(text).map_err(|e| build(format!("nvrtcGetPTX: {e:?}")))
    }
}

/// NVRTC's NUL-terminated text as a string.
fn text(raw: Vec<c_char>) -> String {
    let bytes: Vec<u8> = raw.into_iter().take_while(|&c| c != 0).map(|c| c as u8).collect();
    String::from_utf8_lossy(&bytes).trim_end().to_string()
}

/// Destroys an NVRTC program once.
struct Program(cudarc::nvrtc::sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by `create_program`, destroyed only here.
        let _ = unsafe { nv::destroy_program(self.0) };
    }
}
