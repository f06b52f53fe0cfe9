//! Updaters with links through the node's shared window ([`HaloUpdater::on_node`]):
//! packing straight into the neighbour's slot, unpacking straight from this rank's.

use super::agree::settle;
use super::{HaloUpdater, Link};
use crate::comm::Comm;
use crate::direct::host;
use crate::hostplan;
use crate::pull::{self, Side};
use crate::requests::Requests;
use crate::shm::{self, Shared, Slot, Want};
use crate::staging::Staging;
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{Element, Error, Kernels, Result};
use gpubuf_halo::{Partitioner, QuantityHaloSpec};
use mpi::topology::SimpleCommunicator;
use std::sync::atomic::{fence, Ordering};

impl<'c, B: Kernels, T: Element> HaloUpdater<'c, B, T> {
    /// As [`HaloUpdater::new`], with the messages between ranks of one node moved through
    /// shared memory when both sides' buffers are host memory (the CPU backend):
    ///
    /// * **One copy**, when the sender's quantities were made by [`crate::node_buffer`]
    ///   (node-shared memory) and the receiver can map them (same user, ptrace allowed, as
    ///   for Open MPI's single-copy transport; settled per link when the updater is made):
    ///   the sender's note names its quantities, and the receiver copies its halo straight
    ///   out of them (the sender's pack plan composed with the receiver's unpack plan, row
    ///   by row), then returns a credit. The sender's [`HaloUpdate::wait`] returns only
    ///   after every such neighbour's credit: the neighbours read the quantities until then.
    /// * **Two copies** otherwise: each rank's receive slots lie in an
    ///   `MPI_Win_allocate_shared` window of the node, the sender packs straight into the
    ///   receiver's slot and sends a note, and the receiver unpacks straight from its
    ///   slot, then returns a credit (on a duplicate of the communicator) that the sender
    ///   waits for before it packs into that slot again.
    ///
    /// The sender picks the way per update, so both kinds of quantities work with the same
    /// updater. It copies in one only when nothing but the update can write its quantities
    /// meanwhile: [`HaloUpdater::start`] borrows them exclusively until the update
    /// completes, and the one-copy way is taken only when each quantity's memory is
    /// reachable through no other array handle (no clone, view or `Arc` of it lives
    /// elsewhere); otherwise the update packs into the slot, where the quantities are read
    /// only inside `start`. While a one-copy update is in flight the updater holds the
    /// quantities themselves, and the caller's handles are empty placeholders (seen only
    /// if the [`HaloUpdate`] is leaked: see there). Message passing ([`HaloUpdater::new`])
    /// moves the bytes three times (pack, MPI's copy, unpack). Links to other nodes, and
    /// every link of a backend whose memory is not host memory, pass messages as
    /// [`HaloUpdater::new`] does.
    ///
    /// **Collective** over `comm`: every rank calls it (in the same order relative to other
    /// collective calls), and dropping the updater is collective over the node's ranks
    /// (the window is freed with `MPI_Win_free`): drop the updaters in the same order on
    /// every rank. Specs that disagree between ranks, or an error of this rank's own, are
    /// an error on every rank before any window is made (as for [`HaloUpdater::new`]). A
    /// rank that fails later (laying out its slots, settling the one-copy links, making its
    /// requests) still takes part in that step, and the ranks settle each step together: an
    /// error on every rank, the window freed by all at the same point. Only an MPI error
    /// making or locking the window on some ranks leaves the others waiting.
    ///
    /// # Errors
    /// As [`HaloUpdater::new`]; MPI errors making the window.
    ///
    /// [`HaloUpdate`]: crate::HaloUpdate
    /// [`HaloUpdate::wait`]: crate::HaloUpdate::wait
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

/// Collective over `world`: the node's shared window with a slot for every link to a
/// host-memory rank of the node, then, for those links, what the one-copy path needs (see
/// [`pull::agree`]) and the notes' buffers. A rank that fails at a step still takes part in
/// it (offering nothing), and every rank settles the outcome after each ([`settle`]), so an
/// error of one rank is an error on every rank and none waits for another; the window then
/// goes on every rank at the same point.
///
/// # Errors
/// This rank's errors, or [`Error::InvalidArgument`] naming the ranks that failed; MPI
/// errors making or locking the window (the other ranks may then wait).
pub(super) fn setup<B: Kernels, T: Element>(
    world: &SimpleCommunicator,
    name: &str,
    links: &mut [Link<B, T>],
) -> Result<Shared> {
    let mut failed = None;
    let wants: Vec<Want> = links
        .iter()
        .map(|l| {
            let host = host(&l.transformer).unwrap_or_else(|e| {
                failed.get_or_insert(e);
                false
            });
            Want { rank: l.rank, bytes: l.bytes, host }
        })
        .collect();
    let (shared, slots) = shm::setup(world, &wants)?;
    let slots = settle(world, name, "make the node's window", failed.map_or(slots, Err))?;
    links.iter_mut().zip(slots).for_each(|(l, s)| l.slot = s);
    let one_copy = one_copy(&shared, links);
    settle(world, name, "settle the one-copy links", one_copy)?;
    Ok(shared)
}

/// For the links through the window: what the one-copy path needs ([`pull::agree`], on
/// the credits' communicator) and the notes' buffers.
fn one_copy<B: Kernels, T: Element>(shared: &Shared, links: &mut [Link<B, T>]) -> Result<()> {
    let injected = crate::fault::at("one-copy");
    let sides: Vec<Side<'_>> = links
        .iter()
        .filter(|l| l.slot.is_some())
        .map(|l| {
            let c = l.transformer.compiled();
            Side { rank: l.rank, pack: &c.pack, unpack: &c.unpack }
        })
        .collect();
    let agreed = pull::agree(&shared.credits, &sides)?;
    drop(sides);
    for (l, a) in links.iter_mut().filter(|l| l.slot.is_some()).zip(agreed) {
        (l.pull, l.peer_reads, l.peer_pid) = (a.pull, a.peer_reads, a.peer_pid);
        // A note names each source of the link's pack plan (a quantity per boundary).
        let note = pull::note_words(l.transformer.compiled().pack.source_lens().len()) * 8;
        (l.note_out, l.note_in) = (Staging::new(note)?, Staging::new(note)?);
    }
    injected
}

fn outside_host() -> Error {
    Error::invalid("a shared-memory halo link got quantities outside host memory")
}

/// Words of a note.
fn words(bytes: &[u8]) -> Vec<u64> {
    bytes.chunks_exact(8).map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8]))).collect()
}

