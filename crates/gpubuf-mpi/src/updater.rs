//! [`HaloUpdater`]: halo updates of several quantities with every neighbour rank.

use crate::comm::Comm;
use crate::direct::{host_pointers, host_resident};
use crate::staging::Staging;
use crate::tags::{self, Claim, Key};
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{Element, Error, Kernels, Result};
use gpubuf_halo::{
    receiving_boundary, Boundary, HaloDataTransformer, HaloExchangeSpec, Partitioner, QuantityHaloSpec,
};
use mpi::raw::AsRaw;
use mpi::request::{Request, StaticScope};
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::{Destination, Source};
use std::collections::BTreeMap;

/// One neighbour rank: its transformer and the host staging buffers of its messages.
struct Link<B: Kernels, T: Element> {
    rank: usize,
    transformer: HaloDataTransformer<B, T>,
    /// Specs per quantity in the transformer (boundaries shared with this neighbour).
    per_quantity: usize,
    send_tag: i32,
    recv_tag: i32,
    /// Whether MPI reads the pack buffer and writes the unpack buffer in place (host memory:
    /// the CPU backend); else both go through the staging buffers.
    direct: bool,
    /// Message length in bytes (each way).
    bytes: usize,
    send: Staging,
    recv: Staging,
}

/// The x and (for vectors) y quantity lists of one transformer.
type Lists<'q, B, T> = (Vec<&'q NDBuffer<B, T>>, Option<Vec<&'q NDBuffer<B, T>>>);

/// The requests of an update between `start` and `wait`: every request still refers to a
/// staging buffer of the updater.
struct Flight {
    /// Receives not completed yet, with the index of their link.
    recvs: Vec<Request<'static, [u8], StaticScope>>,
    recv_links: Vec<usize>,
    sends: Vec<Request<'static, [u8], StaticScope>>,
    /// Links whose message arrived and is not unpacked yet (an unpack failed).
    arrived: Vec<usize>,
}

/// Halo updates after NDSL's `HaloUpdater`: one [`HaloDataTransformer`] per neighbour rank
/// holding every boundary shared with it, for several quantities at once (scalars, or
/// vectors as x and y lists). [`HaloUpdater::start`] posts the receives, packs (one launch
/// per neighbour) and sends; [`HaloUpdater::wait`] unpacks each neighbour's message as it
/// arrives.
///
/// Host-resident pack and unpack buffers (the CPU backend) are handed to MPI in place;
/// device buffers are staged through host memory (no device-aware MPI is assumed).
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
    links: Vec<Link<B, T>>,
    quantities: usize,
    vector: bool,
    in_flight: Option<Flight>,
    /// Bytes copied through the host staging buffers so far (both ways).
    staged: usize,
    /// Released after `Drop` has completed every request.
    _claim: Claim,
    comm: Comm<'c>,
}

impl<B: Kernels, T: Element> std::fmt::Debug for HaloUpdater<'_, B, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HaloUpdater")
            .field("rank", &self.comm.get().rank())
            .field("neighbors", &self.links.iter().map(|l| l.rank).collect::<Vec<_>>())
            .field("quantities", &self.quantities)
            .field("vector", &self.vector)
            .finish()
    }
}

fn boundary_index(b: Boundary) -> usize {
    Boundary::ALL.iter().position(|&x| x == b).unwrap_or(0)
}

