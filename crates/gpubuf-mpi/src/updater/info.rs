//! The updater's read-only accessors, its `Debug` form and the per-link quantity lists.

use super::{HaloUpdater, Link, Lists};
use crate::phases::Phases;
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{Element, Error, Kernels, Result};
use mpi::topology::Communicator;

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

impl<B: Kernels, T: Element> HaloUpdater<'_, B, T> {
    /// Whether host links move their messages as MPI derived datatypes, straight between
    /// the quantities and MPI with no pack or unpack buffer (see [`crate::DATATYPES_ENV`]
    /// for the default). A side whose plan negates (vector components across rotated
    /// edges, unless the link settled at creation that its receiver negates) or is too
    /// fragmented, a link through the shared window, device memory, and an update whose
    /// quantities are reachable through other handles (a clone kept elsewhere) still pack
    /// and unpack.
    pub fn datatypes(&self) -> bool {
        self.datatypes
    }

    /// Switches the datatype path on or off for the next updates (each side of a link
    /// picks on its own: the two ranks need not agree). Who negates the vector components
    /// across a rotated edge was settled when the updater was made and does not change:
    /// a raw message goes through the buffers when datatypes are off, and its receiver
    /// still negates it.
    pub fn set_datatypes(&mut self, on: bool) {
        self.datatypes = on;
    }

    /// Bytes moved as derived datatypes so far, sent and received (0 with the datatype
    /// path off).
    pub fn typed_bytes(&self) -> usize {
        self.typed_bytes
    }

    /// Bytes copied between the transformers' buffers and host staging buffers by every
    /// update so far (sent plus received): 0 when every buffer is host memory that MPI
    /// reads and writes in place (the CPU backend).
    pub fn staged_bytes(&self) -> usize {
        self.staged
    }

    /// Where this rank's time went in the updates completed so far (see [`Phases`]).
    pub fn phases(&self) -> Phases {
        self.phases
    }

    /// Clears [`HaloUpdater::phases`] (for instance after warm-up updates).
    pub fn reset_phases(&mut self) {
        self.phases = Phases::default();
    }

    /// The bytes of each message, per neighbour: (neighbour rank, bytes sent to it, which is
    /// also the bytes received from it).
    pub fn message_bytes(&self) -> Vec<(usize, usize)> {
        self.links.iter().map(|l| (l.rank, l.bytes)).collect()
    }

    /// The messages' tags: (neighbour rank, tag of the message sent to it, tag of the one
    /// received from it).
    pub fn tags(&self) -> Vec<(usize, i32, i32)> {
        self.links.iter().map(|l| (l.rank, l.send_tag, l.recv_tag)).collect()
    }

    /// The neighbour ranks whose messages go through the node's shared window (made by
    /// [`HaloUpdater::on_node`] for host memory on one node); the others pass messages.
    pub fn shared_neighbors(&self) -> Vec<usize> {
        self.links.iter().filter(|l| l.slot.is_some()).map(|l| l.rank).collect()
    }

    /// Bytes this rank received in one copy, straight from the neighbours' node-shared
    /// quantities (see [`HaloUpdater::on_node`] and [`crate::node_buffer`]), by every update
    /// so far.
    pub fn copied_bytes(&self) -> usize {
        self.links.iter().map(|l| l.pulled).sum()
    }

    /// Neighbour ranks, one transformer and one message each way per neighbour.
    pub fn neighbors(&self) -> Vec<usize> {
        self.links.iter().map(|l| l.rank).collect()
    }
    /// Whether an update is in flight outside a [`crate::HaloUpdate`]: one whose
    /// `HaloUpdate` was leaked (`std::mem::forget`), completed by the next
    /// [`HaloUpdater::start`] or when the updater drops. (While a `HaloUpdate` lives, it
    /// borrows the updater.)
    pub fn in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    pub(super) fn lists<'q>(
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
    pub(super) fn checked_lists<'q>(
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
}
