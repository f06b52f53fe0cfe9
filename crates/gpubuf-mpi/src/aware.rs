//! Whether MPI can read and write CUDA device memory itself ("CUDA-aware" MPI), so halo
//! messages of the CUDA backend skip the host staging copies.
//!
//! Chosen by `GPUBUF_MPI_CUDA_AWARE` when set (`1`/`yes`/`true` forces the device path,
//! `0`/`no`/`false` the staged one), else detected: Open MPI answers
//! `MPIX_Query_cuda_support()` (looked up at run time, so an MPI without it links and
//! reads as "no"). Wrongly forcing it on with an MPI that cannot read device memory makes
//! MPI fail or crash: force it only for an MPI known to be CUDA-aware.

use gpubuf_core::{Error, Result};
use std::ffi::{c_int, CStr};

/// The variable that forces the choice.
pub const CUDA_AWARE_ENV: &str = "GPUBUF_MPI_CUDA_AWARE";

/// Whether MPI takes CUDA device pointers, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaAware {
    /// Whether halo messages of the CUDA backend go to MPI in device memory.
    pub enabled: bool,
    /// How that was decided.
    pub reason: String,
}

/// Decides from the variable's value and, when it is unset, `query` (what the MPI library
/// says, `None` when it cannot say).
pub(crate) fn decide(value: Option<&str>, query: impl FnOnce() -> Option<bool>) -> Result<CudaAware> {
    let forced = |enabled| CudaAware { enabled, reason: format!("{CUDA_AWARE_ENV}={}", value.unwrap_or("")) };
    match value.map(|v| v.trim().to_ascii_lowercase()) {
        Some(v) if ["1", "yes", "true", "on"].contains(&v.as_str()) => Ok(forced(true)),
        Some(v) if ["0", "no", "false", "off"].contains(&v.as_str()) => Ok(forced(false)),
        Some(v) if !v.is_empty() => Err(Error::invalid(format!(
            "{CUDA_AWARE_ENV}={v:?}: use 1 (MPI reads device memory) or 0 (stage through the host)"
        ))),
        _ => Ok(match query() {
            Some(true) => CudaAware { enabled: true, reason: "MPIX_Query_cuda_support() = 1".into() },
            Some(false) => CudaAware { enabled: false, reason: "MPIX_Query_cuda_support() = 0".into() },
            None => CudaAware { enabled: false, reason: "this MPI has no MPIX_Query_cuda_support".into() },
        }),
    }
}

/// What Open MPI's `MPIX_Query_cuda_support` answers, `None` when the MPI library in this
/// process does not provide it.
fn query_mpi() -> Option<bool> {
    const NAME: &CStr = c"MPIX_Query_cuda_support";
    // SAFETY: `dlsym` on the default handle with a NUL-terminated name only looks the
    // symbol up.
    let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, NAME.as_ptr()) };
    if sym.is_null() {
        return None;
    }
    // SAFETY: Open MPI declares `int MPIX_Query_cuda_support(void)`; the symbol found is
    // that function, callable once MPI is initialised (updaters exist only then).
    let f: extern "C" fn() -> c_int = unsafe { std::mem::transmute(sym) };
    Some(f() != 0)
}

/// Whether halo messages of the CUDA backend go to MPI in device memory in this process,
/// and why (see the module docs).
///
/// # Errors
/// [`Error::InvalidArgument`] for a value of `GPUBUF_MPI_CUDA_AWARE` other than 1/0
/// (yes/no, true/false, on/off).
pub fn cuda_aware() -> Result<CudaAware> {
    let value = std::env::var(CUDA_AWARE_ENV).ok();
    decide(value.as_deref(), query_mpi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_wins_and_bad_values_are_errors() {
        let never = || -> Option<bool> { panic!("not asked when forced") };
        assert!(decide(Some("1"), never).is_ok_and(|a| a.enabled));
        assert!(decide(Some(" TRUE "), never).is_ok_and(|a| a.enabled));
        assert!(decide(Some("off"), never).is_ok_and(|a| !a.enabled));
        assert!(matches!(decide(Some("maybe"), never), Err(Error::InvalidArgument(_))));
        assert!(decide(Some(""), || Some(true)).is_ok_and(|a| a.enabled));
        assert!(decide(None, || Some(false)).is_ok_and(|a| !a.enabled));
        let none = decide(None, || None).map(|a| (a.enabled, a.reason));
        assert!(none.is_ok_and(|(e, r)| !e && r.contains("no MPIX")));
    }

    #[test]
    fn this_mpi_is_asked_at_run_time() {
        // Links and answers with or without the symbol; Open MPI built without CUDA says 0.
        let _ = query_mpi();
    }
}
