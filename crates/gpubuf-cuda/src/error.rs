//! CUDA driver and NVRTC failures to [`gpubuf_core::Error`].

use cudarc::driver::sys::CUresult;
use cudarc::driver::DriverError;
use gpubuf_core::{BackendKind, Error};

/// A driver error for `what`.
pub(crate) fn driver(e: DriverError, what: &str) -> Error {
    let text =
        e.error_string().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("{:?}", e.0));
    Error::Driver { backend: BackendKind::Cuda, code: e.0 as i64, message: format!("{what}: {text}") }
}

/// A driver error for an operation that allocates `requested` bytes.
pub(crate) fn maybe_oom(e: DriverError, what: &str, requested: usize) -> Error {
    if e.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
        Error::OutOfMemory { requested, available: None, pool: None }
    } else {
        driver(e, what)
    }
}

/// The error for a missing library or device.
pub(crate) fn unavailable(reason: impl Into<String>) -> Error {
    Error::BackendUnavailable { backend: BackendKind::Cuda, reason: reason.into() }
}