/// Waits for the credit of link `k`'s previous message (the neighbour is done with it),
/// then writes this update's note: a direct note naming the quantities when `exclusive`
/// (nothing but this update reaches them until it completes), they are node-shared memory
/// and the neighbour can map it (`Ok(true)`: the neighbour copies from them, and the update
/// completes only after its credit), else packs into the neighbour's slot (`Ok(false)`).
/// Starts the receive of the credit. The caller then starts the note's send.
/// `q` holds the link's x quantities, then its y quantities.
pub(super) fn pack<B: Kernels, T: Element>(
    link: &mut Link<B, T>,
    k: usize,
    slot: Slot,
    shared: &Shared,
    credits: &mut Requests,
    q: &[&NDBuffer<B, T>],
    exclusive: bool,
) -> Result<bool> {
    credits.wait_receive(k)?;
    let plan = &link.transformer.compiled().pack;
    let direct = if link.peer_reads && exclusive { pull::note(plan, q)? } else { None };
    let note = match direct {
        Some(note) => note,
        None => {
            shared.sync();
            // SAFETY: `slot.peer` is the neighbour's slot of `link.bytes` bytes for this
            // rank's message (the plan's buffer), 64-byte aligned, in the node's window,
            // which `shared` keeps mapped. Only this rank writes it, and only here: the
            // neighbour reads it after this update's note, and returns the credit awaited
            // above once it no longer does (the first update awaits none: the slot is
            // fresh).
            if !unsafe { hostplan::run(plan, q, slot.peer, true)? } {
                return Err(outside_host());
            }
            shared.sync();
            let mut note = vec![0u64; pull::note_words(q.len())];
            note[0] = pull::SLOT;
            note
        }
    };
    // SAFETY: the note's send is not active: the previous update's `wait` completed it,
    // and this update starts it after this call.
    let out = unsafe { link.note_out.bytes_mut() };
    if out.len() != note.len() * 8 {
        return Err(Error::invalid("a note of another length than the link's"));
    }
    out.iter_mut().zip(note.iter().flat_map(|w| w.to_ne_bytes())).for_each(|(o, b)| *o = b);
    // The quantities' last writes before the neighbour reads them.
    fence(Ordering::SeqCst);
    credits.start_receive(k)?;
    Ok(note[0] == pull::DIRECT)
}

