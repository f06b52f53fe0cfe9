//! The demo across MPI ranks (feature `mpi`): `mpirun -n 4 gpubuf demo`.

use crate::demo::{layout_for, report, simulate, DemoOptions, Exchange, Outcome};
use gpubuf::halo::{QuantityHaloSpec, TilePartitioner};
use gpubuf::mpi::mpi::collective::SystemOperation;
use gpubuf::mpi::mpi::topology::{Communicator, SimpleCommunicator};
use gpubuf::mpi::mpi::traits::{CommunicatorCollectives, Root};
use gpubuf::mpi::HaloUpdater;
use gpubuf::{with_backend, BackendKind, BackendVisitor, Error, Kernels, NDBuffer, Result};

struct MpiExchange<'w, B: Kernels> {
    up: HaloUpdater<'w, B, f64>,
    world: &'w SimpleCommunicator,
    /// Bytes the last update staged through the host (the updater counts them: none for
    /// host memory, which MPI reads and writes in place).
    staged: u64,
}

impl<B: Kernels> Exchange<B> for MpiExchange<'_, B> {
    fn update(&mut self, field: &NDBuffer<B, f64>) -> Result<()> {
        let before = self.up.staged_bytes();
        // The updater borrows its quantities exclusively; a second handle of the same
        // array is fine for message passing (and keeps `Exchange` taking `&NDBuffer`).
        let mut field = field.clone();
        self.up.update(&mut [&mut field], None)?;
        let staged = self.up.staged_bytes().saturating_sub(before);
        self.staged = u64::try_from(staged).unwrap_or(u64::MAX);
        Ok(())
    }
    fn host_bytes(&self) -> u64 {
        self.staged
    }
    fn gather(&self, local: &[f64]) -> Result<Option<Vec<Vec<f64>>>> {
        let root = self.world.process_at_rank(0);
        if self.world.rank() == 0 {
            let mut all = vec![0.0f64; local.len() * self.world.size() as usize];
            root.gather_into_root(local, &mut all[..]);
            Ok(Some(all.chunks(local.len()).map(|c| c.to_vec()).collect()))
        } else {
            root.gather_into(local);
            Ok(None)
        }
    }
}

struct Ranks<'a> {
    opts: &'a DemoOptions,
    world: &'a SimpleCommunicator,
}

impl BackendVisitor for Ranks<'_> {
    type Output = Outcome;
    fn visit<B: Kernels>(self, b: B) -> Result<Self::Output> {
        let size = self.world.size() as usize;
        let layout = layout_for(size);
        let tiles = TilePartitioner::new(layout, true)?;
        let rank = self.world.rank() as usize;
        // Every rank learns whether any rank failed its checks: none goes on alone into
        // the collective calls that follow.
        let agree = |mine: Result<()>| -> Result<()> {
            let failed_here = u32::from(mine.is_err());
            let mut failed = 0u32;
            self.world.all_reduce_into(&failed_here, &mut failed, SystemOperation::sum());
            match mine {
                Err(e) => Err(e),
                Ok(()) if failed > 0 => {
                    Err(Error::invalid(format!("{failed} other rank(s) refused the run")))
                }
                Ok(()) => Ok(()),
            }
        };
        simulate(&b, self.opts, rank, layout, agree, |b, _pool, spec: &QuantityHaloSpec| {
            Ok(MpiExchange {
                up: HaloUpdater::new(b, self.world, &tiles, std::slice::from_ref(spec), None, "demo-field")?,
                world: self.world,
                staged: 0,
            })
        })
    }
}

/// Runs the demo on every rank of `MPI_COMM_WORLD` (one rank without mpirun).
///
/// # Errors
/// MPI initialisation, backend and component errors.
pub fn run(kind: BackendKind, opts: &DemoOptions) -> Result<()> {
    let universe =
        gpubuf::mpi::mpi::initialize().ok_or_else(|| Error::invalid("MPI could not be initialised"))?;
    let world = universe.world();
    let out = with_backend(kind, Ranks { opts, world: &world })?;
    report(kind, world.size() as usize, opts, out)
}
