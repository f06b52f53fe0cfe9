//! The agreement that makes [`super::HaloUpdater::new`] collective: every rank describes
//! each message it sends and each message it expects (a signature over the updater's name,
//! the tag, the element type, the quantity count and the extents of every part, in the
//! receiver's axes), and one `MPI_Allreduce` over the communicator checks that the two
//! sides of every link describe the same message. Only when they do not (or a rank could
//! not make its part of the updater) do the ranks gather every rank's signatures
//! (`MPI_Allgather`) to name the links that disagree, so every rank returns the same error
//! and none is left waiting for a message that will never match.

use gpubuf_core::{DType, Error, Result};
use gpubuf_halo::{vector_blocks, HaloExchangeSpec};
use mpi::collective::SystemOperation;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::CommunicatorCollectives;

/// The most links of one rank (one per boundary).
const MAX_LINKS: usize = 8;
/// Words of a link in the gathered record: peer, send signature, bytes sent, expected
/// signature, bytes expected.
const LINK_WORDS: usize = 5;
/// Words of a rank's gathered record: failed, name hash, link count, then the links.
const RECORD: usize = 3 + MAX_LINKS * LINK_WORDS;
/// Disagreements named in the error before the rest are counted.
const NAMED: usize = 4;

/// One link as this rank sees it: what it sends the neighbour and what it expects back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LinkSig {
    /// The neighbour rank.
    pub peer: usize,
    /// Signature of the message this rank sends the neighbour.
    pub send: u64,
    /// Its length in bytes.
    pub send_bytes: usize,
    /// Signature of the message this rank expects from the neighbour.
    pub recv: u64,
    /// The length this rank expects, in bytes.
    pub recv_bytes: usize,
}

/// FNV-1a over 64-bit words, finished by a 64-bit mixer (so nearby inputs spread over
/// every bit, as the sums of [`agree`] need).
#[derive(Debug, Clone, Copy)]
pub(super) struct Hasher(u64);

impl Hasher {
    pub(super) fn new() -> Self {
        Hasher(0xcbf2_9ce4_8422_2325)
    }

