//! [`HaloUpdater`]: halo updates of several quantities with every neighbour rank.

mod agree;
mod flight;
mod info;
mod link;
mod raw;
mod refuse;
mod typed;
mod window;

use crate::comm::Comm;
use crate::direct::places;
use crate::phases::Phases;
use crate::requests::{Message, Requests};
use crate::shm::Shared;
use crate::tags::{self, Claim, Key};
pub use flight::HaloUpdate;
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{Element, Kernels, Result};
use gpubuf_halo::{Partitioner, QuantityHaloSpec};
use link::{Flight, Link};
use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;

/// The x and (for vectors) y quantity lists of one transformer.
type Lists<'q, B, T> = (Vec<&'q NDBuffer<B, T>>, Option<Vec<&'q NDBuffer<B, T>>>);

/// Halo updates after NDSL's `HaloUpdater`: one [`HaloDataTransformer`] per neighbour rank
/// holding every boundary shared with it, for several quantities at once (scalars, or
/// vectors as x and y lists). [`HaloUpdater::start`] starts the receives, then packs each
/// neighbour's message (one launch) and starts its send while the next one is packed; it
/// returns the update in flight ([`HaloUpdate`]), whose [`HaloUpdate::wait`] unpacks each
/// neighbour's message as it arrives. [`HaloUpdater::update`] does both. The messages are
/// persistent MPI requests (`MPI_Send_init`/`MPI_Recv_init`), made once per updater.
///
/// Host-resident pack and unpack buffers (the CPU backend) are handed to MPI in place, and
/// so are CUDA device buffers when MPI is CUDA-aware ([`crate::cuda_aware`], feature
/// `cuda`); other device buffers are staged through host memory. By default host messages
/// go as MPI derived datatypes instead, straight between the quantities and MPI with no pack
/// or unpack, where a side's plan allows it ([`HaloUpdater::set_datatypes`]). An updater made with
/// [`HaloUpdater::on_node`] instead packs host memory straight into the receiving rank's
/// shared-memory window when both ranks share a node.
///
/// # Collective creation
/// [`HaloUpdater::new`] and [`HaloUpdater::on_node`] are collective over the
/// communicator: every rank calls them, in the same order relative to its other
/// collective calls on it. The ranks check together that the two sides of every link
/// describe the same messages (element type, quantities, halo extents, name), so specs
/// that disagree between ranks (one rank's tile a row taller, another element type, an
/// extra quantity) are an error on every rank, never a truncated message or a halo half
/// written.
///
/// # Communicator and tags
/// The updater uses the communicator it is given, borrowed (`&comm`: the updater then
/// lives no longer than it) or owned (a [`SimpleCommunicator`] moved in, giving a
/// `HaloUpdater<'static, ..>`); see [`Comm`].
/// Each message's tag is derived from the updater's name and the boundary pairs it
/// carries (never from a per-rank counter, so every rank computes the same tags, and two
/// ranks that are neighbours on two sides still match their messages), within the
/// communicator's `MPI_TAG_UB`. While an updater lives its tags are claimed on its
/// communicator in this process: creating one whose messages could be confused with a live
/// updater's (same neighbour, direction and tag: the same name, or a hash collision) is an
/// error, never a silent exchange of each other's data. Other messages on the same
/// communicator must not use the tags of [`HaloUpdater::tags`] while updates are in
/// flight (or use a communicator of their own).
///
/// [`HaloDataTransformer`]: gpubuf_halo::HaloDataTransformer
pub struct HaloUpdater<'c, B: Kernels, T: Element> {
    /// Dropped first: completes any active request before the buffers below go.
    requests: Requests,
    /// Credits of the links through the shared window (by link index; empty requests for
    /// an updater without them). Active credit receives are cancelled on drop.
    credits: Requests,
    links: Vec<Link<B, T>>,
    quantities: usize,
    vector: bool,
    in_flight: Option<Flight<B, T>>,
    /// Empty arrays put in the caller's place while an update holds its quantities.
    spare: Vec<NDBuffer<B, T>>,
    /// Bytes copied through the host staging buffers so far (both ways).
    staged: usize,
    /// Whether host links may move messages as MPI derived datatypes.
    datatypes: bool,
    /// Bytes moved as derived datatypes so far (both ways).
    typed_bytes: usize,
    /// Time per phase of the completed updates.
    phases: Phases,
    /// Time per phase of the update in flight, added to `phases` when it completes.
    current: Phases,
    /// The node's shared window, freed (collectively) after every request completed.
    shared: Option<Shared>,
    /// Released once every request is complete.
    _claim: Claim,
    comm: Comm<'c>,
}

