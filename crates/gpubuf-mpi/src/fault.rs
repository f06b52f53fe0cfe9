//! Fault injection for the tests (feature `fault-injection`): a step of making an updater
//! fails on a rank whose environment names it in `GPUBUF_MPI_FAIL_AT` (`layout`: laying
//! out this rank's slots of the node's window; `one-copy`: settling the one-copy links;
//! `requests`: making the persistent requests), so that the tests can check that a failure
//! of one rank is an error on every rank and leaves none waiting. Without the feature,
//! [`at`] is `Ok(())` and reads nothing.

#[cfg(feature = "fault-injection")]
use gpubuf_core::Error;
use gpubuf_core::Result;

/// `Err` when `GPUBUF_MPI_FAIL_AT` names `step`.
///
/// # Errors
/// [`Error::InvalidArgument`] saying the failure was injected.
#[cfg(feature = "fault-injection")]
pub(crate) fn at(step: &str) -> Result<()> {
    match std::env::var("GPUBUF_MPI_FAIL_AT") {
        Ok(s) if s == step => Err(Error::invalid(format!("failure injected at {step} (GPUBUF_MPI_FAIL_AT)"))),
        _ => Ok(()),
    }
}

/// `Ok(())`: fault injection is compiled out.
///
/// # Errors
/// None.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn at(_step: &str) -> Result<()> {
    Ok(())
}