    pub(super) fn word(mut self, w: u64) -> Self {
        for b in w.to_le_bytes() {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self
    }

    pub(super) fn bytes(self, bytes: &[u8]) -> Self {
        bytes.iter().fold(self.word(bytes.len() as u64), |h, &b| h.word(u64::from(b)))
    }

    pub(super) fn finish(self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The hash of an updater's name.
pub(super) fn name_hash(name: &str) -> u64 {
    Hasher::new().bytes(name.as_bytes()).finish()
}

/// The extents one part of a message has in the receiver's axes: the packed box turned by
/// its rotation (an odd number of quarter turns swaps the last x and y dimensions, as the
/// transformer's rotation does) on the sending side, the halo it lands in on the receiving
/// side.
fn extents(spec: &HaloExchangeSpec, sending: bool) -> Vec<usize> {
    let len = |s: &[std::ops::Range<usize>]| s.iter().map(|r| r.len()).collect::<Vec<_>>();
    if !sending {
        return len(&spec.unpack_slices);
    }
    let mut sent = len(&spec.pack_slices);
    let dims = &spec.specification.dims;
    if spec.pack_clockwise_rotation.rem_euclid(2) == 1 {
        let (x, y) = (dims.iter().rposition(|d| d.is_x()), dims.iter().rposition(|d| d.is_y()));
        if let (Some(x), Some(y)) = (x, y) {
            if x < sent.len() && y < sent.len() {
                sent.swap(x, y);
            }
        }
    }
    sent
}

/// The signature of one message of a link: the updater (`name`, a hash), the message's
/// tag, the element type, the quantity count and kind, and the extents of each of its
/// parts in the message's order, packed (`sending`) or unpacked, in the receiver's axes.
/// Both sides of a link compute the same signature for a message exactly when they agree
/// on it. A vector's message holds per exchange two blocks, which the receiver unpacks
/// into its x and y quantities: sent, they are the components in the order of
/// [`vector_blocks`] for the receiver's turns (an odd rotation sends the y component
/// first), so a staggered pair (D-grid `u` on `y_interface`, `v` on `x_interface`) is
/// described by the component that really fills each block.
pub(super) fn signature(
    name: u64,
    tag: i32,
    dtype: DType,
    quantities: usize,
    x: &[HaloExchangeSpec],
    y: Option<&[HaloExchangeSpec]>,
    sending: bool,
) -> u64 {
    let code = DType::ALL.iter().position(|&d| d == dtype).unwrap_or(usize::MAX);
    let mut h = Hasher::new().word(name).word(tag as u64).word(code as u64).word(quantities as u64);
    h = h.word(u64::from(y.is_some()));
    let part = |h: Hasher, spec: &HaloExchangeSpec| {
        let e = extents(spec, sending);
        e.iter().fold(h.word(e.len() as u64), |h, &n| h.word(n as u64))
    };
    for (i, sx) in x.iter().enumerate() {
        match y.and_then(|y| y.get(i)) {
            None => h = part(h, sx),
            Some(sy) => {
                let specs = [sx, sy];
                let order = if sending {
                    // The receiver's axes turn the other way (the transformer's rule).
                    let turns = (4 - sx.pack_clockwise_rotation.rem_euclid(4)) % 4;
                    vector_blocks(turns).map(|(component, _)| component)
                } else {
                    [0, 1]
                };
                for c in order {
                    h = part(h, specs[c]);
                }
            }
        }
    }
    h.finish()
}

/// Adds a 64-bit hash to a sum kept as two 32-bit halves in `u64`s, which cannot overflow
/// for fewer than 2^29 ranks of at most 8 links.
fn add(sum: &mut [u64], h: u64) {
    sum[0] += h & 0xffff_ffff;
    sum[1] += h >> 32;
}

/// Collective over `world`: agrees that every rank made its part of the updater (`links`
/// is `None` on a rank that could not), that every rank made it the same way (`on_node`:
/// by [`super::HaloUpdater::on_node`], whose window setup is collective too) and that both
/// sides of every link describe the same messages.
///
/// # Errors
/// [`Error::InvalidArgument`] on every rank when some rank could not make its part or a
/// link's two sides disagree, naming the ranks and links at fault (the same text on every
/// rank).
pub(super) fn agree(
    world: &SimpleCommunicator,
    name: &str,
    on_node: bool,
    links: Option<&[LinkSig]>,
) -> Result<()> {
    let me = world.rank() as usize;
    // [ranks that failed, sent (low, high), expected (low, high), ranks on node]
    let mut mine = [0u64; 6];
    mine[5] = u64::from(on_node);
    match links {
        None => mine[0] = 1,
        Some(links) => {
            for l in links {
                add(&mut mine[1..3], Hasher::new().word(me as u64).word(l.peer as u64).word(l.send).finish());
                add(&mut mine[3..5], Hasher::new().word(l.peer as u64).word(me as u64).word(l.recv).finish());
            }
        }
    }
    let mut all = [0u64; 6];
    world.all_reduce_into(&mine[..], &mut all[..], SystemOperation::sum());
    let ranks = world.size() as u64;
    let ways = (all[5] != 0 && all[5] != ranks).then(|| (all[5], ranks - all[5]));
    if all[0] == 0 && all[1..3] == all[3..5] && ways.is_none() {
        return Ok(());
    }
    let mut record = [0u64; RECORD];
    record[0] = u64::from(links.is_none());
    record[1] = name_hash(name);
    let links = links.unwrap_or_default();
    record[2] = links.len().min(MAX_LINKS) as u64;
    for (l, w) in links.iter().zip(record[3..].chunks_exact_mut(LINK_WORDS)) {
        w.copy_from_slice(&[l.peer as u64, l.send, l.send_bytes as u64, l.recv, l.recv_bytes as u64]);
    }
    let mut records = vec![0u64; RECORD * world.size() as usize];
    world.all_gather_into(&record[..], &mut records[..]);
    let records: Vec<&[u64]> = records.chunks_exact(RECORD).collect();
    let what = match ways {
        // The links may agree: the ways alone are the fault.
        Some((node, messages)) => format!(
            "{node} rank(s) made it with on_node, {messages} with new (every rank calls the same one)"
        ),
        None => describe(&records),
    };
    Err(Error::invalid(format!("halo updater {name:?} was made on no rank: {what}")))
}

/// Collective over `world`, for a step of making an updater after [`agree`] (every rank
/// calls it at the same point, whatever its `local` outcome): `local`'s value on every rank
/// when every rank succeeded, else an error on every rank, so that no rank goes on to a
/// step that waits for one that gave up. A rank that failed returns its own error; the
/// others [`Error::InvalidArgument`] naming the ranks that failed and `what` they did.
///
/// # Errors
/// As described: this rank's own error, or the other ranks' failure.
pub(super) fn settle<V>(world: &SimpleCommunicator, name: &str, what: &str, local: Result<V>) -> Result<V> {
    let mine = [u64::from(local.is_err())];
    let mut all = vec![0u64; usize::try_from(world.size()).unwrap_or(0)];
    world.all_gather_into(&mine[..], &mut all[..]);
    let failed: Vec<usize> = all.iter().enumerate().filter(|&(_, &f)| f != 0).map(|(r, _)| r).collect();
    if failed.is_empty() || local.is_err() {
        return local;
    }
    Err(Error::invalid(format!(
        "halo updater {name:?} was made on no rank: rank(s) {} could not {what} (see their errors)",
        list(&failed)
    )))
}

/// The links of a gathered record: (peer, send, bytes sent, expected, bytes expected).
fn record_links(r: &[u64]) -> impl Iterator<Item = &[u64]> {
    let n = usize::try_from(r[2]).unwrap_or(0).min(MAX_LINKS);
    r[3..3 + n * LINK_WORDS].chunks_exact(LINK_WORDS)
}

/// What went wrong, from every rank's record (the same text on every rank).
fn describe(records: &[&[u64]]) -> String {
    let failed: Vec<usize> = (0..records.len()).filter(|&r| records[r][0] != 0).collect();
    let mut what = Vec::new();
    if !failed.is_empty() {
        what.push(format!("rank(s) {} could not make it (see their errors)", list(&failed)));
    }
    let named = records.iter().find(|r| r[0] == 0).map(|r| r[1]);
    if records.iter().any(|r| r[0] == 0 && Some(r[1]) != named) {
        // Every link then disagrees: the names say it all.
        what.push(
            "the ranks made updaters of different names in this call (make them in the same order on \
             every rank)"
                .to_string(),
        );
        return what.join("; ");
    }
    for (r, rec) in records.iter().enumerate().filter(|(_, rec)| rec[0] == 0) {
        for l in record_links(rec) {
            let Some(theirs) = usize::try_from(l[0]).ok().and_then(|n| records.get(n)) else { continue };
            if theirs[0] != 0 {
                continue;
            }
            let n = l[0];
            match record_links(theirs).find(|t| t[0] == r as u64) {
                None => what.push(format!("rank {r} sends to rank {n}, which expects no message from it")),
                Some(t) if t[3] == l[1] => {}
                Some(t) if t[4] != l[2] => what
                    .push(format!("rank {r} sends rank {n} {} bytes where rank {n} expects {}", l[2], t[4])),
                Some(_) => what.push(format!(
                    "rank {r} sends rank {n} {} bytes laid out otherwise than rank {n} expects (element \
                     type, quantities, halo extents or name)",
                    l[2]
                )),
            }
        }
    }
    if what.is_empty() {
        return "the ranks' halo specs disagree".to_string();
    }
    let more = what.len().saturating_sub(NAMED);
    what.truncate(NAMED);
    let mut text = what.join("; ");
    if more > 0 {
        text.push_str(&format!("; and {more} more"));
    }
    text
}

/// `1, 2, 3` (at most eight, then a count).
fn list(ranks: &[usize]) -> String {
    let mut s: Vec<String> = ranks.iter().take(8).map(usize::to_string).collect();
    if ranks.len() > 8 {
        s.push(format!("and {} more", ranks.len() - 8));
    }
    s.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(failed: bool, name: u64, links: &[[u64; LINK_WORDS]]) -> Vec<u64> {
        let mut r = vec![u64::from(failed), name, links.len() as u64];
        links.iter().for_each(|l| r.extend_from_slice(l));
        r.resize(RECORD, 0);
        r
    }

    #[test]
    fn disagreements_name_the_links_at_fault() {
        // Rank 0 sends rank 1 longer messages than rank 1 expects; rank 1 agrees with 2.
        let recs = [
            record(false, 7, &[[1, 10, 96, 15, 80]]),
            record(false, 7, &[[0, 11, 80, 12, 80], [2, 13, 80, 14, 80]]),
            record(false, 7, &[[1, 14, 80, 13, 80]]),
        ];
        let recs: Vec<&[u64]> = recs.iter().map(|r| r.as_slice()).collect();
        let text = describe(&recs);
        assert!(text.contains("rank 0 sends rank 1 96 bytes where rank 1 expects 80"), "{text}");
        assert!(text.contains("rank 1 sends rank 0 80 bytes laid out otherwise"), "{text}");
        assert!(!text.contains("rank 2"), "{text}");
        // A rank that failed, another name.
        let recs = [
            record(true, 0, &[]),
            record(false, 7, &[[2, 1, 8, 2, 8]]),
            record(false, 8, &[[1, 2, 8, 1, 8], [3, 5, 8, 6, 8]]),
            record(false, 7, &[]),
        ];
        let recs: Vec<&[u64]> = recs.iter().map(|r| r.as_slice()).collect();
        let text = describe(&recs);
        assert!(text.contains("rank(s) 0 could not make it"), "{text}");
        assert!(text.contains("different names"), "{text}");
        // A link one side does not have (one name on every rank that made its part).
        let recs = [
            record(false, 7, &[[1, 1, 8, 2, 8], [2, 5, 8, 6, 8]]),
            record(false, 7, &[[0, 2, 8, 1, 8]]),
            record(false, 7, &[]),
        ];
        let recs: Vec<&[u64]> = recs.iter().map(|r| r.as_slice()).collect();
        let text = describe(&recs);
        assert!(text.contains("rank 0 sends to rank 2, which expects no message from it"), "{text}");
    }

    #[test]
    fn signatures_tell_every_field_apart() {
        use gpubuf_halo::{Boundary, Dim, QuantityHaloSpec};
        let spec = |ny: usize| QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[4, ny], 1, 0, DType::F64);
        let ex = |ny: usize, r: i32| -> Result<HaloExchangeSpec> {
            HaloExchangeSpec::between(spec(ny)?, Boundary::East, Boundary::West, r)
        };
        let one = [ex(4, 0).unwrap()];
        let base = signature(1, 5, DType::F64, 1, &one, None, true);
        assert_eq!(base, signature(1, 5, DType::F64, 1, &one, None, true));
        let others = [
            signature(2, 5, DType::F64, 1, &one, None, true),
            signature(1, 6, DType::F64, 1, &one, None, true),
            signature(1, 5, DType::I64, 1, &one, None, true),
            signature(1, 5, DType::F64, 2, &one, None, true),
            signature(1, 5, DType::F64, 1, &one, Some(&one), true),
            signature(1, 5, DType::F64, 1, &[ex(5, 0).unwrap()], None, true),
        ];
        assert!(others.iter().all(|&o| o != base), "{base} {others:?}");
        // The east edge (1 x 4) turned a quarter is 4 x 1: what a halo of 4 x 1 receives.
        let turned = ex(4, 1).unwrap();
        assert_eq!(extents(&turned, true), vec![4, 1]);
        assert_eq!(extents(&turned, false), vec![1, 4]);
    }
}