impl<'c, B: Kernels, T: Element> HaloUpdater<'c, B, T> {
    /// An updater for this rank of `comm` (a rank of `partitioner`): `x[q]` describes
    /// quantity `q` (for vectors its x component, with `y[q]` its y component). `name`
    /// identifies the updater on every rank (it seeds the message tags).
    ///
    /// **Collective** over `comm` (one `MPI_Allreduce`, see [`HaloUpdater`], then an
    /// `MPI_Comm_dup` of `comm` on which each link's two ranks settle who negates vector
    /// components across rotated edges, see [`crate::DATATYPES_ENV`], then an
    /// `MPI_Allgather` settling that every rank made its requests): every rank calls it, in
    /// the same order relative to its other collective calls on `comm`, and every rank
    /// gets the same outcome. Every message goes through MPI;
    /// [`HaloUpdater::on_node`] moves the ones between host-memory ranks of one node
    /// through shared memory instead.
    ///
    /// # Errors
    /// On this rank: [`Error::InvalidArgument`] when the communicator size differs from the
    /// partitioner's ranks, for an empty quantity list, x and y lists of different lengths,
    /// a spec without halo points (NDSL refuses them too), a partitioner naming a rank
    /// outside the communicator, a message longer than MPI can count (`i32::MAX`
    /// bytes), a bad `GPUBUF_MPI_CUDA_AWARE` value, or tags that an updater alive on the
    /// same communicator uses (see [`HaloUpdater`]); [`Error::OutOfMemory`] when the host
    /// staging buffers cannot be allocated; spec errors from the transformers. On the other
    /// ranks then, and on every rank when the two sides of a link describe different
    /// messages (specs of another extent, element type or quantity count, another name, or
    /// a partitioner that disagrees): [`Error::InvalidArgument`] naming the ranks and links
    /// at fault.
    ///
    /// [`Error::InvalidArgument`]: gpubuf_core::Error::InvalidArgument
    /// [`Error::OutOfMemory`]: gpubuf_core::Error::OutOfMemory
    pub fn new(
        backend: &B,
        comm: impl Into<Comm<'c>>,
        partitioner: &dyn Partitioner,
        x: &[QuantityHaloSpec],
        y: Option<&[QuantityHaloSpec]>,
        name: &str,
    ) -> Result<Self> {
        Self::build(backend, comm.into(), partitioner, x, y, name, false)
    }