impl<'c, B: Kernels, T: Element> HaloUpdater<'c, B, T> {
    /// An updater for this rank of `comm` (a rank of `partitioner`): `x[q]` describes
    /// quantity `q` (for vectors its x component, with `y[q]` its y component). `name`
    /// identifies the updater on every rank (it seeds the message tags).
    ///
    /// Not collective: nothing is sent until [`HaloUpdater::start`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the communicator size differs from the
    /// partitioner's ranks, for an empty quantity list, x and y lists of different lengths,
    /// a spec without halo points (NDSL refuses them too), a partitioner naming a rank
    /// outside the communicator, or a message longer than MPI can count (`i32::MAX`
    /// bytes), or tags that an updater alive on the same communicator uses (see
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
        let comm: Comm<'c> = comm.into();
        let world: &SimpleCommunicator = comm.get();
        let size = world.size() as usize;
        let ub = tags::tag_ub(world);
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
            let direct = host_resident(&transformer)?;
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
        Ok(HaloUpdater {
            links,
            quantities: x.len(),
            vector: y.is_some(),
            in_flight: None,
            staged: 0,
            _claim: claim,
            comm,
        })
    }

    /// Bytes copied between the transformers' buffers and host staging buffers by every
    /// update so far (sent plus received): 0 when every buffer is host memory that MPI
    /// reads and writes in place (the CPU backend).
    pub fn staged_bytes(&self) -> usize {
        self.staged
    }

    /// The messages' tags: (neighbour rank, tag of the message sent to it, tag of the one
    /// received from it).
    pub fn tags(&self) -> Vec<(usize, i32, i32)> {
        self.links.iter().map(|l| (l.rank, l.send_tag, l.recv_tag)).collect()
    }

    /// Neighbour ranks, one transformer and one message each way per neighbour.
    pub fn neighbors(&self) -> Vec<usize> {
        self.links.iter().map(|l| l.rank).collect()
    }

    fn lists<'q>(
        &self,
        link: &Link<B, T>,
        x: &[&'q NDBuffer<B, T>],
        y: Option<&[&'q NDBuffer<B, T>]>,
    ) -> Result<Lists<'q, B, T>> {
        if x.len() != self.quantities || y.map(|y| y.len()) != self.vector.then_some(self.quantities) {
            return Err(Error::invalid(format!(
                "{} x / {:?} y quantities for an updater of {} {}",
                x.len(),
                y.map(|y| y.len()),
                self.quantities,
                if self.vector { "vectors" } else { "scalars" }
            )));
        }
        let expand = |v: &[&'q NDBuffer<B, T>]| -> Vec<&'q NDBuffer<B, T>> {
            v.iter().flat_map(|q| std::iter::repeat_n(*q, link.per_quantity)).collect()
        };
        Ok((expand(x), y.map(expand)))
    }

    /// Checks the quantities against every neighbour's transformer (count, shapes,
    /// strides, device) and returns the per-link lists.
    fn checked_lists<'q>(
        &self,
        x: &[&'q NDBuffer<B, T>],
        y: Option<&[&'q NDBuffer<B, T>]>,
    ) -> Result<Vec<Lists<'q, B, T>>> {
        let mut all = Vec::with_capacity(self.links.len());
        for link in &self.links {
            let (xs, ys) = self.lists(link, x, y)?;
            link.transformer.check_quantities(&xs, ys.as_deref())?;
            all.push((xs, ys));
        }
        Ok(all)
    }

    /// Packs every neighbour's message, stages it on the host, then posts the receives
    /// and sends. Every check and every fallible step comes before the first message is
    /// posted: on an error nothing is in flight and the updater is ready for another
    /// `start`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when an update is already in flight or for the wrong
    /// number of quantities; the transformer's errors for quantities of the wrong shape,
    /// strides or device; pack and transfer errors.
    pub fn start(&mut self, x: &[&NDBuffer<B, T>], y: Option<&[&NDBuffer<B, T>]>) -> Result<()> {
        if self.in_flight.is_some() {
            return Err(Error::invalid("a halo update is already in flight; call wait first"));
        }
        let _span = tracing::debug_span!("halo.start", neighbors = self.links.len()).entered();
        let lists = self.checked_lists(x, y)?;
        for (link, (xs, ys)) in self.links.iter_mut().zip(&lists) {
            link.transformer.async_pack(xs, ys.as_deref())?;
        }
        // Where each message is sent from and received into: (send, receive) pointers.
        let mut places = Vec::with_capacity(self.links.len());
        for link in &mut self.links {
            if link.direct {
                // The pack must be complete before MPI reads its buffer.
                link.transformer.synchronize()?;
                places.push(host_pointers(&link.transformer)?);
            } else {
                // SAFETY: no update is in flight (checked above), so MPI holds no request
                // on this buffer.
                let send = unsafe { link.send.bytes_mut() };
                link.transformer.pack_buffer()?.read_into(0, send)?;
                self.staged = self.staged.saturating_add(2 * link.bytes);
                places.push((link.send.as_ptr(), link.recv.as_ptr()));
            }
        }
        // Nothing below can fail (the lists never grow past their capacity, message
        // lengths fit an MPI count): no request is ever dropped unfinished.
        let (mut recvs, mut sends) =
            (Vec::with_capacity(self.links.len()), Vec::with_capacity(self.links.len()));
        for (link, &(_, into)) in self.links.iter().zip(&places) {
            // SAFETY: `into` is `link.bytes` bytes of either `link.recv` (a live allocation
            // owned by the updater, held by raw pointer) or, for a direct link, the
            // transformer's unpack buffer (a CPU allocation of its own, which the updater's
            // private transformer holds). Nothing else reads, writes or frees those bytes
            // until this request completes: `wait` completes it before unpacking, `start`
            // refuses to run while it is in flight, no other code reaches the transformer,
            // and `Drop` completes it before the links (and their buffers) are freed; a
            // leaked updater leaks the buffers too.
            let buf: &'static mut [u8] = unsafe { std::slice::from_raw_parts_mut(into, link.bytes) };
            let p = self.comm.get().process_at_rank(link.rank as i32);
            recvs.push(p.immediate_receive_into_with_tag(StaticScope, buf, link.recv_tag));
        }
        for (link, &(from, _)) in self.links.iter().zip(&places) {
            // SAFETY: as for the receive buffer: `from` (the staging buffer, or the pack
            // buffer of a direct link) is only written by `start` (above, before any request
            // exists; the pack is complete), which does not run again until `wait` or `Drop`
            // has completed this send; unpacking never touches the pack buffer.
            let buf: &'static [u8] = unsafe { std::slice::from_raw_parts(from, link.bytes) };
            let p = self.comm.get().process_at_rank(link.rank as i32);
            sends.push(p.immediate_send_with_tag(StaticScope, buf, link.send_tag));
        }
        let recv_links = (0..self.links.len()).collect();
        self.in_flight = Some(Flight { recvs, recv_links, sends, arrived: Vec::new() });
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
        loop {
            while let Some(&k) = flight.arrived.first() {
                let link = &mut self.links[k];
                if !link.direct {
                    // SAFETY: this link's receive completed, so MPI no longer writes its
                    // buffer.
                    let recv = unsafe { link.recv.bytes() };
                    link.transformer.receive_host(recv)?;
                }
                link.transformer.async_unpack(&lists[k].0, lists[k].1.as_deref())?;
                flight.arrived.remove(0);
            }
            if flight.recvs.is_empty() {
                break;
            }
            let i = wait_any(&mut flight.recvs);
            flight.arrived.push(flight.recv_links.remove(i));
        }
        for s in flight.sends.drain(..) {
            s.wait();
        }
        for link in &self.links {
            link.transformer.synchronize()?;
        }
        self.in_flight = None;
        Ok(())
    }

    /// Whether an update was started and not yet completed by a successful `wait`.
    pub fn in_flight(&self) -> bool {
        self.in_flight.is_some()
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

impl<B: Kernels, T: Element> Drop for HaloUpdater<'_, B, T> {
    /// Completes the messages of an update still in flight before the staging buffers go
    /// (it blocks until the neighbours' matching messages arrive, as `wait` does): MPI never
    /// writes into or reads from freed memory, and no request is dropped unfinished.
    fn drop(&mut self) {
        if let Some(flight) = self.in_flight.take() {
            for r in flight.recvs {
                r.wait();
            }
            for s in flight.sends {
                s.wait();
            }
        }
    }
}

/// Waits until one of `requests` (not empty, all active) completes, removes it and returns
/// its index. Should MPI report none active, the first one is waited for on its own.
fn wait_any(requests: &mut Vec<Request<'static, [u8], StaticScope>>) -> usize {
    let mut raw: Vec<mpi::ffi::MPI_Request> = requests.iter().map(|r| r.as_raw()).collect();
    let mut index = mpi::ffi::MPI_UNDEFINED;
    // At most 8 neighbours: the count fits.
    let count = raw.len() as std::ffi::c_int;
    // SAFETY: `raw` holds the handles of live, active, non-persistent requests that
    // `requests` owns; MPI_Waitany completes at most one, frees it and nulls its slot, and
    // writes only `index` (the status is ignored).
    unsafe { mpi::ffi::MPI_Waitany(count, raw.as_mut_ptr(), &mut index, mpi::ffi::RSMPI_STATUS_IGNORE) };
    match usize::try_from(index).ok().filter(|&i| i < requests.len()) {
        Some(i) => {
            let done = requests.remove(i);
            // SAFETY: MPI completed and freed this request: its wrapper is taken apart
            // without waiting on the (now null) handle again; the buffer it borrowed is the
            // updater's, which outlives it.
            let _ = unsafe { done.into_raw() };
            i
        }
        None => {
            requests.remove(0).wait();
            0
        }
    }
}
