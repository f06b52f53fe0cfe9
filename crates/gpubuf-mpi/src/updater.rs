//! [`HaloUpdater`]: halo updates of several quantities with every neighbour rank.

mod info;
mod link;
mod window;

use crate::comm::Comm;
use crate::direct::{in_place, places};
use crate::phases::{lap, Phases};
use crate::requests::{Message, Requests};
use crate::shm::Shared;
use crate::staging::Staging;
use crate::tags::{self, Claim, Key};
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{Element, Error, Kernels, Result};
use gpubuf_halo::{
    receiving_boundary, Boundary, HaloDataTransformer, HaloExchangeSpec, Partitioner, QuantityHaloSpec,
};
use link::{Flight, Link};
use mpi::raw::AsRaw;
use mpi::topology::{Communicator, SimpleCommunicator};
use std::collections::BTreeMap;
use std::time::Instant;

/// The x and (for vectors) y quantity lists of one transformer.
type Lists<'q, B, T> = (Vec<&'q NDBuffer<B, T>>, Option<Vec<&'q NDBuffer<B, T>>>);

/// Halo updates after NDSL's `HaloUpdater`: one [`HaloDataTransformer`] per neighbour rank
/// holding every boundary shared with it, for several quantities at once (scalars, or
/// vectors as x and y lists). [`HaloUpdater::start`] starts the receives, then packs each
/// neighbour's message (one launch) and starts its send while the next one is packed;
/// [`HaloUpdater::wait`] unpacks each neighbour's message as it arrives. The messages are
/// persistent MPI requests (`MPI_Send_init`/`MPI_Recv_init`), made once per updater.
///
/// Host-resident pack and unpack buffers (the CPU backend) are handed to MPI in place, and
/// so are CUDA device buffers when MPI is CUDA-aware ([`crate::cuda_aware`], feature
/// `cuda`); other device buffers are staged through host memory. An updater made with
/// [`HaloUpdater::on_node`] (collective) instead packs host memory straight into the
/// receiving rank's shared-memory window when both ranks share a node.
///
/// # Communicator and tags
/// The updater uses the communicator it is given, borrowed (`&comm`: the updater then
/// lives no longer than it) or owned (a [`SimpleCommunicator`] moved in, giving a
/// `HaloUpdater<'static, ..>`); see [`Comm`]. Creating it is local, not collective, so ranks may create their updaters in any order.
/// Each message's tag is derived from the updater's name and the boundary pairs it
/// carries (never from a per-rank counter, so every rank computes the same tags, and two
/// ranks that are neighbours on two sides still match their messages), within the
/// communicator's `MPI_TAG_UB`. While an updater lives its tags are claimed on its
/// communicator in this process: creating one whose messages could be confused with a live
/// updater's (same neighbour, direction and tag: the same name, or a hash collision) is an
/// error, never a silent exchange of each other's data. Other messages on the same
/// communicator must not use the tags of [`HaloUpdater::tags`] while updates are in
/// flight (or use a communicator of their own).
pub struct HaloUpdater<'c, B: Kernels, T: Element> {
    /// Dropped first: completes any active request before the buffers below go.
    requests: Requests,
    /// Credits of the links through the shared window (by link index; empty requests for
    /// an updater without them). Active credit receives are cancelled on drop.
    credits: Requests,
    links: Vec<Link<B, T>>,
    quantities: usize,
    vector: bool,
    in_flight: Option<Flight>,
    /// Bytes copied through the host staging buffers so far (both ways).
    staged: usize,
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

fn boundary_index(b: Boundary) -> usize {
    Boundary::ALL.iter().position(|&x| x == b).unwrap_or(0)
}