    fn build(
        backend: &B,
        comm: Comm<'c>,
        partitioner: &dyn Partitioner,
        x: &[QuantityHaloSpec],
        y: Option<&[QuantityHaloSpec]>,
        name: &str,
        on_node: bool,
    ) -> Result<Self> {
        let world: &SimpleCommunicator = comm.get();
        // Everything local first; a rank that fails here still takes part in the
        // agreement, so every rank returns an error and none waits for the others.
        let local = link::links::<B, T>(backend, world, partitioner, x, y, name).and_then(|(links, sigs)| {
            let keys = links
                .iter()
                .flat_map(|l| {
                    [
                        Key { peer: l.rank, send: true, tag: l.send_tag },
                        Key { peer: l.rank, send: false, tag: l.recv_tag },
                    ]
                })
                .collect();
            let claim = tags::claim(world, name, keys)?;
            Ok((links, sigs, claim, crate::cuda_aware()?.enabled))
        });
        let agreed = agree::agree(world, name, on_node, local.as_ref().ok().map(|l| l.1.as_slice()));
        let (mut links, _, claim, aware) = local?;
        agreed?;
        // Each step with the neighbours ends on every rank alike: an error of one rank is
        // an error of all (`agree::settle`), so no rank waits for one that gave up.
        let shared = if on_node { Some(window::setup(world, name, &mut links)?) } else { None };
        let made =
            raw::setup(world, &mut links).and_then(|()| requests(world, &links, shared.as_ref(), aware));
        let (requests, credits) = agree::settle(world, name, "settle its links and make its requests", made)?;
        Ok(HaloUpdater {
            requests,
            credits,
            shared,
            links,
            quantities: x.len(),
            vector: y.is_some(),
            in_flight: None,
            spare: Vec::new(),
            staged: 0,
            datatypes: crate::datatypes::from_env().unwrap_or(crate::datatypes::DEFAULT),
            typed_bytes: 0,
            phases: Phases::default(),
            current: Phases::default(),
            _claim: claim,
            comm,
        })
    }
}

/// The persistent requests of `links` (messages on `world`, the updater's communicator,
/// then the credits of the links through `shared`, on its duplicate), made once the links
/// are settled; `aware`: CUDA buffers go to MPI in place.
fn requests<B: Kernels, T: Element>(
    world: &SimpleCommunicator,
    links: &[Link<B, T>],
    shared: Option<&Shared>,
    aware: bool,
) -> Result<(Requests, Requests)> {
    let (mut recvs, mut sends) = (Vec::new(), Vec::new());
    let (mut credit_recvs, mut credit_sends) = (Vec::new(), Vec::new());
    let none = std::ptr::NonNull::<u8>::dangling().as_ptr();
    for l in links {
        let (from, into, len) = if l.slot.is_some() {
            (l.note_out.as_ptr(), l.note_in.as_ptr(), l.note_out.len())
        } else if l.direct {
            let (from, into) = places(&l.transformer, aware)?;
            (from, into, l.bytes)
        } else {
            (l.send.as_ptr(), l.recv.as_ptr(), l.bytes)
        };
        let rank = l.rank as i32; // below the communicator's size, an i32
        let comm = world.as_raw();
        recvs.push(Message { comm, rank, tag: l.recv_tag, ptr: into, len });
        sends.push(Message { comm, rank, tag: l.send_tag, ptr: from, len });
        if let Some(s) = shared {
            let comm = s.credits.as_raw();
            credit_recvs.push(Message { comm, rank, tag: 0, ptr: none, len: 0 });
            credit_sends.push(Message { comm, rank, tag: 0, ptr: none, len: 0 });
        }
    }
    // SAFETY: each message is `bytes` bytes of a staging buffer of its link (a raw
    // allocation that never moves) or, for a direct link, of its transformer's pack or
    // unpack buffer (a CPU or, with a CUDA-aware MPI, CUDA allocation of its own, held by
    // the transformer, which the updater keeps private and never finalizes). The updater
    // holds the links and the communicators (its own, and the credits' duplicate in
    // `shared`) and drops its requests first; a caller that does not make the updater
    // drops them before the links and `shared`. While a request is active nothing else
    // touches its bytes: `start` writes a send's bytes only before starting it, and only
    // once the previous update completed (it completes one left in flight first); `wait`
    // reads a receive's bytes (or unpacks from them) only after it completed; a pack
    // buffer is only written by packing, in `start`. A link through the shared window
    // sends and receives its notes instead (staging buffers of the link, written by
    // `start` before the send starts, read by `wait` after the receive completed).
    let requests = unsafe { Requests::new(&recvs, &sends, false)? };
    // SAFETY: zero-byte messages (no buffer), on the credits' communicator, which `shared`
    // holds until after the requests are dropped.
    let credits = unsafe { Requests::new(&credit_recvs, &credit_sends, true)? };
    crate::fault::at("requests")?;
    Ok((requests, credits))
}
