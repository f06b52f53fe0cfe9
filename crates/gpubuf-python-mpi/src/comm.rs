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

/// The handle of `comm`, an mpi4py intra-communicator (never an address from the caller:
/// mpi4py's `MPI._handleof` of an object checked to be one).
///
/// # Errors
/// `InvalidArgumentError` for anything else, or `MPI.COMM_NULL`; mpi4py's import errors.
pub fn handle_of(comm: &Bound<'_, PyAny>) -> PyResult<usize> {
    let mpi = comm.py().import("mpi4py.MPI")?;
    if !comm.is_instance(&mpi.getattr("Intracomm")?)? {
        let name = comm.get_type().name().map(|n| n.to_string()).unwrap_or_default();
        return Err(invalid(format!("comm is an mpi4py intra-communicator (MPI.Intracomm), not {name}")));
    }
    if comm.eq(mpi.getattr("COMM_NULL")?)? {
        return Err(invalid("comm is MPI.COMM_NULL"));
    }
    mpi.getattr("_handleof")?.call1((comm,))?.extract()
}

/// A duplicate of the communicator whose handle is `handle` ([`handle_of`]). Collective
/// over that communicator.
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
    // SAFETY: `raw` is the handle of an mpi4py intra-communicator object the caller holds
    // (`handle_of`), not COMM_NULL; MPI writes `new`. (An object freed with `Free()` has
    // COMM_NULL's handle in mpi4py, refused there.)
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
