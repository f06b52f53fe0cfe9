//! Halo messages in one copy between ranks of a node: when the sender's quantities live in
//! node-shared memory ([`crate::node_buffer`]), its note names them (segment and
//! offset of each quantity's first element) instead of carrying packed data, and the
//! receiver copies its halo straight out of them with the composed runs of
//! [`crate::runs`], then returns the credit the sender waits for before its update
//! completes. Links agree at setup whether each side can map the other's memory.

use crate::comm::{exchange, exchange_any, Peer};
use crate::hostplan;
use crate::node::{self, PeerMap, Probe, SegmentId};
use crate::runs::{compose, pack_runs, Pull, RUN_WORDS};
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{CopyPlan, Element, Error, Kernels, Result};
use mpi::topology::SimpleCommunicator;

/// A note saying the message was packed into the receiver's slot.
pub(crate) const SLOT: u64 = 0;
/// A note naming the sender's quantities, to copy from.
pub(crate) const DIRECT: u64 = 1;

/// Words of a note for `quantities` quantities: kind, count, then per quantity its
/// segment's descriptor, inode, length and serial number and the byte offset of its first
/// element.
pub(crate) fn note_words(quantities: usize) -> usize {
    2 + 5 * quantities
}

/// What two neighbours settled at setup for one link.
pub(crate) struct Agreed {
    /// This rank can map the neighbour's memory: the composed copy of its messages.
    pub pull: Option<Pull>,
    /// The neighbour can map this rank's memory (so this rank may send direct notes).
    pub peer_reads: bool,
    /// The neighbour's process id.
    pub peer_pid: u64,
}

/// One link as [`agree`] needs it.
pub(crate) struct Side<'a> {
    pub rank: usize,
    pub pack: &'a CopyPlan,
    pub unpack: &'a CopyPlan,
}