/// Completes link `k`'s message (its note arrived): unpacks from this rank's slot, or
/// copies straight from the neighbour's quantities the note names (into `q`, when given;
/// `None` skips the halos), then returns the credit, whatever happened: the neighbour's
/// update completes, and an error here (the halo of that neighbour may be partly written)
/// is returned after it.
pub(super) fn unpack<B: Kernels, T: Element>(
    link: &mut Link<B, T>,
    k: usize,
    slot: Slot,
    shared: &Shared,
    credits: &mut Requests,
    q: Option<&[&NDBuffer<B, T>]>,
) -> Result<()> {
    // SAFETY: this link's note receive completed, so MPI no longer writes its buffer.
    let note = words(unsafe { link.note_in.bytes() });
    fence(Ordering::SeqCst);
    let done = match q {
        None => Ok(()),
        Some(q) if note.first() == Some(&pull::DIRECT) => copy(link, &note, q),
        Some(q) => {
            shared.sync();
            // SAFETY: `slot.own` is this rank's slot of `link.bytes` bytes for the
            // neighbour's message, 64-byte aligned, in the window `shared` keeps mapped; the
            // neighbour wrote it before its note arrived and writes it again only after the
            // credit below.
            let run = unsafe { hostplan::run(&link.transformer.compiled().unpack, q, slot.own, false) };
            shared.sync();
            run.and_then(|moved| if moved { Ok(()) } else { Err(outside_host()) })
        }
    };
    fence(Ordering::SeqCst);
    credits.start_send(k)?;
    done
}

/// The direct copy of a note: the neighbour's quantities it names, mapped, into this
/// rank's halos.
fn copy<B: Kernels, T: Element>(link: &mut Link<B, T>, note: &[u64], q: &[&NDBuffer<B, T>]) -> Result<()> {
    let Some(pull) = link.pull.as_ref() else {
        return Err(Error::invalid("a neighbour sent a direct note to a rank that cannot map its memory"));
    };
    let size = T::DTYPE.size();
    let srcs = pull::sources(note, pull, link.peer_pid, size, &mut link.maps)?;
    let unpack = &link.transformer.compiled().unpack;
    let done = hostplan::with_quantities(unpack.source_lens(), q, |dsts| {
        // SAFETY: each source is a read-only mapping of the neighbour's node-shared
        // memory, holding the elements the runs read (checked by `sources`); the
        // neighbour writes none of them until this rank's credit (its update waits for
        // it, and sends a direct note only for quantities its updater holds the only
        // handles of, see `exclusive` in `flight.rs`), and the mappings live in
        // `link.maps` for the call. Each destination is this
        // rank's quantity, locked for the call, holding the unpack plan's source length
        // (checked by `with_quantities`); the neighbour is another process (`agree`
        // never lets a rank read itself), so its segments are not this rank's memory.
        unsafe { pull.run(&srcs, dsts, T::DTYPE) }
    })?;
    done.ok_or_else(outside_host)??;
    link.pulled = link.pulled.saturating_add(link.bytes);
    Ok(())
}
