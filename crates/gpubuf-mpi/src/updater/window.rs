//! Updaters with links through the node's shared window ([`HaloUpdater::on_node`]):
//! packing straight into the neighbour's slot, unpacking straight from this rank's.

use super::{HaloUpdater, Link};
use crate::comm::Comm;
use crate::hostplan;
use crate::requests::Requests;
use crate::shm::{Shared, Slot};
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{Element, Error, Kernels, Result};
use gpubuf_halo::{Partitioner, QuantityHaloSpec};

impl<'c, B: Kernels, T: Element> HaloUpdater<'c, B, T> {
    /// As [`HaloUpdater::new`], with the messages between ranks of one node moved through
    /// shared memory when both sides' buffers are host memory (the CPU backend): each
    /// rank's receive slots lie in an `MPI_Win_allocate_shared` window of the node, the
    /// sender packs straight into the receiver's slot and sends a zero-byte notification,
    /// and the receiver unpacks straight from its slot, then returns a zero-byte credit
    /// (on a duplicate of the communicator) that the sender waits for before it packs into
    /// that slot again. The halo bytes then move twice per update (pack, unpack) instead of
    /// three times (pack, MPI's copy, unpack). Links to other nodes, and every link of a
    /// backend whose memory is not host memory, pass messages as [`HaloUpdater::new`] does.
    ///
    /// **Collective** over `comm`: every rank calls it (in the same order relative to other
    /// collective calls), and dropping the updater is collective over the node's ranks
    /// (the window is freed with `MPI_Win_free`): drop the updaters in the same order on
    /// every rank. An error on some ranks only (a tag clash with a live updater there)
    /// leaves the others waiting in the collective calls.
    ///
    /// # Errors
    /// As [`HaloUpdater::new`]; MPI errors making the window.
    pub fn on_node(
        backend: &B,
        comm: impl Into<Comm<'c>>,
        partitioner: &dyn Partitioner,
        x: &[QuantityHaloSpec],
        y: Option<&[QuantityHaloSpec]>,
        name: &str,
    ) -> Result<Self> {
        Self::build(backend, comm.into(), partitioner, x, y, name, true)
    }
}

fn outside_host() -> Error {
    Error::invalid("a shared-memory halo link got quantities outside host memory")
}

/// Waits for the credit of link `k`'s previous message (the neighbour unpacked it), packs
/// into the neighbour's slot and starts the receive of the next credit. The caller then
/// starts the zero-byte notification.
pub(super) fn pack<B: Kernels, T: Element>(
    link: &Link<B, T>,
    k: usize,
    slot: Slot,
    shared: &Shared,
    credits: &mut Requests,
    xs: &[&NDBuffer<B, T>],
    ys: Option<&[&NDBuffer<B, T>]>,
) -> Result<()> {
    credits.wait_receive(k)?;
    shared.sync();
    let q: Vec<&NDBuffer<B, T>> = xs.iter().chain(ys.into_iter().flatten()).copied().collect();
    // SAFETY: `slot.peer` is the neighbour's slot of `link.bytes` bytes for this rank's
    // message (the plan's buffer), 64-byte aligned, in the node's window, which `shared`
    // keeps mapped. Only this rank writes it, and only here: the neighbour reads it after
    // this update's notification, and returns the credit awaited above once it no longer
    // does (the first update awaits none: the slot is fresh).
    if !unsafe { hostplan::run(&link.transformer.compiled().pack, &q, slot.peer, true)? } {
        return Err(outside_host());
    }
    shared.sync();
    credits.start_receive(k)
}

/// Unpacks link `k`'s message (its notification arrived) from this rank's slot and
/// returns the credit.
pub(super) fn unpack<B: Kernels, T: Element>(
    link: &Link<B, T>,
    k: usize,
    slot: Slot,
    shared: &Shared,
    credits: &mut Requests,
    xs: &[&NDBuffer<B, T>],
    ys: Option<&[&NDBuffer<B, T>]>,
) -> Result<()> {
    shared.sync();
    let q: Vec<&NDBuffer<B, T>> = xs.iter().chain(ys.into_iter().flatten()).copied().collect();
    // SAFETY: `slot.own` is this rank's slot of `link.bytes` bytes for the neighbour's
    // message, 64-byte aligned, in the window `shared` keeps mapped; the neighbour wrote it
    // before its notification arrived and writes it again only after the credit below.
    if !unsafe { hostplan::run(&link.transformer.compiled().unpack, &q, slot.own, false)? } {
        return Err(outside_host());
    }
    shared.sync();
    credits.start_send(k)
}