/// Collective between the ranks of each link (both sides call it for their link, on
/// `comm`, which carries nothing else meanwhile): exchanges process ids, a probe segment
/// each side tries to map, and the pack plans as runs; composes each readable neighbour's
/// runs with this rank's unpack plan.
///
/// # Errors
/// [`Error::InvalidArgument`] when a neighbour's runs do not fit this rank's unpack plan
/// (different halo specs on the two ranks); MPI errors abort.
pub(crate) fn agree(comm: &SimpleCommunicator, links: &[Side<'_>]) -> Result<Vec<Agreed>> {
    let pid = u64::from(std::process::id());
    let magic = (pid << 20) ^ 0x0067_7062_7566_6e6f;
    // No probe (no memfd here): the neighbours cannot read this rank, and are told so.
    let probe = Probe::new(magic).ok();
    let none = SegmentId { fd: u64::MAX, ino: 0, len: 0, serial: 0 };
    let id = probe.as_ref().and_then(Probe::id).unwrap_or(none);
    let runs: Vec<Vec<u64>> = links.iter().map(|l| pack_runs(l.pack)).collect();
    let offers: Vec<[u64; 6]> =
        runs.iter().map(|r| [pid, id.fd, id.ino, id.len, magic, (r.len() / RUN_WORDS) as u64]).collect();
    let mut theirs = vec![[0u64; 6]; links.len()];
    let ranks: Vec<usize> = links.iter().map(|l| l.rank).collect();
    exchange(comm, &ranks, &offers, &mut theirs, 2);
    // Each side tries to read the other's probe, then sends the verdict with its runs.
    let outgoing: Vec<Option<Vec<u64>>> = theirs
        .iter()
        .zip(&runs)
        .map(|(t, r)| {
            // Not from this process itself (a rank that is its own neighbour): its halo and
            // the cells it copies from would be two mappings of one file.
            let readable = t[0] != pid
                && t[1] != u64::MAX
                && node::can_read(t[0], SegmentId { fd: t[1], ino: t[2], len: t[3], serial: 0 }, t[4]);
            let mut words = Vec::with_capacity(1 + r.len());
            words.push(u64::from(readable));
            words.extend_from_slice(r);
            Some(words)
        })
        .collect();
    // Received whatever their length, and checked only once every message moved: a rank
    // that returned early here would leave its neighbours waiting.
    let peers: Vec<Peer> = ranks.iter().map(|&rank| Peer { rank, send_tag: 3, recv_tag: 3 }).collect();
    let incoming = exchange_any(comm, &peers, &outgoing, &vec![true; peers.len()]);
    drop(probe);
    let mut out = Vec::with_capacity(links.len());
    for (((l, t), mine), got) in links.iter().zip(&theirs).zip(outgoing.iter().flatten()).zip(incoming.iter())
    {
        let got = got.as_deref().unwrap_or_default();
        // Each run moves at least one element of the message; the message is the verdict
        // and the runs the offer announced.
        let count = usize::try_from(t[5]).ok().filter(|&n| n <= l.unpack.buffer_len());
        let fits =
            count.and_then(|n| n.checked_mul(RUN_WORDS)?.checked_add(1)).is_some_and(|w| w == got.len());
        if !fits {
            let what = "a neighbour's runs do not match its offer, or outnumber its message's elements";
            return Err(Error::invalid(what));
        }
        // The neighbour's plan has as many sources as this rank's (one per quantity and
        // boundary shared with it, the same boundaries counted from either side).
        let sources = l.pack.source_lens().len();
        let pull = if mine[0] != 0 { Some(compose(&got[1..], l.unpack, sources)?) } else { None };
        out.push(Agreed { pull, peer_reads: got[0] != 0, peer_pid: t[0] });
    }
    Ok(out)
}

/// The note naming `quantities` (the pack plan's sources, in order) for a direct message,
/// or `None` when one of them is not node-shared memory of this process (the message is
/// then packed into the receiver's slot).
///
/// # Errors
/// [`Error::InvalidArgument`] for a quantity shorter than the plan's source.
pub(crate) fn note<B: Kernels, T: Element>(
    plan: &CopyPlan,
    quantities: &[&NDBuffer<B, T>],
) -> Result<Option<Vec<u64>>> {
    let mut words = Vec::with_capacity(note_words(quantities.len()));
    words.extend_from_slice(&[DIRECT, quantities.len() as u64]);
    if quantities.len() != plan.source_lens().len() {
        return Err(Error::invalid("fewer quantities than the halo plan's sources"));
    }
    for (q, &need) in quantities.iter().zip(plan.source_lens()) {
        let Some((cpu, first)) = hostplan::first_byte(q, need)? else { return Ok(None) };
        let Some(id) = node::lookup(cpu.as_ptr()) else { return Ok(None) };
        words.extend_from_slice(&[id.fd, id.ino, id.len, id.serial, first as u64]);
    }
    Ok(Some(words))
}

/// The neighbour's quantities named by a direct `note`, mapped (reusing `maps`, which
/// keeps only the segments this note names): each one's first element, checked to hold
/// the elements `pull` reads.
///
/// # Errors
/// [`Error::InvalidArgument`] for a malformed note, a segment that cannot be mapped (see
/// [`node::map_peer`]) or one too short for the runs.
pub(crate) fn sources(
    note: &[u64],
    pull: &Pull,
    pid: u64,
    size: usize,
    maps: &mut Vec<PeerMap>,
) -> Result<Vec<*const u8>> {
    let n = pull.src_extent.len();
    if note.len() != note_words(n) || note[1] != n as u64 {
        return Err(Error::invalid("a neighbour's note names another number of quantities"));
    }
    maps.iter_mut().for_each(|m| m.used = false);
    let mut found = Vec::with_capacity(n);
    for (w, &extent) in note[2..].chunks_exact(5).zip(&pull.src_extent) {
        let id = SegmentId { fd: w[0], ino: w[1], len: w[2], serial: w[3] };
        let at = match maps.iter().position(|m| m.id == id) {
            Some(at) => at,
            None => {
                maps.push(node::map_peer(pid, id)?);
                maps.len() - 1
            }
        };
        maps[at].used = true;
        let end = extent.checked_mul(size).and_then(|b| usize::try_from(w[4]).ok()?.checked_add(b));
        if end.is_none_or(|e| e as u64 > id.len) {
            return Err(Error::invalid("a neighbour's quantity is shorter than its halo message"));
        }
        found.push((id, w[4] as usize));
    }
    maps.retain(|m| m.used);
    Ok(found
        .iter()
        .map(|(id, off)| {
            // In bounds of the mapping: `off` + the bytes read lie within it (checked above).
            maps.iter().find(|m| m.id == *id).map_or(std::ptr::null(), |m| m.ptr.wrapping_add(*off))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs::Run;
    use gpubuf_core::Order;
    use gpubuf_cpu::{CpuBackend, CpuMemory};
    use std::any::Any;

    /// A note naming `q` (node memory of this process) at byte offset `off`.
    fn note_of(q: &NDBuffer<CpuBackend, f64>, off: u64) -> Vec<u64> {
        let storage = q.storage();
        let cpu: &dyn Any = storage.memory;
        let ptr = cpu.downcast_ref::<CpuMemory>().map(CpuMemory::as_ptr).expect("CPU memory");
        let id = node::lookup(ptr).expect("node memory");
        vec![DIRECT, 1, id.fd, id.ino, id.len, id.serial, off]
    }

    #[test]
    fn notes_are_checked_against_the_segments_they_name() -> Result<()> {
        let b = CpuBackend::new();
        let q = crate::node_buffer::<_, f64>(&b, &[4, 4], Order::C, Some(3.0))?;
        // Reads elements 0..8 of the quantity (64 of its 128 bytes).
        let pull = Pull {
            runs: vec![Run { src_q: 0, src: 0, dst_q: 0, dst: 0, len: 8, negate: false }],
            src_extent: vec![8],
        };
        let pid = u64::from(std::process::id());
        let mut maps = Vec::new();
        // In bounds: the mapping's first element, read as the neighbour would.
        let srcs = sources(&note_of(&q, 64), &pull, pid, 8, &mut maps)?;
        // SAFETY: byte 64 of a read-only mapping of 128 bytes.
        assert_eq!(unsafe { srcs[0].cast::<f64>().read() }, 3.0);
        assert_eq!(maps.len(), 1);
        // One byte too far, an offset past the address space, a wrong count, a cut note.
        assert!(sources(&note_of(&q, 65), &pull, pid, 8, &mut maps).is_err());
        assert!(sources(&note_of(&q, u64::MAX), &pull, pid, 8, &mut maps).is_err());
        let mut two = note_of(&q, 0);
        two[1] = 2;
        assert!(sources(&two, &pull, pid, 8, &mut maps).is_err());
        assert!(sources(&note_of(&q, 0)[..6], &pull, pid, 8, &mut maps).is_err());
        // The quantity is its own plan's source when node memory, not otherwise.
        let plan = CopyPlan::new(vec![16], 8, vec![gpubuf_core::Segment::new(0, 0, &[(8, 1)], 0)?])?;
        let named = note(&plan, &[&q])?.expect("a direct note");
        assert_eq!(&named[2..7], &note_of(&q, 0)[2..7]);
        let plain = NDBuffer::<_, f64>::zeros(&b, &[4, 4])?;
        assert!(note(&plan, &[&plain])?.is_none());
        let short = CopyPlan::new(vec![17], 8, vec![gpubuf_core::Segment::new(0, 9, &[(8, 1)], 0)?])?;
        assert!(note(&short, &[&q]).is_err());
        Ok(())
    }
}
