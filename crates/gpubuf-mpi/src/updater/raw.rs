//! The setup of negation at the receiver ([`crate::negation`]): the two ranks of each
//! link say whether they can take part, and the sender of a message it would negate sends
//! the receiver which elements those are.

use super::link::Link;
use crate::datatypes::Side;
use crate::direct::host;
use crate::negation::{negated_ranges, receiver_runs, supported, without_negation};
use gpubuf_core::{Element, Error, Kernels, Result};
use mpi::request::WaitGuard;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::{Destination, Source};

/// Exchanges `u64` words over each link, on its own tags (the send tag to the neighbour,
/// the receive tag from it): `outgoing[k]` to link `k`'s neighbour, and the neighbour's
/// message into `incoming[k]`, which must be as long. Every receive is posted before the
/// sends, and all complete before the return.
fn exchange<B: Kernels, T: Element>(
    comm: &SimpleCommunicator,
    links: &[Link<B, T>],
    outgoing: &[Vec<u64>],
    incoming: &mut [Vec<u64>],
) {
    mpi::request::scope(|scope| {
        let mut guards = Vec::with_capacity(2 * links.len());
        for (l, into) in links.iter().zip(incoming.iter_mut()) {
            let p = comm.process_at_rank(l.rank as i32);
            guards.push(WaitGuard::from(p.immediate_receive_into_with_tag(scope, &mut into[..], l.recv_tag)));
        }
        for (l, from) in links.iter().zip(outgoing) {
            let p = comm.process_at_rank(l.rank as i32);
            guards.push(WaitGuard::from(p.immediate_send_with_tag(scope, &from[..], l.send_tag)));
        }
    });
}

/// Collective between the ranks of each link (both call it, after the agreement and the
/// window's setup, before any update; the links' tags carry nothing else meanwhile).
/// A link takes part when, on both ranks, the datatype path is on by default
/// ([`crate::DATATYPES_ENV`]), the element type is [`supported`], and the link moves host
/// memory in place outside the node's window. Then a rank whose pack plan negates sends
/// its messages raw, and its neighbour negates them.
///
/// # Errors
/// [`Error::InvalidArgument`] when a neighbour's negated elements do not fit this rank's
/// message (not reached between ranks running this code: the agreement checked that the
/// two sides describe the same message).
pub(super) fn setup<B: Kernels, T: Element>(
    comm: &SimpleCommunicator,
    links: &mut [Link<B, T>],
) -> Result<()> {
    let datatypes = crate::datatypes::from_env().unwrap_or(crate::datatypes::DEFAULT);
    let mut offers = Vec::with_capacity(links.len());
    let mut negated = Vec::with_capacity(links.len());
    for l in links.iter() {
        let able = datatypes && supported(T::DTYPE) && l.slot.is_none() && l.direct && host(&l.transformer)?;
        let ranges = negated_ranges(&l.transformer.compiled().pack);
        offers.push(vec![u64::from(able), ranges.len() as u64]);
        negated.push(ranges);
    }
    let mut answers = vec![vec![0u64; 2]; links.len()];
    exchange(comm, links, &offers, &mut answers);
    let both: Vec<bool> = offers.iter().zip(&answers).map(|(o, a)| o[0] != 0 && a[0] != 0).collect();
    let outgoing: Vec<Vec<u64>> = negated
        .iter()
        .zip(&both)
        .map(
            |(r, &b)| {
                if b {
                    r.iter().flat_map(|&(s, n)| [s as u64, n as u64]).collect()
                } else {
                    Vec::new()
                }
            },
        )
        .collect();
    let mut incoming = Vec::with_capacity(links.len());
    for ((l, a), &b) in links.iter().zip(&answers).zip(&both) {
        // Each range holds at least one element of the message.
        let count = usize::try_from(a[1]).ok().filter(|&n| n <= l.transformer.compiled().unpack.buffer_len());
        let count = count
            .ok_or_else(|| Error::invalid("a neighbour negates more ranges than its message has elements"))?;
        incoming.push(vec![0u64; if b { 2 * count } else { 0 }]);
    }
    exchange(comm, links, &outgoing, &mut incoming);
    let size = T::DTYPE.size();
    for (((l, ranges), got), &b) in links.iter_mut().zip(&negated).zip(&incoming).zip(&both) {
        if !b {
            continue;
        }
        if !ranges.is_empty() {
            let plan = without_negation(&l.transformer.compiled().pack)?;
            l.typed.send = Side::new(&plan, size);
            l.raw_send = Some(plan);
        }
        if !got.is_empty() {
            let theirs: Vec<(usize, usize)> = got
                .chunks_exact(2)
                .map(|w| Some((usize::try_from(w[0]).ok()?, usize::try_from(w[1]).ok()?)))
                .collect::<Option<_>>()
                .ok_or_else(|| Error::invalid("a neighbour's negated ranges past this machine's sizes"))?;
            l.raw_recv = Some(receiver_runs(&l.transformer.compiled().unpack, &theirs)?);
        }
    }
    Ok(())
}
