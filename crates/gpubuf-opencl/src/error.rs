//! OpenCL error codes to [`gpubuf_core::Error`].

use gpubuf_core::{BackendKind, Error};
use opencl3::error_codes::{error_text, ClError};

/// `CL_MEM_OBJECT_ALLOCATION_FAILURE`, `CL_OUT_OF_RESOURCES`, `CL_OUT_OF_HOST_MEMORY`.
pub(crate) const OOM_CODES: [i32; 3] = [-4, -5, -6];
/// `CL_INVALID_BUFFER_SIZE`: larger than `CL_DEVICE_MAX_MEM_ALLOC_SIZE`.
pub(crate) const INVALID_BUFFER_SIZE: i32 = -61;
/// `CL_PLATFORM_NOT_FOUND_KHR`: the ICD loader found no platform.
pub(crate) const PLATFORM_NOT_FOUND: i32 = -1001;

/// A driver error for `what` with the OpenCL status `code`.
pub(crate) fn driver(code: i32, what: &str) -> Error {
    Error::Driver {
        backend: BackendKind::OpenCl,
        code: i64::from(code),
        message: format!("{what}: {}", error_text(code)),
    }
}

/// Maps an opencl3 error for `what`.
pub(crate) fn cl(e: ClError, what: &str) -> Error {
    driver(e.0, what)
}

/// Maps the error of an operation that allocates `requested` bytes (kernel launches and
/// first touches allocate lazily on some implementations, PoCL among them).
pub(crate) fn maybe_oom(code: i32, what: &str, requested: usize) -> Error {
    if OOM_CODES.contains(&code) {
        Error::OutOfMemory { requested, available: None, pool: None }
    } else {
        driver(code, what)
    }
}

/// `CL_OUT_OF_RESOURCES`.
const OUT_OF_RESOURCES: i32 = -5;

/// The error of a user kernel's launch: `CL_OUT_OF_RESOURCES` there is the kernel asking
/// for more than the device gives one work-group (local memory past what the device
/// really offers, registers, the work-group size), a driver error saying so; the other
/// allocation failures are [`Error::OutOfMemory`].
pub(crate) fn launch_error(code: i32, kernel: &str) -> Error {
    let what = format!("clEnqueueNDRangeKernel({kernel})");
    if code == OUT_OF_RESOURCES {
        let mut e = driver(code, &what);
        if let Error::Driver { message, .. } = &mut e {
            message.push_str(
                " (the device cannot give one work-group what the launch asks: local memory, \
                 registers or work-group size; some devices keep part of the local memory they \
                 report for themselves)",
            );
        }
        return e;
    }
    maybe_oom(code, &what, 0)
}

/// The error for a missing runtime or device.
pub(crate) fn unavailable(reason: impl Into<String>) -> Error {
    Error::BackendUnavailable { backend: BackendKind::OpenCl, reason: reason.into() }
}
