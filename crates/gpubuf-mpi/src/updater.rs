//! [`HaloUpdater`]: halo updates of several quantities with every neighbour rank.

use gpubuf_buffer::NDBuffer;
use gpubuf_core::{Element, Error, Kernels, Result};
use gpubuf_halo::{
    receiving_boundary, Boundary, HaloDataTransformer, HaloExchangeSpec, Partitioner, QuantityHaloSpec,
};
use mpi::request::{Request, StaticScope};
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::{Destination, Source};
use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

/// One neighbour rank: its transformer and the host staging buffers of its messages.
struct Link<B: Kernels, T: Element> {
    rank: usize,
    transformer: HaloDataTransformer<B, T>,
    /// Specs per quantity in the transformer (boundaries shared with this neighbour).
    per_quantity: usize,
    send_tag: i32,
    recv_tag: i32,
    send: Box<[u8]>,
    recv: Box<[u8]>,
}

/// The x and (for vectors) y quantity lists of one transformer.
type Lists<'q, B, T> = (Vec<&'q NDBuffer<B, T>>, Option<Vec<&'q NDBuffer<B, T>>>);

/// Requests in flight between `start` and `wait`.
struct InFlight {
    recvs: Vec<Request<'static, [u8], StaticScope>>,
    sends: Vec<Request<'static, [u8], StaticScope>>,
}

/// Halo updates after NDSL's `HaloUpdater`: one [`HaloDataTransformer`] per neighbour rank
/// holding every boundary shared with it, for several quantities at once (scalars, or
/// vectors as x and y lists). [`HaloUpdater::start`] posts the receives, packs (one launch
/// per neighbour) and sends; [`HaloUpdater::wait`] completes the messages and unpacks.
///
/// Device buffers are staged through host memory (no device-aware MPI is assumed).
/// Message tags are derived from the updater's name and the boundary pairs a message
/// carries, never from a per-rank counter: two ranks that are neighbours on two sides, or
/// updaters created in a different order on different ranks, still match.
pub struct HaloUpdater<B: Kernels, T: Element> {
    comm: SimpleCommunicator,
    links: Vec<Link<B, T>>,
    quantities: usize,
    vector: bool,
    in_flight: Option<InFlight>,
}

impl<B: Kernels, T: Element> std::fmt::Debug for HaloUpdater<B, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HaloUpdater")
            .field("rank", &self.comm.rank())
            .field("neighbors", &self.links.iter().map(|l| l.rank).collect::<Vec<_>>())
            .field("quantities", &self.quantities)
            .field("vector", &self.vector)
            .finish()
    }
}

fn tag(name: &str, pairs: &[(Boundary, Boundary)], quantities: usize, vector: bool) -> i32 {
    let mut h = DefaultHasher::new();
    name.hash(&mut h);
    pairs.hash(&mut h);
    quantities.hash(&mut h);
    vector.hash(&mut h);
    // MPI guarantees tags up to 32767.
    (h.finish() % 32_768) as i32
}

fn boundary_index(b: Boundary) -> usize {
    Boundary::ALL.iter().position(|&x| x == b).unwrap_or(0)
}

