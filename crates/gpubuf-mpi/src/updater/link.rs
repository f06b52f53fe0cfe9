//! The per-neighbour state of a [`super::HaloUpdater`] and of an update in flight.

use crate::node::PeerMap;
use crate::runs::Pull;
use crate::shm::Slot;
use crate::staging::Staging;
use gpubuf_core::{Element, Error, Kernels};
use gpubuf_halo::HaloDataTransformer;

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
}

/// An update between `start` and `wait`.
pub(super) struct Flight {
    /// Links whose message arrived and is not unpacked yet (an unpack failed).
    pub(super) arrived: Vec<usize>,
    /// Why `start` stopped after posting messages (some sends were never started).
    pub(super) broken: Option<Error>,
    /// Links whose neighbour copies straight from this rank's quantities in this update:
    /// `wait` completes only after their credits return.
    pub(super) direct: Vec<usize>,
}
