//! A failure of one rank while an updater is made, after the ranks agreed on the specs: an
//! error on every rank (the failing rank's own, the others naming it), none left waiting,
//! and the next updater of the same name works. The failures: a bad
//! `GPUBUF_MPI_CUDA_AWARE` on that rank alone, and the steps `GPUBUF_MPI_FAIL_AT` names
//! (feature `fault-injection`, on in the tests).

use super::Tile;
use gpubuf_core::{Error, Kernels, Result};
use gpubuf_mpi::mpi::topology::{Communicator, SimpleCommunicator};
use gpubuf_mpi::mpi::traits::CommunicatorCollectives;
use gpubuf_mpi::HaloUpdater;

/// Each failure on the last rank: variable, value, what that rank's error says, and
/// whether it also fails `HaloUpdater::new` (the window's steps are `on_node`'s only).
const FAILURES: [(&str, &str, &str, bool); 4] = [
    ("GPUBUF_MPI_CUDA_AWARE", "maybe", "GPUBUF_MPI_CUDA_AWARE", true),
    ("GPUBUF_MPI_FAIL_AT", "layout", "injected at layout", false),
    ("GPUBUF_MPI_FAIL_AT", "one-copy", "injected at one-copy", false),
    ("GPUBUF_MPI_FAIL_AT", "requests", "injected at requests", true),
];

pub fn one_rank_case<B: Kernels>(b: &B, comm: &SimpleCommunicator, layout: (usize, usize)) -> Result<()> {
    let tile = Tile::new(comm, layout, true)?;
    let spec = std::slice::from_ref(&tile.spec);
    let bad = comm.size() as usize - 1;
    let mut step = 0u64;
    for (var, value, says, both) in FAILURES {
        for on_node in [false, true].into_iter().filter(|&n| n || both) {
            step += 1;
            if tile.me == bad {
                std::env::set_var(var, value);
            }
            let made = if on_node {
                HaloUpdater::<B, f64>::on_node(b, comm, &tile.part, spec, None, "one rank")
            } else {
                HaloUpdater::<B, f64>::new(b, comm, &tile.part, spec, None, "one rank")
            };
            if tile.me == bad {
                std::env::remove_var(var);
            }
            let want = if tile.me == bad { says.to_string() } else { format!("rank(s) {bad} could not") };
            let how = if on_node { "on_node" } else { "new" };
            match made {
                Err(Error::InvalidArgument(msg)) if msg.contains(&want) => {}
                other => {
                    return Err(Error::invalid(format!(
                        "{how} with {var}={value} on rank {bad}: rank {} expected an error saying {want:?}, got {:?}",
                        tile.me,
                        other.map(drop)
                    )))
                }
            }
            // Every rank left the try at the same collective call: a rank that returned
            // early would be a call ahead of the others (or they would wait for it).
            let mut all = vec![0u64; comm.size() as usize];
            comm.all_gather_into(&[step][..], &mut all[..]);
            if all.iter().any(|&s| s != step) {
                return Err(Error::invalid(format!("{how} with {var}={value}: ranks out of step: {all:?}")));
            }
        }
    }
    // Nothing of the failed tries is left on the communicator or in the tags.
    for on_node in [false, true] {
        let mut up = if on_node {
            HaloUpdater::<B, f64>::on_node(b, comm, &tile.part, spec, None, "one rank")?
        } else {
            HaloUpdater::<B, f64>::new(b, comm, &tile.part, spec, None, "one rank")?
        };
        let mut u = tile.array(b, 0.25)?;
        up.update(&mut [&mut u], None)?;
        tile.verify(&u, 0.25)?;
    }
    Ok(())
}
