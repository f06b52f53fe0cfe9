//! The per-neighbour half of [`HaloFields`]: pack one neighbour's message, hand its bytes
//! to whatever carries them (MPI, a socket, a file), take the neighbour's message in and
//! unpack it. `k` indexes [`HaloFields::links`].
//!
//! A message is the neighbour's transformers' pack buffers end to end: the scalar fields'
//! part, then the vector fields' part. The neighbour built from the same fields unpacks
//! exactly that layout (see [`NeighborLink`](super::NeighborLink)).

use super::{HaloFields, Link};
use crate::transformer::HaloDataTransformer;
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{Element, Error, Kernels, Result};

/// The scalar fields' and the vector fields' transformers of one link.
pub type LinkTransformers<'a, B, T> =
    (Option<&'a HaloDataTransformer<B, T>>, Option<&'a HaloDataTransformer<B, T>>);

impl<B: Kernels, T: Element> HaloFields<B, T> {
    fn link(&self, k: usize) -> Result<&Link<B, T>> {
        let n = self.links.len();
        self.links.get(k).ok_or_else(|| Error::invalid(format!("neighbour link {k} of {n}")))
    }

    fn link_mut(&mut self, k: usize) -> Result<&mut Link<B, T>> {
        let n = self.links.len();
        self.links.get_mut(k).ok_or_else(|| Error::invalid(format!("neighbour link {k} of {n}")))
    }

    /// The transformers of link `k`: the scalar fields' and the vector fields' (either
    /// absent when there are no such fields). Their pack and unpack buffers are the parts
    /// of the link's messages, for a carrier that sends device buffers in place.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a link index out of range.
    pub fn transformers(&self, k: usize) -> Result<LinkTransformers<'_, B, T>> {
        let l = self.link(k)?;
        Ok((l.scalar.as_ref(), l.vector.as_ref()))
    }

    /// Bytes of link `k`'s message (each way).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a link index out of range.
    pub fn message_bytes(&self, k: usize) -> Result<usize> {
        // Each transformer's byte length was checked when its buffers were allocated; the
        // two together are two allocations that exist, so their sum fits.
        Ok(self.link(k)?.parts().map(|t| t.buffer_len() * T::DTYPE.size()).sum())
    }

    /// Queues the packing of link `k`'s message from `arrays` (every field, in order).
    ///
    /// # Errors
    /// As [`HaloFields::check`], with nothing queued; [`Error::InvalidArgument`] for a link
    /// index out of range or after [`HaloFields::finalize`]; driver errors.
    pub fn pack(&mut self, k: usize, arrays: &[&NDBuffer<B, T>]) -> Result<()> {
        self.check(arrays)?;
        self.usable(k)?;
        self.queue(k, arrays, true)
    }

    /// Queues the unpacking of link `k`'s received message into `arrays`.
    ///
    /// # Errors
    /// As [`HaloFields::pack`].
    pub fn unpack(&mut self, k: usize, arrays: &mut [&mut NDBuffer<B, T>]) -> Result<()> {
        let arrays: Vec<&NDBuffer<B, T>> = arrays.iter().map(|a| &**a).collect();
        self.check(&arrays)?;
        self.usable(k)?;
        self.queue(k, &arrays, false)
    }

    fn usable(&self, k: usize) -> Result<()> {
        if self.link(k)?.parts().all(|t| t.ready()) {
            Ok(())
        } else {
            Err(Error::invalid("halo fields finalized"))
        }
    }

    /// Copies link `k`'s packed message into its received message on the device: for a
    /// link to this rank itself (a periodic edge of a one-rank-wide layout).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the link leads to another rank, for an index out of
    /// range, after [`HaloFields::finalize`]; driver errors.
    pub fn loopback(&mut self, k: usize) -> Result<()> {
        let me = self.rank;
        let l = self.link_mut(k)?;
        if l.link.rank != me {
            return Err(Error::invalid(format!("link {k} leads to rank {}, not to rank {me}", l.link.rank)));
        }
        l.parts_mut().try_for_each(|t| t.loopback())
    }

    /// The bytes of link `k`'s packed message, after the queued work completed (what to
    /// send to the neighbour).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an index out of range or after
    /// [`HaloFields::finalize`]; driver errors.
    pub fn read_message(&self, k: usize) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.message_bytes(k)?);
        for t in self.link(k)?.parts() {
            out.extend(t.pack_buffer()?.to_vec()?);
        }
        Ok(out)
    }

    /// Copies the neighbour's message (host bytes, [`HaloFields::message_bytes`] of them)
    /// into link `k`'s receive buffers, ready for [`HaloFields::unpack`].
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] for another number of bytes (nothing copied);
    /// [`Error::InvalidArgument`] for an index out of range or after
    /// [`HaloFields::finalize`]; driver errors.
    pub fn receive_message(&mut self, k: usize, data: &[u8]) -> Result<()> {
        let bytes = self.message_bytes(k)?;
        if data.len() != bytes {
            return Err(Error::byte_length(
                format!("message of link {k}"),
                bytes,
                data.len(),
                Some(T::DTYPE),
            ));
        }
        self.usable(k)?;
        let mut at = 0;
        for t in self.link_mut(k)?.parts_mut() {
            let n = t.buffer_len() * T::DTYPE.size();
            t.receive_host(&data[at..at + n])?;
            at += n;
        }
        Ok(())
    }
}
