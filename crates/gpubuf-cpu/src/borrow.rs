//! Byte-range borrows of CPU allocations.
//!
//! Every access to the bytes of a [`CpuMemory`](crate::CpuMemory) happens under a borrow of
//! the byte range it touches: **shared** (read) or **exclusive** (write). Two borrows
//! *conflict* when their ranges share a byte and one of them is exclusive; any number of
//! shared borrows may overlap, and borrows of disjoint ranges never conflict, so two arrays
//! carved from one allocation (a pool segment) are borrowed independently, mutably too,
//! nested on one thread or from two threads at once. An empty range conflicts with nothing
//! and is not recorded.
//!
//! Each thread records the borrows it holds. A new borrow:
//! * that conflicts with one the thread holds fails with [`Error::InvalidArgument`] naming
//!   both ranges (re-entrant access would alias the closure's slice or view);
//! * that conflicts with one another thread holds waits for its release, but only when
//!   the new range lies wholly *after* every borrow the calling thread holds, in the order
//!   (allocation address, byte offset): allocation first, then its range starts at or
//!   past the end of every range the thread holds in the same allocation, and only off
//!   rayon's worker threads. Otherwise it is only tried, and fails with
//!   [`Error::InvalidArgument`] while the conflict lasts.
//!
//! The rule rules out deadlock: a thread waiting for range `R`, blocked by a borrow `H` of
//! another thread, waits on something that starts before the end of `H`; if that thread in
//! turn waits, for `R2`, then `R2` starts after the end of `H`, hence after the start of
//! `R`. Along any chain of waiting threads the first bytes of what they wait for strictly
//! increase, so no chain closes into a cycle. Waiting is on held borrows only (a waiting
//! exclusive borrow does not hold back new shared ones), so a thread is never blocked by a
//! request that is itself waiting. A thread can also wait for a free rayon worker (the
//! holder of a borrow inside `par_chunks_mut`, whose chunks queue on the pool): were the
//! workers allowed to wait for borrows, they could all wait on that holder while it waits
//! for one of them, so on a worker a conflict with another thread is an error instead.

use gpubuf_core::{Error, Result};
use std::cell::RefCell;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

/// How a range is borrowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Read: any number may overlap.
    Shared,
    /// Write: overlaps no other borrow.
    Exclusive,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Shared => "read",
            Mode::Exclusive => "write",
        }
    }
}

/// A borrow: the allocation's id, the byte range `start..end` in it, and the mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Held {
    id: usize,
    start: usize,
    end: usize,
    mode: Mode,
}

impl Held {
    /// Whether the two borrows share a byte of one allocation and one of them writes.
    fn conflicts(&self, other: &Held) -> bool {
        self.id == other.id
            && self.start < other.end
            && other.start < self.end
            && (self.mode == Mode::Exclusive || other.mode == Mode::Exclusive)
    }

    /// Whether this range starts after the last byte of `held`, in the order (allocation,
    /// byte).
    fn after(&self, held: &Held) -> bool {
        self.id > held.id || (self.id == held.id && self.start >= held.end)
    }

    fn describe(&self) -> String {
        format!("bytes {}..{} of CPU allocation {:#x} ({})", self.start, self.end, self.id, self.mode.name())
    }
}

thread_local! {
    /// The borrows this thread holds (or has been lent, see [`lending`]).
    static HELD: RefCell<Vec<Held>> = const { RefCell::new(Vec::new()) };
}

/// Removes one record equal to each of `gone` from this thread's borrows.
fn forget(gone: &[Held]) {
    let _ = HELD.try_with(|h| {
        let mut h = h.borrow_mut();
        for g in gone {
            if let Some(at) = h.iter().rposition(|x| x == g) {
                h.swap_remove(at);
            }
        }
    });
}

/// The borrows the calling thread holds, to lend to threads that work for it while it
/// waits (see [`lending`]).
pub(crate) fn held_now() -> Vec<Held> {
    HELD.try_with(|h| h.borrow().clone()).unwrap_or_default()
}

/// Runs `f` with `lent` counted as held by this thread too. A worker thread running a
/// closure for a thread that holds borrows and waits for the worker must not wait on
/// those borrows (the holder cannot release them until the worker is done): with them
/// lent, a conflicting borrow is the re-entrancy error instead of a deadlock, and one that
/// is busy and not ordered after them is tried, not waited for.
pub(crate) fn lending<R>(lent: &[Held], f: impl FnOnce() -> R) -> R {
    struct Return<'a>(&'a [Held]);
    impl Drop for Return<'_> {
        fn drop(&mut self) {
            forget(self.0);
        }
    }
    let _ = HELD.try_with(|h| h.borrow_mut().extend_from_slice(lent));
    let _back = Return(lent);
    f()
}

