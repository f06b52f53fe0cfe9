//! CUDA driver and NVRTC failures to [`gpubuf_core::Error`].

use cudarc::driver::sys::CUresult;
use cudarc::driver::DriverError;
use gpubuf_core::{BackendKind, Error};
use std::sync::OnceLock;

/// The driver's text for `e`, or its code when the driver has none (or libcuda is absent:
/// cudarc panics on a call into a library it cannot load).
pub(crate) fn text(e: DriverError) -> String {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to dlopen the library under its usual names.
    if !*PRESENT.get_or_init(|| unsafe { cudarc::driver::sys::is_culib_present() }) {
        return format!("{:?}", e.0);
    }
    e.error_string().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("{:?}", e.0))
}

/// A driver error for `what`.
pub(crate) fn driver(e: DriverError, what: &str) -> Error {
    Error::Driver { backend: BackendKind::Cuda, code: e.0 as i64, message: format!("{what}: {}", text(e)) }
}

/// A driver error for an operation that allocates `requested` bytes.
pub(crate) fn maybe_oom(e: DriverError, what: &str, requested: usize) -> Error {
    if e.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
        Error::OutOfMemory { requested, available: None, pool: None }
    } else {
        driver(e, what)
    }
}

/// Refuses a request for more bytes than the device has in total (`cuDeviceTotalMem`)
/// before the driver is asked: such a request can never succeed, and the driver may answer
/// it with `CUDA_ERROR_INVALID_VALUE` rather than out-of-memory.
///
/// # Errors
/// [`Error::OutOfMemory`] naming the request, with the device's total as `available`.
pub(crate) fn check_request(requested: usize, total: u64) -> Result<(), Error> {
    match u64::try_from(requested) {
        Ok(r) if r <= total => Ok(()),
        _ => Err(Error::OutOfMemory {
            requested,
            available: Some(usize::try_from(total).unwrap_or(usize::MAX)),
            pool: None,
        }),
    }
}

/// The error of a failed device allocation of `requested` bytes on a device of `total`
/// bytes. Out-of-memory is [`Error::OutOfMemory`]; so is `CUDA_ERROR_INVALID_VALUE`, which
/// the driver gives for sizes its allocator cannot represent: every other argument of
/// gpubuf's allocation calls (the context, a live stream of it, the out-pointer) is valid
/// by construction, so the size is the value it refuses. Other codes are driver errors.
pub(crate) fn alloc_error(e: DriverError, what: &str, requested: usize, total: u64) -> Error {
    match e.0 {
        CUresult::CUDA_ERROR_OUT_OF_MEMORY | CUresult::CUDA_ERROR_INVALID_VALUE => Error::OutOfMemory {
            requested,
            available: Some(usize::try_from(total).unwrap_or(usize::MAX)),
            pool: None,
        },
        _ => driver(e, what),
    }
}

/// The error for a missing library or device.
pub(crate) fn unavailable(reason: impl Into<String>) -> Error {
    Error::BackendUnavailable { backend: BackendKind::Cuda, reason: reason.into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oom_of(e: Error) -> (usize, Option<usize>) {
        match e {
            Error::OutOfMemory { requested, available, pool: None } => (requested, available),
            other => panic!("expected OutOfMemory, got {other:?}"),
        }
    }

    #[test]
    fn requests_up_to_the_total_reach_the_driver() {
        let total = 80u64 << 30;
        for r in [0, 1, 4096, (80usize << 30) - 1, 80usize << 30] {
            assert_eq!(check_request(r, total), Ok(()), "{r}");
        }
        assert_eq!(check_request(0, 0), Ok(()));
    }

    #[test]
    fn requests_past_the_total_are_out_of_memory_with_the_total() {
        let total = 80u64 << 30;
        for r in [(80usize << 30) + 1, 1 << 60, (1 << 60) + 12345, 1 << 62, usize::MAX] {
            let e = check_request(r, total).unwrap_err();
            assert!(e.is_retryable());
            assert_eq!(oom_of(e.clone()), (r, Some(80usize << 30)));
            let msg = e.to_string();
            assert!(msg.contains(&r.to_string()) && msg.contains(&(80u64 << 30).to_string()), "{msg}");
        }
        assert_eq!(oom_of(check_request(1, 0).unwrap_err()), (1, Some(0)));
        // A total past usize (a 32-bit host) saturates instead of wrapping.
        assert_eq!(check_request(usize::MAX, u64::MAX), Ok(()));
    }

    #[test]
    fn allocation_failures_map_to_out_of_memory() {
        let total = 1u64 << 34;
        let oom = DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        let inval = DriverError(CUresult::CUDA_ERROR_INVALID_VALUE);
        assert_eq!(oom_of(alloc_error(oom, "cuMemAllocAsync", 1 << 33, total)), (1 << 33, Some(1 << 34)));
        assert_eq!(oom_of(alloc_error(inval, "cuMemAllocAsync", 1 << 33, total)), (1 << 33, Some(1 << 34)));
        let other = alloc_error(DriverError(CUresult::CUDA_ERROR_INVALID_CONTEXT), "cuMemAlloc", 8, total);
        assert!(
            matches!(other, Error::Driver { code, .. } if code == CUresult::CUDA_ERROR_INVALID_CONTEXT as i64)
        );
        assert!(matches!(
            maybe_oom(inval, "cuLaunchKernel", 0),
            Error::Driver { code, .. } if code == CUresult::CUDA_ERROR_INVALID_VALUE as i64
        ));
    }
}
