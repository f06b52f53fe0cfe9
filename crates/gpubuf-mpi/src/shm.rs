//! Halo messages between ranks of one node through shared memory: every rank's receive
//! slots lie in an `MPI_Win_allocate_shared` window, the sender packs straight into the
//! receiver's slot and sends a note (see `crate::pull`, which also copies straight from
//! node-shared fields), and the receiver, once it has unpacked, returns a zero-byte credit
//! before the sender may pack into the slot again. The bytes then move twice (pack,
//! unpack) instead of three times (pack, MPI's copy, unpack).

use gpubuf_core::{Error, Result};
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::{Communicator, Group, SimpleCommunicator};
use std::ffi::{c_int, c_void};

/// Alignment of every receive slot (in both processes: the window is mapped page-aligned,
/// so an address's offset within its page is the same everywhere).
const ALIGN: usize = 64;
/// What a rank offers a neighbour that cannot receive through its window.
const NO_SLOT: u64 = u64::MAX;

fn check(code: c_int, what: &str) -> Result<()> {
    if code == ffi::MPI_SUCCESS as c_int {
        Ok(())
    } else {
        Err(Error::invalid(format!("{what} failed with MPI error code {code}")))
    }
}

/// One link's slots: where this rank packs (the neighbour's slot, in its window) and
/// where the neighbour's message to this rank lands (this rank's slot).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    /// The neighbour's receive slot for this rank's message.
    pub peer: *mut u8,
    /// This rank's receive slot for the neighbour's message.
    pub own: *mut u8,
}

/// The node's shared window and the communicator of the credits. Freeing the window is
/// collective over the node: every rank of the node drops its updater made with
/// [`crate::HaloUpdater::on_node`] in the same order relative to other collective calls.
pub(crate) struct Shared {
    win: ffi::MPI_Win,
    /// The ranks of the updater's communicator on this node (the window's group).
    _node: SimpleCommunicator,
    /// A duplicate of the updater's communicator, carrying only credits.
    pub credits: SimpleCommunicator,
}

impl Shared {
    /// Orders this process's loads and stores to the window before the ones after it, as
    /// seen by the other processes of the node (`MPI_Win_sync`, a memory barrier).
    pub(crate) fn sync(&self) {
        // SAFETY: a window of this value, in the passive-target epoch opened by `setup`.
        unsafe { ffi::MPI_Win_sync(self.win) };
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: the epoch opened by `setup` on this window, closed once; the window is
        // freed once (collective over the node's ranks, see the type's docs). Nothing of
        // this process reads or writes the window afterwards: the slots were only used
        // by the updater, whose requests completed before this value drops.
        unsafe {
            ffi::MPI_Win_unlock_all(self.win);
            ffi::MPI_Win_free(&mut self.win);
        }
    }
}

/// A link as `setup` needs it: neighbour rank, message bytes, and whether this rank can
/// pack into and unpack from host memory for it.
pub(crate) struct Want {
    pub rank: usize,
    pub bytes: usize,
    pub host: bool,
}

/// Collective over `comm` (every rank calls it): makes the node's window with a slot for
/// every neighbour that shares this rank's node and host memory, agrees with each
/// neighbour whether their link goes through the window (both sides offered a slot), and
/// returns the window and each link's slots (`None`: message passing).
///
/// A rank whose slots do not fit a window still makes its part (empty) and exchanges the
/// offers (none), so that the others never wait for it; that failure comes back with the
/// window, in the second value, like the failures after the exchange.
///
/// # Errors
/// MPI errors making or locking the window (the other ranks may then wait, in the
/// collective call or in the offers' exchange).
/// In the second value: [`Error::InvalidArgument`] when the slots overflow the window's
/// size type, or when a neighbour's slot for this rank's message has another length than
/// the message (the two ranks' halo specs differ) or lies outside its segment.
pub(crate) fn setup(
    comm: &SimpleCommunicator,
    links: &[Want],
) -> Result<(Shared, Result<Vec<Option<Slot>>>)> {
    let node = comm.split_shared(comm.rank());
    let credits = comm.duplicate();
    let (group, node_group) = (comm.group(), node.group());
    // Offsets of this rank's slots in its segment, for links that can use one.
    let laid = crate::fault::at("layout").and_then(|()| {
        layout(links, |rank| {
            rank <= i32::MAX as usize && group.translate_rank(rank as i32, &node_group).is_some()
        })
    });
    let (offsets, len, failed) = match laid {
        Ok((offsets, len)) => (offsets, len, None),
        Err(e) => (vec![None; links.len()], 0, Some(e)),
    };
    // SAFETY: reads an immutable handle constant of the MPI library.
    let mut win: ffi::MPI_Win = unsafe { ffi::RSMPI_WIN_NULL };
    let mut base: *mut u8 = std::ptr::null_mut();
    // SAFETY: MPI writes the base address and the window handle into the two locals; the
    // size fits MPI_Aint (at most `isize::MAX`, checked by `layout`); collective over
    // `node`, which every rank of `comm` reaches here (this function is collective over
    // `comm`).
    let code = unsafe {
        ffi::MPI_Win_allocate_shared(
            len as ffi::MPI_Aint,
            1,
            ffi::RSMPI_INFO_NULL,
            node.as_raw(),
            (&mut base as *mut *mut u8).cast::<c_void>(),
            &mut win,
        )
    };
    check(code, "MPI_Win_allocate_shared")?;
    // SAFETY: the window just made; a shared lock on every rank for its whole life (freed
    // by `Shared::drop`), so loads and stores may use it at any time.
    check(unsafe { ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as c_int, win) }, "MPI_Win_lock_all")?;
    let shared = Shared { win, _node: node, credits };
    let peer_of = |rank: usize| group.translate_rank(rank as i32, &node_group);
    let slots = offer(&shared, base, win, peer_of, links, &offsets);
    Ok((shared, failed.map_or(slots, Err)))
}

