//! The per-neighbour state of a [`super::HaloUpdater`], how it is made from the
//! partitioner and the specs, and the state of an update in flight.

use super::agree::{self, LinkSig};
use crate::datatypes::{Side, Typed};
use crate::direct::{host, in_place};
use crate::node::PeerMap;
use crate::runs::Pull;
use crate::shm::Slot;
use crate::staging::Staging;
use crate::tags;
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{CopyPlan, Element, Error, Kernels, Result};
use gpubuf_halo::{
    receiving_boundary, Boundary, HaloDataTransformer, HaloExchangeSpec, Partitioner, QuantityHaloSpec,
};
use mpi::topology::{Communicator, SimpleCommunicator};
use std::collections::BTreeMap;

/// One neighbour rank: its transformer and the host staging buffers of its messages.
pub(super) struct Link<B: Kernels, T: Element> {
    pub(super) rank: usize,
    pub(super) transformer: HaloDataTransformer<B, T>,
    /// Specs per quantity in the transformer (boundaries shared with this neighbour).
    pub(super) per_quantity: usize,
    pub(super) send_tag: i32,
    pub(super) recv_tag: i32,
    /// Whether MPI reads the pack buffer and writes the unpack buffer in place (host memory,
    /// or CUDA memory with a CUDA-aware MPI); else both go through the staging buffers.
    pub(super) direct: bool,
    /// Message length in bytes (each way).
    pub(super) bytes: usize,
    pub(super) send: Staging,
    pub(super) recv: Staging,
    /// The shared-memory slots of a link through the node's window
    /// ([`super::HaloUpdater::on_node`]); its messages are then notes (see [`crate::pull`]).
    pub(super) slot: Option<Slot>,
    /// The note sent and the note received on a link through the window (empty otherwise).
    pub(super) note_out: Staging,
    pub(super) note_in: Staging,
    /// The composed copy of the neighbour's messages when this rank can map its memory.
    pub(super) pull: Option<Pull>,
    /// Whether the neighbour can map this rank's memory.
    pub(super) peer_reads: bool,
    /// The neighbour's process id (for mapping its memory).
    pub(super) peer_pid: u64,
    /// The neighbour's segments this rank has mapped (those its last note named).
    pub(super) maps: Vec<PeerMap>,
    /// Bytes received from the neighbour in one copy so far.
    pub(super) pulled: usize,
    /// The sides of the link MPI can move as derived datatypes, straight between the
    /// quantities (host memory, no negation, runs long enough; see [`crate::datatypes`]).
    pub(super) typed: Typed,
    /// Messages to the neighbour go raw, the neighbour negating them (see
    /// [`crate::negation`]): this rank's pack plan with its negation cleared.
    pub(super) raw_send: Option<CopyPlan>,
    /// Messages from the neighbour come raw: the elements of this rank's quantities (the
    /// unpack plan's sources) to negate once one is unpacked, `(quantity, offset, len)`.
    pub(super) raw_recv: Option<Vec<(usize, usize, usize)>>,
}

/// The quantities of an update in flight, held by the updater: the caller's own handles
/// when `lent` (the caller's slots hold empty placeholders meanwhile), else clones of them.
pub(super) struct Held<B: Kernels, T: Element> {
    pub(super) x: Vec<NDBuffer<B, T>>,
    pub(super) y: Option<Vec<NDBuffer<B, T>>>,
    pub(super) lent: bool,
}

/// An update between `start` and `wait`.
pub(super) struct Flight<B: Kernels, T: Element> {
    /// Its quantities.
    pub(super) held: Held<B, T>,
    /// The first error met (the update still completes every message).
    pub(super) broken: Option<Error>,
    /// Links whose neighbour copies straight from this rank's quantities in this update:
    /// `wait` completes only after their credits return.
    pub(super) direct: Vec<usize>,
}

fn boundary_index(b: Boundary) -> usize {
    Boundary::ALL.iter().position(|&x| x == b).unwrap_or(0)
}

/// This rank's links and the signatures of their messages.
pub(super) type Links<B, T> = (Vec<Link<B, T>>, Vec<LinkSig>);

