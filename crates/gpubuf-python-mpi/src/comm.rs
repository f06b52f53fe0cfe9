//! The communicator of a Python updater: a duplicate (`MPI_Comm_dup`) of the mpi4py
//! communicator it was made over, so its messages never mix with the user's own on that
//! communicator, owned by the updater and freed with it while MPI is still running.

use crate::errors::invalid;
use gpubuf_mpi::mpi::ffi;
use gpubuf_mpi::mpi::raw::FromRaw;
use gpubuf_mpi::mpi::topology::SimpleCommunicator;
use pyo3::prelude::*;

/// Whether MPI is running: initialised (mpi4py does it on import) and not finalised.
pub fn running() -> bool {
    gpubuf_mpi::mpi::environment::is_initialized() && !gpubuf_mpi::mpi::environment::is_finalized()
}

/// The MPI library's version string (`MPI_Get_library_version`), to compare with mpi4py's.
pub fn library_version() -> String {
    let v = gpubuf_mpi::mpi::environment::library_version().unwrap_or_default();
    v.trim_end_matches('\0').trim_end().to_string()
}

/// A duplicate of the communicator whose handle is `handle` (mpi4py's
/// `MPI._handleof(comm)`). Collective over that communicator.
///
/// # Errors
/// `InvalidArgumentError` when MPI is not running or the handle is null; MPI's error code
/// when the duplication fails.
pub fn dup(handle: usize) -> PyResult<SimpleCommunicator> {
    if !running() {
        return Err(invalid("MPI is not running: import mpi4py.MPI first (and not after MPI.Finalize)"));
    }
    if handle == 0 {
        return Err(invalid("the communicator is MPI.COMM_NULL"));
    }
    // Open MPI's handles are pointers, mpi4py's `_handleof` their address.
    let raw = ffi::MPI_Comm(handle as *mut _);
    // SAFETY: reads an immutable handle constant of the MPI library.
    let mut new = unsafe { ffi::RSMPI_COMM_NULL };
    // SAFETY: `raw` is a live communicator of this process (mpi4py's, whose object the
    // caller holds); MPI writes `new`.
    let code = unsafe { ffi::MPI_Comm_dup(raw, &mut new) };
    // SAFETY: as above, a constant.
    if code != ffi::MPI_SUCCESS as std::ffi::c_int || new == unsafe { ffi::RSMPI_COMM_NULL } {
        return Err(invalid(format!("MPI_Comm_dup failed with MPI error code {code}")));
    }
    // SAFETY: `new` is a fresh intra-communicator of this process (a duplicate of one),
    // owned by the value returned, which frees it once (see `Updater`'s drop in
    // `updater.rs`: never after MPI_Finalize).
    Ok(unsafe { SimpleCommunicator::from_raw(new) })
}