/// Where this rank's slots lie in its segment (`None`: a link to another node or to memory
/// not on the host) and the segment's length.
fn layout(links: &[Want], on_node: impl Fn(usize) -> bool) -> Result<(Vec<Option<usize>>, usize)> {
    let too_long = || Error::invalid("halo slots longer than a shared window can be");
    let mut offsets = Vec::with_capacity(links.len());
    let mut len = 0usize;
    for l in links {
        if l.host && on_node(l.rank) {
            offsets.push(Some(len));
            len = len
                .checked_add(l.bytes)
                .and_then(|n| n.checked_next_multiple_of(ALIGN))
                .filter(|&n| n <= isize::MAX as usize)
                .ok_or_else(too_long)?;
        } else {
            offsets.push(None);
        }
    }
    // Room to move the first slot up to an aligned address (the segment's base may not be).
    if len > 0 {
        len = len.checked_add(ALIGN).filter(|&n| n <= isize::MAX as usize).ok_or_else(too_long)?;
    }
    Ok((offsets, len))
}

/// Exchanges the slots' offers with every link's neighbour and checks theirs: each link's
/// slots, where both sides offered one (`peer_of`: a rank of the updater's communicator
/// in the window's group).
fn offer(
    shared: &Shared,
    base: *mut u8,
    win: ffi::MPI_Win,
    peer_of: impl Fn(usize) -> Option<i32>,
    links: &[Want],
    offsets: &[Option<usize>],
) -> Result<Vec<Option<Slot>>> {
    // Offer each neighbour its slot: an offset in this rank's segment, moved up so every
    // slot's address is aligned (each slot's start and the segment's spare `ALIGN` bytes
    // keep it inside the segment).
    let lead = (ALIGN - (base as usize) % ALIGN) % ALIGN;
    // Each offer also carries the slot's length (the message this rank expects), so a
    // sender whose message is longer or shorter (different halo specs on the two ranks) is
    // refused instead of writing past the slot or leaving part of it unwritten.
    let offers: Vec<[u64; 2]> = offsets
        .iter()
        .zip(links)
        .map(|(o, l)| o.map_or([NO_SLOT, 0], |off| [(off + lead) as u64, l.bytes as u64]))
        .collect();
    let mut theirs = vec![[NO_SLOT, 0]; links.len()];
    let ranks: Vec<usize> = links.iter().map(|l| l.rank).collect();
    crate::comm::exchange(&shared.credits, &ranks, &offers, &mut theirs, 1);
    let mut slots = Vec::with_capacity(links.len());
    for ((l, &[mine, _]), &[peer_off, peer_len]) in links.iter().zip(&offers).zip(&theirs) {
        if mine == NO_SLOT || peer_off == NO_SLOT {
            slots.push(None);
            continue;
        }
        if peer_len != l.bytes as u64 {
            return Err(Error::invalid(format!(
                "rank {} expects a halo message of {peer_len} bytes from this rank, which sends {} \
                 (different halo specs on the two ranks)",
                l.rank, l.bytes
            )));
        }
        let Some(peer) = peer_of(l.rank) else {
            return Err(Error::invalid("a neighbour offered a slot on another node"));
        };
        let (mut size, mut unit, mut peer_base): (ffi::MPI_Aint, c_int, *mut u8) =
            (0, 0, std::ptr::null_mut());
        // SAFETY: MPI writes the three locals; `peer` is a rank of the window's group.
        let code = unsafe {
            ffi::MPI_Win_shared_query(
                win,
                peer,
                &mut size,
                &mut unit,
                (&mut peer_base as *mut *mut u8).cast(),
            )
        };
        check(code, "MPI_Win_shared_query")?;
        let end = usize::try_from(peer_off).ok().and_then(|o| o.checked_add(l.bytes).map(|e| (o, e)));
        match end {
            Some((o, e))
                if e as u128 <= size.max(0) as u128 && (peer_base as usize).wrapping_add(o) % ALIGN == 0 =>
            {
                slots.push(Some(Slot {
                    // In bounds of the peer's segment and aligned (checked just above); as long
                    // as the message (the lengths agree, checked above).
                    peer: peer_base.wrapping_add(o),
                    // In bounds of this rank's segment: `mine` + bytes <= len (with the lead).
                    own: base.wrapping_add(mine as usize),
                }))
            }
            _ => return Err(Error::invalid("a neighbour offered a slot outside its window")),
        }
    }
    Ok(slots)
}
