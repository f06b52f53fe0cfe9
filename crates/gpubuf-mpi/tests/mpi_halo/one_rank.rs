//! A failure of one rank while an updater is made, after the ranks agreed on the specs: an
//! error on every rank (the failing rank's own, the others naming it and the step), none
//! left waiting, and the next updater of the same name works. The failures: a bad
//! `GPUBUF_MPI_CUDA_AWARE` on that rank alone, and the steps `GPUBUF_MPI_FAIL_AT` names
//! (feature `fault-injection`, on in the tests).

use super::Tile;
use gpubuf_core::{Error, Kernels, Result};
use gpubuf_mpi::mpi::collective::SystemOperation;
use gpubuf_mpi::mpi::topology::{Communicator, SimpleCommunicator};
use gpubuf_mpi::mpi::traits::CommunicatorCollectives;
use gpubuf_mpi::HaloUpdater;

/// A failure on the last rank.
struct Failure {
    var: &'static str,
    value: &'static str,
    /// What the failing rank's error says.
    own: &'static str,
    /// What the other ranks' errors say after the failing rank.
    others: &'static str,
    /// Whether it fails `HaloUpdater::new` too (the window's steps are `on_node`'s only).
    both: bool,
}

const FAILURES: [Failure; 4] = [
    Failure {
        var: "GPUBUF_MPI_CUDA_AWARE",
        value: "maybe",
        own: "GPUBUF_MPI_CUDA_AWARE",
        others: "could not make it",
        both: true,
    },
    Failure {
        var: "GPUBUF_MPI_FAIL_AT",
        value: "layout",
        own: "injected at layout",
        others: "could not make the node's window",
        both: false,
    },
    Failure {
        var: "GPUBUF_MPI_FAIL_AT",
        value: "one-copy",
        own: "injected at one-copy",
        others: "could not settle the one-copy links",
        both: false,
    },
    Failure {
        var: "GPUBUF_MPI_FAIL_AT",
        value: "requests",
        own: "injected at requests",
        others: "could not settle its links and make its requests",
        both: true,
    },
];

pub fn one_rank_case<B: Kernels>(b: &B, comm: &SimpleCommunicator, layout: (usize, usize)) -> Result<()> {
    let tile = Tile::new(comm, layout, true)?;
    let spec = std::slice::from_ref(&tile.spec);
    let bad = comm.size() as usize - 1;
    let mut step = 0u64;
    for f in FAILURES {
        for on_node in [false, true].into_iter().filter(|&n| n || f.both) {
            step += 1;
            let before = std::env::var_os(f.var);
            if tile.me == bad {
                std::env::set_var(f.var, f.value);
            }
            let made = if on_node {
                HaloUpdater::<B, f64>::on_node(b, comm, &tile.part, spec, None, "one rank")
            } else {
                HaloUpdater::<B, f64>::new(b, comm, &tile.part, spec, None, "one rank")
            };
            if tile.me == bad {
                match &before {
                    Some(v) => std::env::set_var(f.var, v),
                    None => std::env::remove_var(f.var),
                }
            }
            let want = if tile.me == bad { f.own.to_string() } else { format!("rank(s) {bad} {}", f.others) };
            let how = if on_node { "on_node" } else { "new" };
            match made {
                Err(Error::InvalidArgument(msg)) if msg.contains(&want) => {}
                other => {
                    return Err(Error::invalid(format!(
                        "{how} with {}={} on rank {bad}: rank {} expected an error saying {want:?}, got {:?}",
                        f.var,
                        f.value,
                        tile.me,
                        other.map(drop)
                    )))
                }
            }
            // Every rank left the try at the same collective call. The check has another
            // shape than the steps' own (a sum of two words, not a gather of one), so a
            // rank a call ahead of the others cannot pass it by pairing with theirs.
            let (mine, mut sum) = ([step, 1u64], [0u64; 2]);
            comm.all_reduce_into(&mine[..], &mut sum[..], SystemOperation::sum());
            let n = comm.size() as u64;
            if sum != [step * n, n] {
                return Err(Error::invalid(format!(
                    "{how} with {}={}: the ranks left at different calls ({sum:?})",
                    f.var, f.value
                )));
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
