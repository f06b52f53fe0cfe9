//! The setup of negation at the receiver ([`crate::negation`]): the two ranks of each
//! link say what they can do, the sender of a message it would negate tells the receiver
//! which elements those are, and the receiver accepts or declines. Nothing between the
//! first exchange and the last can fail on one rank alone, so both ranks of a link always
//! reach the same decision and neither waits for a message the other does not send.

use super::link::Link;
use crate::comm::{exchange_any, Peer};
use crate::datatypes::Side;
use crate::direct::host;
use crate::negation::{negated_ranges, receiver_runs, supported, without_negation};
use gpubuf_core::{CopyPlan, Element, Error, Kernels, Result};
use mpi::topology::{Communicator, SimpleCommunicator};

/// Words of the first exchange: offers to send raw, offers to receive raw, ranges sent.
const OFFER_WORDS: usize = 3;

/// [`exchange_any`] over each link, on the link's own tags.
fn exchange<B: Kernels, T: Element>(
    comm: &SimpleCommunicator,
    links: &[Link<B, T>],
    outgoing: &[Option<Vec<u64>>],
    expect: &[bool],
) -> Vec<Option<Vec<u64>>> {
    let peers: Vec<Peer> =
        links.iter().map(|l| Peer { rank: l.rank, send_tag: l.send_tag, recv_tag: l.recv_tag }).collect();
    exchange_any(comm, &peers, outgoing, expect)
}

/// What this rank offers on one link, settled before any message.
struct Offer {
    /// This rank's pack plan with its negation cleared, where it would send raw: it
    /// negates something, and MPI can then gather the message as a datatype.
    plan: Option<CopyPlan>,
    /// The message elements that plan no longer negates.
    ranges: Vec<(usize, usize)>,
    /// This rank would receive raw: MPI can scatter the neighbour's message as a datatype.
    recv: bool,
}

/// Collective between the ranks of each link (both call it, after the agreement and the
/// window's setup, before any update), on a duplicate of `comm` (so no message of the
/// caller's can match one of these). A message goes raw when its sender could move it as
/// a datatype once its negation is cleared and its receiver could scatter it as one, both
/// ranks holding host memory moved in place outside the node's window, with the datatype
/// path on by default ([`crate::DATATYPES_ENV`]) and an element type [`supported`]; the
/// receiver may still decline (neighbour ranges that do not fit its message), and the
/// message then stays negated by its sender.
///
/// # Errors
/// None of its own: a link that cannot take part keeps the sender's negation.
pub(super) fn setup<B: Kernels, T: Element>(
    comm: &SimpleCommunicator,
    links: &mut [Link<B, T>],
) -> Result<()> {
    let datatypes = crate::datatypes::from_env().unwrap_or(crate::datatypes::DEFAULT);
    let size = T::DTYPE.size();
    let offers: Vec<Offer> = links
        .iter()
        .map(|l| {
            let able = datatypes
                && supported(T::DTYPE)
                && l.slot.is_none()
                && l.direct
                && host(&l.transformer).unwrap_or(false);
            let pack = &l.transformer.compiled().pack;
            let ranges = if able { negated_ranges(pack) } else { Vec::new() };
            let plan = if ranges.is_empty() {
                None
            } else {
                without_negation(pack).ok().filter(|p| Side::new(p, size).is_some())
            };
            Offer {
                ranges: if plan.is_some() { ranges } else { Vec::new() },
                plan,
                recv: able && l.typed.recv.is_some(),
            }
        })
        .collect();
    let dup = comm.duplicate();
    let first: Vec<Option<Vec<u64>>> = offers
        .iter()
        .map(|o| Some(vec![u64::from(o.plan.is_some()), u64::from(o.recv), o.ranges.len() as u64]))
        .collect();
    let answers = exchange(&dup, links, &first, &vec![true; links.len()]);
    let word = |a: &Option<Vec<u64>>, k: usize| {
        a.as_ref().filter(|a| a.len() == OFFER_WORDS).is_some_and(|a| a[k] != 0)
    };
    // Raw to the neighbour: this rank offers to send it, the neighbour to receive it; and
    // the other way round. Both ranks of a link compute the same two answers.
    let sends: Vec<bool> = offers.iter().zip(&answers).map(|(o, a)| o.plan.is_some() && word(a, 1)).collect();
    let recvs: Vec<bool> = offers.iter().zip(&answers).map(|(o, a)| o.recv && word(a, 0)).collect();
    let ranges: Vec<Option<Vec<u64>>> = offers
        .iter()
        .zip(&sends)
        .map(|(o, &s)| s.then(|| o.ranges.iter().flat_map(|&(at, n)| [at as u64, n as u64]).collect()))
        .collect();
    let theirs = exchange(&dup, links, &ranges, &recvs);
    // The receiver accepts what fits its message, and says so.
    let runs: Vec<Option<Vec<(usize, usize, usize)>>> = links
        .iter()
        .zip(&theirs)
        .map(|(l, got)| {
            let got = got.as_ref()?;
            if got.is_empty() || got.len() % 2 != 0 {
                return None;
            }
            let pairs: Option<Vec<(usize, usize)>> = got
                .chunks_exact(2)
                .map(|w| Some((usize::try_from(w[0]).ok()?, usize::try_from(w[1]).ok()?)))
                .collect();
            receiver_runs(&l.transformer.compiled().unpack, &pairs?).ok()
        })
        .collect();
    let verdicts: Vec<Option<Vec<u64>>> =
        runs.iter().zip(&recvs).map(|(r, &want)| want.then(|| vec![u64::from(r.is_some())])).collect();
    let accepted = exchange(&dup, links, &verdicts, &sends);
    for (((l, offer), runs), ok) in links.iter_mut().zip(offers).zip(runs).zip(&accepted) {
        if ok.as_ref().is_some_and(|v| v.first() == Some(&1)) {
            let plan = offer.plan.ok_or_else(|| Error::invalid("a raw send without its plan"))?;
            l.typed.send = Side::new(&plan, size);
            l.raw_send = Some(plan);
        }
        l.raw_recv = runs;
    }
    Ok(())
}
