//! CUDA C user programs compiled to PTX by NVRTC, with the caller's options (no GPU needed).

use crate::device::nvrtc_available;
use crate::ptx::ParamKind;
use cudarc::nvrtc::result as nv;
use gpubuf_core::{BackendKind, Error, Result};
use std::collections::HashMap;
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
    compile(&src, &opts)
}

/// Compiles a C string with NVRTC.
fn compile(src: &CString, opts: &[String]) -> Result<String> {
    let build = |log: String| Error::Build { backend: BackendKind::Cuda, log };
    let prog =
        nv::create_program(src, Some(c"user.cu")).map_err(|e| build(format!("nvrtcCreateProgram: {e:?}")))?;
    let program = Program(prog);
    // SAFETY: `prog` was created above and is destroyed once, by `program`'s drop, after
    // these calls; no option holds a NUL byte (checked by `build_options`), so cudarc's
    // C-string conversion cannot panic.
    unsafe {
        if let Err(e) = nv::compile_program(program.0, opts) {
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

/// Type-level helpers appended to a user program to read its kernels' parameter types:
/// `sig<decltype(kernel)>::n` is the parameter count, `sig<...>::at<S>::v` has bit `j` set
/// when parameter `S + j` is a pointer. C++11, no headers.
const PROBE: &str = include_str!("../../../kernels/cuda/probe.cuh");

/// Prefix of the variables the probe defines.
const PROBE_VAR: &str = "gpubuf_probe_";

/// Which parameters of a program's kernels the CUDA C source declares as pointers, for
/// [`crate::ptx::Signature::with_pointers`]: kernel name to one flag per parameter.
///
/// PTX keeps sizes only (a `float*` and an `unsigned long long` are both `.u64`), so the
/// source is compiled a second time with the same options and, appended, one
/// `extern "C" __constant__` per kernel whose value the compiler computes from
/// `decltype(kernel)` (whether each parameter type is `T*`); NVRTC writes the values into
/// the PTX, where they are read, with no GPU. Only `extern "C"` kernels declared at file
/// scope are read (the names found in `ptx`, the program's PTX from
/// [`compile_user_ptx`]); a kernel with a C++ (mangled) name, or whose count of parameters
/// does not match its PTX entry, is left out, and its 64-bit parameters stay of unknown
/// type ([`crate::ptx::ParamKind::Bits64`]). Kernels without 64-bit parameters are not
/// asked about.
///
/// # Errors
/// [`Error::BackendUnavailable`] without NVRTC; [`Error::InvalidArgument`] for a NUL byte
/// in the source or options or an unreadable `ptx`; [`Error::Build`] when the source with
/// the probe does not compile (a C++ dialect before C++11, names the probe collides with).
pub fn declared_pointers(source: &str, options: &str, ptx: &str) -> Result<HashMap<String, Vec<bool>>> {
    let asked: Vec<(usize, crate::ptx::Signature)> = crate::ptx::entries(ptx)?
        .into_iter()
        .filter(|s| {
            let c_name =
                !s.name.starts_with("_Z") && s.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            c_name && s.params.iter().any(|p| matches!(p.kind, ParamKind::Bits64))
        })
        .enumerate()
        .collect();
    let mut out = HashMap::new();
    if asked.is_empty() {
        return Ok(out);
    }
    let values = match probe(source, options, &asked) {
        Ok(values) => values,
        // One kernel the probe cannot name (declared in a namespace, say) fails the whole
        // compile: then each kernel is asked on its own, and those that fail stay unknown.
        Err(Error::Build { .. }) if asked.len() > 1 => {
            let mut values = HashMap::new();
            for one in asked.chunks(1) {
                values.extend(probe(source, options, one).unwrap_or_default());
            }
            values
        }
        Err(e) => return Err(e),
    };
    for (i, s) in asked {
        let n = s.params.len();
        if values.get(&format!("{i}_n")).copied() != Some(n as u64) {
            continue; // another declaration than the entry's, or none read
        }
        let words: Option<Vec<u64>> =
            (0..n.div_ceil(64)).map(|w| values.get(&format!("{i}_w{w}")).copied()).collect();
        let Some(words) = words else { continue };
        out.insert(s.name, (0..n).map(|j| words[j / 64] >> (j % 64) & 1 == 1).collect());
    }
    Ok(out)
}

/// Prefix of the probe's variables in the embedded images (`xtask/cudagen.py` appends them
/// by kernel name: `<prefix><name>_n`, `<prefix><name>_w<k>`).
const EMBEDDED_PROBE_VAR: &str = "kernel_";

/// The pointer parameters of the kernels of an embedded image's PTX, read from the probe's
/// variables it carries (see [`crate::aot::STENCIL`]): kernel name to one flag per
/// parameter. No NVRTC. A kernel without the variables, or whose count differs from its
/// entry's, is left out.
///
/// # Errors
/// [`Error::InvalidArgument`] when the PTX's entries cannot be read.
pub fn embedded_pointers(ptx: &str) -> Result<HashMap<String, Vec<bool>>> {
    let values = probe_values(ptx);
    let mut out = HashMap::new();
    for s in crate::ptx::entries(ptx)? {
        let n = s.params.len();
        let key = |what: String| values.get(&format!("{EMBEDDED_PROBE_VAR}{}_{what}", s.name)).copied();
        if key("n".into()) != Some(n as u64) {
            continue;
        }
        let words: Option<Vec<u64>> = (0..n.div_ceil(64)).map(|w| key(format!("w{w}"))).collect();
        let Some(words) = words else { continue };
        out.insert(s.name, (0..n).map(|j| words[j / 64] >> (j % 64) & 1 == 1).collect());
    }
    Ok(out)
}

/// Compiles `source` with the probe for the kernels `asked` (by their index among all
/// those asked) and returns the probe's values.
fn probe(
    source: &str,
    options: &str,
    asked: &[(usize, crate::ptx::Signature)],
) -> Result<HashMap<String, u64>> {
    let mut text = format!("{source}\n{PROBE}");
    for (i, s) in asked {
        let (name, n) = (&s.name, s.params.len());
        let sig = format!("gpubuf_sig_probe::sig<decltype({name})>");
        text.push_str(&format!(
            "extern \"C\" __constant__ unsigned long long {PROBE_VAR}{i}_n = {sig}::n;\n"
        ));
        for w in 0..n.div_ceil(64) {
            text.push_str(&format!(
                "extern \"C\" __constant__ unsigned long long {PROBE_VAR}{i}_w{w} = {sig}::at<{}>::v;\n",
                w * 64
            ));
        }
    }
    Ok(probe_values(&compile_user_ptx(&text, options)?))
}

/// The probe's variables in a PTX module: name (without [`PROBE_VAR`]) to value. A
/// variable without an initializer is zero.
fn probe_values(ptx: &str) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    for line in ptx.lines() {
        let mut tokens = line.split_whitespace();
        let Some(var) = tokens.find_map(|t| t.strip_prefix(PROBE_VAR)) else { continue };
        let var = var.trim_end_matches(';');
        let value = match line.split_once('=') {
            None => Some(0),
            Some((_, v)) => {
                let v = v.trim().trim_end_matches(';').trim();
                match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
                    Some(hex) => u64::from_str_radix(hex, 16).ok(),
                    None => v.parse::<u64>().ok(),
                }
            }
        };
        if let Some(value) = value {
            out.insert(var.to_string(), value);
        }
    }
    out
}