impl<B: Kernels, T: Element> HaloUpdater<B, T> {
    /// An updater for this rank of `comm` (a rank of `partitioner`): `x[q]` describes
    /// quantity `q` (for vectors its x component, with `y[q]` its y component). `name`
    /// identifies the updater on every rank (it seeds the message tags).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the communicator size differs from the
    /// partitioner's ranks, for an empty quantity list, or for x and y lists of different
    /// lengths; spec errors from the transformers.
    pub fn new(
        backend: &B,
        comm: &SimpleCommunicator,
        partitioner: &dyn Partitioner,
        x: &[QuantityHaloSpec],
        y: Option<&[QuantityHaloSpec]>,
        name: &str,
    ) -> Result<Self> {
        let size = comm.size() as usize;
        if size != partitioner.total_ranks() {
            return Err(Error::invalid(format!(
                "communicator of {size} ranks for a partitioner of {}",
                partitioner.total_ranks()
            )));
        }
        if x.is_empty() || y.is_some_and(|y| y.len() != x.len()) {
            return Err(Error::invalid("an updater needs quantities, with as many y as x specs for vectors"));
        }
        let me = comm.rank() as usize;
        // Outgoing links by neighbour, in the order of this rank's boundaries.
        let mut out: BTreeMap<usize, Vec<(Boundary, i32)>> = BTreeMap::new();
        for b in Boundary::ALL {
            if let Some(n) = partitioner.neighbor(me, b) {
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
            let bytes = transformer.buffer_len() * T::DTYPE.size();
            links.push(Link {
                rank: n,
                per_quantity: sends.len(),
                send_tag: tag(name, &out_pairs, x.len(), y.is_some()),
                recv_tag: tag(name, &incoming, x.len(), y.is_some()),
                transformer,
                send: vec![0u8; bytes].into_boxed_slice(),
                recv: vec![0u8; bytes].into_boxed_slice(),
            });
        }
        Ok(HaloUpdater {
            comm: comm.duplicate(),
            links,
            quantities: x.len(),
            vector: y.is_some(),
            in_flight: None,
        })
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

    /// Posts the receives, packs every neighbour's message and sends it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when an update is already in flight or for the wrong
    /// quantities; pack and transfer errors.
    pub fn start(&mut self, x: &[&NDBuffer<B, T>], y: Option<&[&NDBuffer<B, T>]>) -> Result<()> {
        if self.in_flight.is_some() {
            return Err(Error::invalid("a halo update is already in flight; call wait first"));
        }
        let _span = tracing::debug_span!("halo.start", neighbors = self.links.len()).entered();
        let mut flight = InFlight { recvs: Vec::new(), sends: Vec::new() };
        for link in &mut self.links {
            // SAFETY: the receive buffer is owned by the updater and not touched again until
            // `wait` (or `Drop`) has completed this request.
            let buf: &'static mut [u8] =
                unsafe { std::slice::from_raw_parts_mut(link.recv.as_mut_ptr(), link.recv.len()) };
            let p = self.comm.process_at_rank(link.rank as i32);
            flight.recvs.push(p.immediate_receive_into_with_tag(StaticScope, buf, link.recv_tag));
        }
        let mut packed = Vec::with_capacity(self.links.len());
        for i in 0..self.links.len() {
            let (xs, ys) = self.lists(&self.links[i], x, y)?;
            let link = &mut self.links[i];
            link.transformer.async_pack(&xs, ys.as_deref())?;
            packed.push(i);
        }
        for i in packed {
            let link = &mut self.links[i];
            link.transformer.pack_buffer()?.read_into(0, &mut link.send)?;
            // SAFETY: as for the receive buffer: untouched until the send completes.
            let buf: &'static [u8] =
                unsafe { std::slice::from_raw_parts(link.send.as_ptr(), link.send.len()) };
            let p = self.comm.process_at_rank(link.rank as i32);
            flight.sends.push(p.immediate_send_with_tag(StaticScope, buf, link.send_tag));
        }
        self.in_flight = Some(flight);
        Ok(())
    }

    /// Completes the messages of [`HaloUpdater::start`] and unpacks every received halo.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] without an update in flight or for the wrong quantities;
    /// unpack errors.
    pub fn wait(&mut self, x: &[&NDBuffer<B, T>], y: Option<&[&NDBuffer<B, T>]>) -> Result<()> {
        let flight = self.in_flight.take().ok_or_else(|| Error::invalid("no halo update in flight"))?;
        let _span = tracing::debug_span!("halo.wait", neighbors = self.links.len()).entered();
        for r in flight.recvs {
            r.wait();
        }
        for s in flight.sends {
            s.wait();
        }
        for i in 0..self.links.len() {
            let (xs, ys) = self.lists(&self.links[i], x, y)?;
            let link = &mut self.links[i];
            link.transformer.receive_host(&link.recv)?;
            link.transformer.async_unpack(&xs, ys.as_deref())?;
        }
        for link in &self.links {
            link.transformer.synchronize()?;
        }
        Ok(())
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

impl<B: Kernels, T: Element> Drop for HaloUpdater<B, T> {
    fn drop(&mut self) {
        // Requests must complete before their buffers go.
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
