//! Whether a case's updaters move host messages as MPI derived datatypes, and the check
//! that they did.

use super::Mode;
use gpubuf_core::{Error, Kernels, Result};
use gpubuf_mpi::HaloUpdater;

/// Whether the updaters of a case move host messages as MPI derived datatypes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dt {
    Off,
    On,
    /// On for even ranks only: each link between an even and an odd rank has a datatype
    /// side and a buffer side.
    Even,
    /// On for ranks 0 and 3 only (the cube: rotated links join ranks of one parity, so
    /// `Even` never mixes the two sides on them; this does).
    Mixed,
}

impl Dt {
    pub fn on(self, rank: usize) -> bool {
        self == Dt::On || (self == Dt::Even && rank % 2 == 0) || (self == Dt::Mixed && rank % 3 == 0)
    }

    /// Sets it on `up`, for `rank`.
    pub fn set<B: Kernels>(self, up: &mut HaloUpdater<'_, B, f64>, rank: usize) {
        up.set_datatypes(self.on(rank));
    }

    /// Checks that `up` moved bytes as datatypes exactly when it should: on, host memory,
    /// messages (links through the window never do).
    pub fn check<B: Kernels>(self, up: &HaloUpdater<'_, B, f64>, rank: usize, mode: Mode) -> Result<()> {
        let want = self.on(rank) && B::KIND == gpubuf_core::BackendKind::Cpu && mode == Mode::Messages;
        if want != (up.typed_bytes() > 0) {
            return Err(Error::invalid(format!(
                "datatypes {self:?}: rank {rank} moved {} bytes as datatypes",
                up.typed_bytes()
            )));
        }
        Ok(())
    }
}
