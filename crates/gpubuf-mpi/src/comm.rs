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

/// Exchanges `u64` words with each of `ranks` on `comm` under `tag`: `outgoing[k]` goes
/// to `ranks[k]`, and its message to this rank lands in `incoming[k]` (which must be as
/// long as it). Every receive is posted before the sends, and all complete before the
/// return.
pub(crate) fn exchange<O: AsRef<[u64]>, I: AsMut<[u64]>>(
    comm: &SimpleCommunicator,
    ranks: &[usize],
    outgoing: &[O],
    incoming: &mut [I],
    tag: i32,
) {
    use mpi::request::WaitGuard;
    use mpi::traits::{Destination, Source};
    mpi::request::scope(|scope| {
        let mut guards = Vec::with_capacity(2 * ranks.len());
        for (&r, into) in ranks.iter().zip(incoming.iter_mut()) {
            let p = comm.process_at_rank(r as i32);
            guards.push(WaitGuard::from(p.immediate_receive_into_with_tag(scope, into.as_mut(), tag)));
        }
        for (&r, from) in ranks.iter().zip(outgoing) {
            let p = comm.process_at_rank(r as i32);
            guards.push(WaitGuard::from(p.immediate_send_with_tag(scope, from.as_ref(), tag)));
        }
    });
}

/// A neighbour in [`exchange_any`]: its rank, the tag of this rank's message to it, and
/// the tag of its message to this rank.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peer {
    pub rank: usize,
    pub send_tag: i32,
    pub recv_tag: i32,
}

/// As [`exchange`], for messages of any length, each optional: sends `outgoing[k]` to
/// `peers[k]` where it is `Some`, and receives what `peers[k]` sends this rank where
/// `expect[k]`, whatever its length (messages of one rank on one tag are received in the
/// order it sent them, as by [`exchange`]). Every send is started before the first
/// receive, and all complete before the return. Collective between this rank and each of
/// `peers`.
pub(crate) fn exchange_any(
    comm: &SimpleCommunicator,
    peers: &[Peer],
    outgoing: &[Option<Vec<u64>>],
    expect: &[bool],
) -> Vec<Option<Vec<u64>>> {
    use mpi::point_to_point::MatchedReceiveVec;
    use mpi::request::WaitGuard;
    use mpi::traits::{Destination, Source};
    let mut incoming = vec![None; peers.len()];
    mpi::request::scope(|scope| {
        let mut guards = Vec::with_capacity(peers.len());
        for (p, from) in peers.iter().zip(outgoing) {
            if let Some(from) = from {
                let to = comm.process_at_rank(p.rank as i32);
                guards.push(WaitGuard::from(to.immediate_send_with_tag(scope, &from[..], p.send_tag)));
            }
        }
        for ((p, into), &want) in peers.iter().zip(incoming.iter_mut()).zip(expect) {
            if want {
                let from = comm.process_at_rank(p.rank as i32);
                *into = Some(from.matched_probe_with_tag(p.recv_tag).matched_receive_vec::<u64>().0);
            }
        }
    });
    incoming
}