/// The borrows of one allocation that are live now, on any thread.
#[derive(Default)]
struct Table {
    /// Key of the next borrow (never 0).
    next: u64,
    live: Vec<(u64, Held)>,
}

/// The range borrows of one allocation.
///
/// `std`'s mutex and condition variable rather than parking_lot's: under Miri, parking_lot's
/// wait queue casts integers to pointers, which hides pointer bugs from Miri's checks.
#[derive(Default)]
pub(crate) struct Borrows {
    table: Mutex<Table>,
    /// Signalled whenever a borrow is released.
    released: Condvar,
}

impl Borrows {
    /// The table, locked. No user code runs while it is held, so a poisoned lock (a panic
    /// inside this module) still holds a consistent table.
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Borrows bytes `start..end` of allocation `id` (whose borrows `self` tracks), by the
    /// rules in the module docs.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when this thread holds a conflicting borrow, or when
    /// another thread does and waiting for it could deadlock.
    pub(crate) fn borrow(&self, id: usize, start: usize, end: usize, mode: Mode) -> Result<Borrowed<'_>> {
        let want = Held { id, start, end, mode };
        if start >= end {
            return Ok(Borrowed { borrows: self, key: 0, held: want });
        }
        // Outside a thread's lifetime (thread-local destructors) nothing is recorded: the
        // thread holds no borrow then, so waiting is safe.
        let (mine, ordered) = HELD
            .try_with(|h| {
                let h = h.borrow();
                (h.iter().find(|x| x.conflicts(&want)).copied(), h.iter().all(|x| want.after(x)))
            })
            .unwrap_or((None, true));
        // A rayon worker never waits: the holder may itself be waiting for the pool's workers
        // (a `par_chunks_mut` inside its view), and a worker parked here would not run them.
        let may_wait = ordered && rayon::current_thread_index().is_none();
        if let Some(mine) = mine {
            return Err(Error::invalid(format!(
                "re-entrant access to {}: this thread already holds {} (a backend call from inside \
                 with_bytes/with_array on the same bytes)",
                want.describe(),
                mine.describe()
            )));
        }
        let mut table = self.table();
        while let Some(&(_, busy)) = table.live.iter().find(|(_, x)| x.conflicts(&want)) {
            if !may_wait {
                return Err(Error::invalid(format!(
                    "{} is busy: another thread holds {}, and this thread holds bytes ordered after \
                     its start (inside with_bytes/with_array): waiting could deadlock; call from \
                     outside the closure",
                    want.describe(),
                    busy.describe()
                )));
            }
            table = self.released.wait(table).unwrap_or_else(PoisonError::into_inner);
        }
        table.next += 1;
        let key = table.next;
        table.live.push((key, want));
        drop(table);
        let _ = HELD.try_with(|h| h.borrow_mut().push(want));
        Ok(Borrowed { borrows: self, key, held: want })
    }
}

/// A live borrow; released on drop.
pub(crate) struct Borrowed<'a> {
    borrows: &'a Borrows,
    /// Its key in the table, or 0 for an empty range (not recorded).
    key: u64,
    held: Held,
}

impl Drop for Borrowed<'_> {
    fn drop(&mut self) {
        if self.key == 0 {
            return;
        }
        forget(&[self.held]);
        let mut table = self.borrows.table();
        if let Some(at) = table.live.iter().position(|(k, _)| *k == self.key) {
            table.live.swap_remove(at);
        }
        drop(table);
        self.borrows.released.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflicts_and_order() {
        let r = |start, end, mode| Held { id: 1, start, end, mode };
        let (s, x) = (Mode::Shared, Mode::Exclusive);
        assert!(!r(0, 8, s).conflicts(&r(4, 12, s)));
        assert!(r(0, 8, s).conflicts(&r(4, 12, x)));
        assert!(!r(0, 8, x).conflicts(&r(8, 12, x)), "adjacent ranges share no byte");
        assert!(!r(0, 8, x).conflicts(&Held { id: 2, start: 0, end: 8, mode: x }));
        assert!(r(8, 12, s).after(&r(0, 8, x)));
        assert!(!r(7, 12, s).after(&r(0, 8, x)));
        assert!(Held { id: 2, start: 0, end: 1, mode: s }.after(&r(0, 8, x)));
    }

    #[test]
    fn lent_borrows_are_returned() {
        let b = Borrows::default();
        let g = b.borrow(7, 0, 16, Mode::Exclusive).unwrap();
        let lent = held_now();
        std::thread::scope(|s| {
            s.spawn(|| {
                lending(&lent, || assert!(b.borrow(7, 8, 9, Mode::Shared).is_err()));
                assert!(held_now().is_empty());
            });
        });
        drop(g);
        assert!(held_now().is_empty());
        assert!(b.borrow(7, 8, 9, Mode::Shared).is_ok());
    }
}
