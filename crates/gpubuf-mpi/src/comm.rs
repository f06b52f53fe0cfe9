//! [`Comm`]: the communicator a halo updater uses, borrowed or owned.

use mpi::topology::{Communicator, SimpleCommunicator};

/// The communicator of an updater: borrowed or owned.
pub enum Comm<'c> {
    /// A communicator the caller keeps (the updater lives no longer than the borrow).
    Borrowed(&'c SimpleCommunicator),
    /// A communicator handed over (freed with the updater, unless it is a predefined one
    /// such as the world communicator).
    Owned(SimpleCommunicator),
}

impl std::fmt::Debug for Comm<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (how, c) = match self {
            Comm::Borrowed(c) => ("Borrowed", *c),
            Comm::Owned(c) => ("Owned", c),
        };
        f.debug_struct("Comm").field("held", &how).field("rank", &c.rank()).field("size", &c.size()).finish()
    }
}

impl Comm<'_> {
    /// The communicator.
    pub fn get(&self) -> &SimpleCommunicator {
        match self {
            Comm::Borrowed(c) => c,
            Comm::Owned(c) => c,
        }
    }
}

impl<'c> From<&'c SimpleCommunicator> for Comm<'c> {
    fn from(c: &'c SimpleCommunicator) -> Self {
        Comm::Borrowed(c)
    }
}

impl From<SimpleCommunicator> for Comm<'static> {
    fn from(c: SimpleCommunicator) -> Self {
        Comm::Owned(c)
    }
}