impl<'c, B: Kernels, T: Element> HaloUpdater<'c, B, T> {
    /// An updater for this rank of `comm` (a rank of `partitioner`): `x[q]` describes
    /// quantity `q` (for vectors its x component, with `y[q]` its y component). `name`
    /// identifies the updater on every rank (it seeds the message tags).
    ///
    /// Not collective: nothing is sent until [`HaloUpdater::start`]. Every message goes
    /// through MPI; [`HaloUpdater::on_node`] moves the ones between host-memory ranks of
    /// one node through shared memory instead.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the communicator size differs from the
    /// partitioner's ranks, for an empty quantity list, x and y lists of different lengths,
    /// a spec without halo points (NDSL refuses them too), a partitioner naming a rank
    /// outside the communicator, a message longer than MPI can count (`i32::MAX`
    /// bytes), a bad `GPUBUF_MPI_CUDA_AWARE` value, or tags that an updater alive on the same communicator uses (see
    /// [`HaloUpdater`]); [`Error::OutOfMemory`] when the host staging buffers cannot be
    /// allocated; spec errors from the transformers.
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
        let size = world.size() as usize;
        let ub = tags::tag_ub(world);
        let aware = crate::cuda_aware()?.enabled;
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
        let mut links = Vec::new();
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
            let transformer = HaloDataTransformer::new(backend, make(x)?, y.map(make).transpose()?)?;
            let bytes =
                transformer.buffer_len().checked_mul(T::DTYPE.size()).filter(|&b| b <= i32::MAX as usize);
            let bytes = bytes.ok_or_else(|| {
                Error::invalid(format!(
                    "a message of {} elements to rank {n} is longer than MPI can count",
                    transformer.buffer_len()
                ))
            })?;
            let direct = in_place(&transformer, aware)?;
            links.push(Link {
                rank: n,
                per_quantity: sends.len(),
                send_tag: tags::tag(name, &out_pairs, x.len(), y.is_some(), ub),
                recv_tag: tags::tag(name, &incoming, x.len(), y.is_some(), ub),
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
            });
        }
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
        let shared = if on_node { Some(window::setup(world, &mut links)?) } else { None };
        let (mut recvs, mut sends) = (Vec::new(), Vec::new());
        let (mut credit_recvs, mut credit_sends) = (Vec::new(), Vec::new());
        let none = std::ptr::NonNull::<u8>::dangling().as_ptr();
        for l in &links {
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
            if let Some(s) = &shared {
                let comm = s.credits.as_raw();
                credit_recvs.push(Message { comm, rank, tag: 0, ptr: none, len: 0 });
                credit_sends.push(Message { comm, rank, tag: 0, ptr: none, len: 0 });
            }
        }
        // SAFETY: each message is `bytes` bytes of a staging buffer of its link (a raw
        // allocation that never moves) or, for a direct link, of its transformer's pack or
        // unpack buffer (a CPU or, with a CUDA-aware MPI, CUDA allocation of its own, held
        // by the transformer, which the updater keeps private and never finalizes). They outlive the requests, which are
        // dropped first. While a request is active nothing else touches its bytes: `start`
        // writes a send's bytes only before starting it and refuses to run while an update
        // is in flight; `wait` reads a receive's bytes (or unpacks from them) only after it
        // completed; a pack buffer is only written by packing, in `start`. A link through
        // the shared window sends and receives its notes instead (staging buffers of the
        // link, written by `start` before the send starts, read by `wait` after the receive
        // completed). The communicators (the updater's, and the credits' duplicate in
        // `shared`) are dropped after the requests.
        let requests = unsafe { Requests::new(&recvs, &sends, false)? };
        // SAFETY: zero-byte messages (no buffer), on the credits' communicator, which
        // `shared` holds until after the requests are dropped.
        let credits = unsafe { Requests::new(&credit_recvs, &credit_sends, true)? };
        Ok(HaloUpdater {
            requests,
            credits,
            shared,
            links,
            quantities: x.len(),
            vector: y.is_some(),
            in_flight: None,
            staged: 0,
            phases: Phases::default(),
            current: Phases::default(),
            _claim: claim,
            comm,
        })
    }

    /// Starts every receive, then, neighbour by neighbour, packs its message, stages it on
    /// the host (device memory only) and starts its send, so a message travels while the
    /// next one is packed. Every check comes before the first message is started.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when an update is already in flight or for the wrong
    /// number of quantities, and the transformer's errors for quantities of the wrong shape,
    /// strides or device: nothing is started, the updater is ready for another `start`.
    /// An MPI error starting the receives, or a pack or transfer error (a driver error)
    /// after they started, leaves the update in flight with the receives and sends started
    /// so far: `wait` completes those messages and then returns that error (the neighbours
    /// whose message was never sent are left waiting for it).
    pub fn start(&mut self, x: &[&NDBuffer<B, T>], y: Option<&[&NDBuffer<B, T>]>) -> Result<()> {
        if self.in_flight.is_some() {
            return Err(Error::invalid("a halo update is already in flight; call wait first"));
        }
        let _span = tracing::debug_span!("halo.start", neighbors = self.links.len()).entered();
        let t0 = Instant::now();
        let lists = self.checked_lists(x, y)?;
        self.current = Phases::default();
        // In flight from the first receive on: a receive started before a failing one stays
        // active, and must be completed by `wait` (never started again while active).
        self.in_flight = Some(Flight { arrived: Vec::new(), broken: None, direct: Vec::new() });
        if let Err(e) = self.requests.start_receives() {
            return Err(self.broken(e));
        }
        lap(&mut self.current.post, t0);
        for (k, (xs, ys)) in lists.iter().enumerate() {
            if let Err(e) = self.pack_and_send(k, xs, ys.as_deref()) {
                return Err(self.broken(e));
            }
        }
        Ok(())
    }

    /// Records why the update in flight stopped (for `wait` to return once its started
    /// messages complete) and the error `start` returns.
    fn broken(&mut self, e: Error) -> Error {
        let message = e.to_string();
        if let Some(f) = self.in_flight.as_mut() {
            f.broken = Some(e);
        }
        Error::invalid(format!(
            "halo update stopped after starting its messages ({message}); call wait to complete them"
        ))
    }

    /// Packs link `k`'s message, stages it unless MPI reads the pack buffer in place, and
    /// starts its send.
    fn pack_and_send(
        &mut self,
        k: usize,
        xs: &[&NDBuffer<B, T>],
        ys: Option<&[&NDBuffer<B, T>]>,
    ) -> Result<()> {
        let t0 = Instant::now();
        let link = &mut self.links[k];
        if let (Some(slot), Some(shared)) = (link.slot, &self.shared) {
            if window::pack(link, k, slot, shared, &mut self.credits, xs, ys)? {
                if let Some(f) = self.in_flight.as_mut() {
                    f.direct.push(k);
                }
            }
        } else if link.direct {
            link.transformer.async_pack(xs, ys)?;
            // The pack (a kernel on a device) must be complete before MPI reads its buffer.
            link.transformer.synchronize()?;
        } else {
            link.transformer.async_pack(xs, ys)?;
            // SAFETY: the send of this link is not active (the previous update completed
            // it, and this one starts it below), so MPI does not read this buffer.
            let send = unsafe { link.send.bytes_mut() };
            link.transformer.pack_buffer()?.read_into(0, send)?;
            self.staged = self.staged.saturating_add(2 * link.bytes);
        }
        let t1 = lap(&mut self.current.pack, t0);
        self.requests.start_send(k)?;
        lap(&mut self.current.send, t1);
        Ok(())
    }

    /// Completes the messages of [`HaloUpdater::start`], unpacking each neighbour's halo as
    /// soon as its message arrives (`MPI_Waitany`), then completes the sends. The
    /// quantities are checked before anything completes: on a wrong argument the update
    /// stays in flight and `wait` can be called again with the right ones.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] without an update in flight or for the wrong quantities
    /// (nothing changes); unpack errors (driver errors), after which some halos may be
    /// updated and the update stays in flight: the next `wait` unpacks the message that
    /// failed again and goes on with the others.
    pub fn wait(&mut self, x: &[&NDBuffer<B, T>], y: Option<&[&NDBuffer<B, T>]>) -> Result<()> {
        if self.in_flight.is_none() {
            return Err(Error::invalid("no halo update in flight"));
        }
        let lists = self.checked_lists(x, y)?;
        let _span = tracing::debug_span!("halo.wait", neighbors = self.links.len()).entered();
        let Some(flight) = self.in_flight.as_mut() else {
            return Err(Error::invalid("no halo update in flight"));
        };
        let phases = &mut self.current;
        let mut t = Instant::now();
        loop {
            while let Some(&k) = flight.arrived.first() {
                let link = &mut self.links[k];
                if let (Some(slot), Some(shared)) = (link.slot, &self.shared) {
                    let (xs, ys) = &lists[k];
                    if let Err(e) =
                        window::unpack(link, k, slot, shared, &mut self.credits, xs, ys.as_deref())?
                    {
                        // A copy out of the neighbour's memory failed; its credit went back
                        // all the same (the neighbour's update completes), and this update
                        // returns the error once every message completed.
                        flight.broken.get_or_insert(e);
                    }
                    flight.arrived.remove(0);
                    t = lap(&mut phases.unpack, t);
                    continue;
                }
                if !link.direct {
                    // SAFETY: this link's receive completed, so MPI no longer writes its
                    // buffer.
                    let recv = unsafe { link.recv.bytes() };
                    link.transformer.receive_host(recv)?;
                }
                link.transformer.async_unpack(&lists[k].0, lists[k].1.as_deref())?;
                flight.arrived.remove(0);
                t = lap(&mut phases.unpack, t);
            }
            let next = self.requests.wait_any_receive()?;
            t = lap(&mut phases.wait, t);
            match next {
                Some(k) => flight.arrived.push(k),
                None => break,
            }
        }
        self.requests.wait_sends()?;
        self.credits.wait_sends()?;
        // The neighbours that copy from this rank's quantities are done with them.
        while let Some(&k) = flight.direct.first() {
            self.credits.wait_receive(k)?;
            flight.direct.remove(0);
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        for link in &self.links {
            link.transformer.synchronize()?;
        }
        lap(&mut phases.complete, t);
        self.phases.add_update(&self.current);
        match self.in_flight.take().and_then(|f| f.broken) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// `start` then `wait`.
    ///
    /// # Errors
    /// As both.
    pub fn update(&mut self, x: &[&NDBuffer<B, T>], y: Option<&[&NDBuffer<B, T>]>) -> Result<()> {
        self.start(x, y)?;
        self.wait(x, y)
    }
}
