//! Message tags of halo updaters: derived from what a message carries (never from a
//! per-rank counter, so every rank computes the same tag whatever order it creates its
//! updaters in), bounded by the communicator's `MPI_TAG_UB`, and claimed per communicator
//! while an updater lives, so two updaters whose messages could be confused are refused
//! at creation instead of exchanging each other's data.

use gpubuf_core::{Error, Result};
use gpubuf_halo::Boundary;
use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::Mutex;

/// The largest tag every MPI implementation accepts (`MPI_TAG_UB` is at least this).
pub(crate) const MIN_TAG_UB: i32 = 32_767;

/// The tags claimed in this process, by communicator handle: (peer rank, direction, tag)
/// and the name of the updater holding it.
static CLAIMED: Mutex<Vec<(usize, Key, String)>> = Mutex::new(Vec::new());

/// What MPI matches a message on, seen from one rank: the other rank, the direction and
/// the tag (the communicator is the claim's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    /// The neighbour rank.
    pub peer: usize,
    /// Whether this rank sends (else receives) the message.
    pub send: bool,
    /// The message tag.
    pub tag: i32,
}

/// `MPI_TAG_UB` of `comm`: the largest tag it accepts (at least 32767).
pub(crate) fn tag_ub(comm: &SimpleCommunicator) -> i32 {
    let mut value: *mut c_int = std::ptr::null_mut();
    let mut flag: c_int = 0;
    // SAFETY: `comm` is a live communicator; MPI_TAG_UB is a predefined attribute key whose
    // value MPI returns as a pointer to an `int` it owns (stored through the
    // `void*`-typed out argument); `flag` says whether it was set.
    unsafe {
        mpi::ffi::MPI_Comm_get_attr(
            comm.as_raw(),
            mpi::ffi::MPI_TAG_UB as c_int,
            (&mut value as *mut *mut c_int).cast::<c_void>(),
            &mut flag,
        );
    }
    if flag == 0 || value.is_null() {
        return MIN_TAG_UB;
    }
    // SAFETY: with `flag` set, `value` points at MPI's `int` attribute value.
    unsafe { *value }.max(MIN_TAG_UB)
}

/// The tag of a message of updater `name` carrying the boundary pairs `pairs` (sender's
/// boundary, receiver's halo) of `quantities` quantities: FNV-1a over all of it (stable
/// across processes and builds), reduced to `0..=ub`.
pub(crate) fn tag(
    name: &str,
    pairs: &[(Boundary, Boundary)],
    quantities: usize,
    vector: bool,
    ub: i32,
) -> i32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(name.as_bytes());
    eat(&[0xff]);
    let index = |b: Boundary| Boundary::ALL.iter().position(|&x| x == b).unwrap_or(usize::MAX) as u8;
    for &(a, b) in pairs {
        eat(&[index(a), index(b)]);
    }
    eat(&(quantities as u64).to_le_bytes());
    eat(&[u8::from(vector)]);
    let modulus = u64::try_from(ub).unwrap_or(0).max(MIN_TAG_UB as u64) + 1;
    // Below `ub + 1 <= 2^31`, so it fits an i32.
    (h % modulus) as i32
}

/// Tags an updater holds on one communicator; released when dropped.
#[derive(Debug)]
pub(crate) struct Claim {
    comm: usize,
    keys: Vec<Key>,
}

/// Claims `keys` on the communicator `comm` for the updater `name`.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the updater alive on the same communicator that
/// already uses one of the keys (nothing is claimed then).
pub(crate) fn claim(comm: &SimpleCommunicator, name: &str, keys: Vec<Key>) -> Result<Claim> {
    // SAFETY: `comm` is a live communicator; `MPI_Comm_c2f` only reads its handle. The
    // Fortran handle is unique among live communicators, and the claim's updater keeps
    // its communicator alive (it owns or borrows it).
    let handle = unsafe { mpi::ffi::MPI_Comm_c2f(comm.as_raw()) } as usize;
    let mut claimed = CLAIMED.lock().unwrap_or_else(|e| e.into_inner());
    let held: HashMap<Key, &str> =
        claimed.iter().filter(|c| c.0 == handle).map(|c| (c.1, c.2.as_str())).collect();
    for k in &keys {
        if let Some(other) = held.get(k) {
            let what = if k.send { "sends to" } else { "receives from" };
            return Err(Error::invalid(format!(
                "halo updater {name:?} would use tag {} with rank {} ({what}), as updater {other:?} alive on \
                 the same communicator does: their messages could be mixed up; give one of them another name",
                k.tag, k.peer
            )));
        }
    }
    claimed.extend(keys.iter().map(|&k| (handle, k, name.to_string())));
    Ok(Claim { comm: handle, keys })
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut claimed = CLAIMED.lock().unwrap_or_else(|e| e.into_inner());
        for k in &self.keys {
            if let Some(at) = claimed.iter().position(|c| c.0 == self.comm && c.1 == *k) {
                claimed.swap_remove(at);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_stay_in_range_and_depend_on_everything() {
        let pairs = [(Boundary::North, Boundary::South)];
        let t = tag("t", &pairs, 1, false, MIN_TAG_UB);
        assert!((0..=MIN_TAG_UB).contains(&t));
        for ub in [MIN_TAG_UB, i32::MAX, 0, -1] {
            assert!((0..=ub.max(MIN_TAG_UB)).contains(&tag("x", &pairs, 3, true, ub)));
        }
        let others = [
            tag("u", &pairs, 1, false, i32::MAX),
            tag("t", &[(Boundary::South, Boundary::North)], 1, false, i32::MAX),
            tag("t", &pairs, 2, false, i32::MAX),
            tag("t", &pairs, 1, true, i32::MAX),
        ];
        let base = tag("t", &pairs, 1, false, i32::MAX);
        assert!(others.iter().all(|&o| o != base), "{base} {others:?}");
    }
}