/// This rank's links, made from the partitioner and the specs without any communication,
/// with the signature of each link's messages (for [`agree::agree`]).
///
/// # Errors
/// As [`super::HaloUpdater::new`], but for the disagreements between ranks.
pub(super) fn links<B: Kernels, T: Element>(
    backend: &B,
    world: &SimpleCommunicator,
    partitioner: &dyn Partitioner,
    x: &[QuantityHaloSpec],
    y: Option<&[QuantityHaloSpec]>,
    name: &str,
) -> Result<Links<B, T>> {
    let size = world.size() as usize;
    let ub = tags::tag_ub(world);
    let aware = crate::cuda_aware()?.enabled;
    crate::datatypes::from_env()?;
    if size != partitioner.total_ranks() {
        return Err(Error::invalid(format!(
            "communicator of {size} ranks for a partitioner of {}",
            partitioner.total_ranks()
        )));
    }
    if x.is_empty() || y.is_some_and(|y| y.len() != x.len()) {
        return Err(Error::invalid("an updater needs quantities, with as many y as x specs for vectors"));
    }
    if x.iter().chain(y.into_iter().flatten()).any(|s| s.n_halo == 0) {
        return Err(Error::invalid("cannot perform a halo update on zero halo points"));
    }
    let me = world.rank() as usize;
    // Outgoing links by neighbour, in the order of this rank's boundaries.
    let mut out: BTreeMap<usize, Vec<(Boundary, i32)>> = BTreeMap::new();
    for b in Boundary::ALL {
        if let Some(n) = partitioner.neighbor(me, b) {
            if n.rank >= size {
                return Err(Error::invalid(format!(
                    "the partitioner puts rank {} across {b:?} of rank {me}, in a communicator of {size}",
                    n.rank
                )));
            }
            out.entry(n.rank).or_default().push((b, n.rotation));
        }
    }
    let named = agree::name_hash(name);
    let (mut links, mut sigs) = (Vec::new(), Vec::new());
    for (&n, sends) in &out {
        // What the neighbour sends here, in the order of *its* boundaries, and which of
        // this rank's halos each part fills.
        let mut incoming: Vec<(Boundary, Boundary)> = Vec::new();
        for bs in Boundary::ALL {
            if let Some(back) = partitioner.neighbor(n, bs).filter(|nb| nb.rank == me) {
                incoming.push((bs, receiving_boundary(bs, back.rotation)));
            }
        }
        if incoming.len() != sends.len() {
            return Err(Error::invalid(format!(
                "rank {me} sends {} parts to {n} but gets {}",
                sends.len(),
                incoming.len()
            )));
        }
        incoming.sort_by_key(|p| boundary_index(p.0));
        let out_pairs: Vec<(Boundary, Boundary)> =
            sends.iter().map(|&(b, r)| (b, receiving_boundary(b, r))).collect();
        let make = |specs: &[QuantityHaloSpec]| -> Result<Vec<HaloExchangeSpec>> {
            let mut v = Vec::new();
            for s in specs {
                for (k, &(b, r)) in sends.iter().enumerate() {
                    v.push(HaloExchangeSpec {
                        specification: s.clone(),
                        pack_slices: s.boundary_slices(b, true)?,
                        pack_clockwise_rotation: r,
                        unpack_slices: s.boundary_slices(incoming[k].1, false)?,
                    });
                }
            }
            Ok(v)
        };
        let (xs, ys) = (make(x)?, y.map(make).transpose()?);
        let send_tag = tags::tag(name, &out_pairs, x.len(), y.is_some(), ub);
        let recv_tag = tags::tag(name, &incoming, x.len(), y.is_some(), ub);
        let sig = |tag, sending| agree::signature(named, tag, T::DTYPE, x.len(), &xs, ys.as_deref(), sending);
        let (send_sig, recv_sig) = (sig(send_tag, true), sig(recv_tag, false));
        let transformer = HaloDataTransformer::new(backend, xs, ys)?;
        let bytes = transformer.buffer_len().checked_mul(T::DTYPE.size()).filter(|&b| b <= i32::MAX as usize);
        let bytes = bytes.ok_or_else(|| {
            Error::invalid(format!(
                "a message of {} elements to rank {n} is longer than MPI can count",
                transformer.buffer_len()
            ))
        })?;
        // The transformer packs and unpacks as many elements: both messages of the link
        // are `bytes` long on this side.
        sigs.push(LinkSig { peer: n, send: send_sig, send_bytes: bytes, recv: recv_sig, recv_bytes: bytes });
        let direct = in_place(&transformer, aware)?;
        let typed = if direct && host(&transformer)? {
            let (c, size) = (transformer.compiled(), T::DTYPE.size());
            Typed { send: Side::new(&c.pack, size), recv: Side::new(&c.unpack, size) }
        } else {
            Typed::default()
        };
        links.push(Link {
            rank: n,
            per_quantity: sends.len(),
            send_tag,
            recv_tag,
            transformer,
            direct,
            bytes,
            send: Staging::new(if direct { 0 } else { bytes })?,
            recv: Staging::new(if direct { 0 } else { bytes })?,
            slot: None,
            note_out: Staging::new(0)?,
            note_in: Staging::new(0)?,
            pull: None,
            peer_reads: false,
            peer_pid: 0,
            maps: Vec::new(),
            pulled: 0,
            typed,
            raw_send: None,
            raw_recv: None,
        });
    }
    Ok((links, sigs))
}
