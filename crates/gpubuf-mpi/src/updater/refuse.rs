//! Refused updates: a rank whose quantities are refused (or whose pack fails) still takes
//! its part in the update its neighbours are in, so that none of them waits for it. Each
//! neighbour gets an empty message in place of this rank's (its `wait` then returns an
//! error naming this rank, its other halos updated), and their messages to this rank are
//! received and dropped, returning the credits of shared-memory links.

use super::link::{Flight, Held};
use super::HaloUpdater;
use gpubuf_core::{Element, Error, Kernels, Result};

impl<B: Kernels, T: Element> HaloUpdater<'_, B, T> {
    /// Takes part in the update the neighbours are in without quantities, because a check
    /// of this rank's own failed before [`HaloUpdater::start`] could be called (a binding's
    /// conversion of its arguments, say). As a refused `start`: each neighbour gets an
    /// empty message in place of this rank's (its `wait` returns an error naming this
    /// rank), their messages to this rank are received and dropped, and the updater is
    /// ready for the next `start`. An update left in flight is completed first.
    ///
    /// # Errors
    /// MPI errors.
    pub fn refuse(&mut self) -> Result<()> {
        if self.in_flight.is_some() {
            drop(self.finish());
        }
        self.refuse_update()
    }

    /// Sends link `k`'s neighbour an empty message in place of this update's. On a link
    /// through the shared window the neighbour returns a credit for it as for a note, so the
    /// credit's receive is started (after the previous one completed) as a note's would be.
    pub(super) fn refuse_link(&mut self, k: usize) -> Result<()> {
        if self.links.get(k).is_some_and(|l| l.slot.is_some()) {
            self.credits.wait_receive(k)?;
            self.credits.start_receive(k)?;
        }
        self.requests.refuse(k)
    }

    /// This rank refuses a whole update (nothing of it started yet): every receive is
    /// started, every neighbour gets an empty message, and the neighbours' messages are
    /// completed and dropped. The error of an MPI call that failed on the way.
    pub(super) fn refuse_update(&mut self) -> Result<()> {
        // Buffer receives: no quantities are held for a datatype one.
        for k in 0..self.links.len() {
            let _ = self.requests.select(k, false, false);
        }
        let started = self.requests.start_receives();
        let mut first = started.err();
        for k in 0..self.links.len() {
            if let Err(e) = self.refuse_link(k) {
                first.get_or_insert(e);
            }
        }
        // No quantities: `complete` drops every message and returns the credits.
        let held = Held { x: Vec::new(), y: None, lent: false };
        self.in_flight = Some(Flight { held, broken: None, direct: Vec::new() });
        let (done, _) = self.finish();
        match (first, done) {
            (Some(e), _) => Err(e),
            // A neighbour that refused too is no error of this rank's.
            (None, Err(Error::InvalidArgument(m))) if m.contains(REFUSED) => Ok(()),
            (None, done) => done,
        }
    }
}

/// The words that start the error of a refused message.
pub(super) const REFUSED: &str = "refused this halo update";

/// The error `wait` returns for link `k`'s neighbour `rank` having refused the update.
pub(super) fn refused(rank: usize) -> Error {
    Error::invalid(format!(
        "rank {rank} {REFUSED} (its own error, raised on that rank): the halos it sends this rank are not \
         updated; the other halos are"
    ))
}
