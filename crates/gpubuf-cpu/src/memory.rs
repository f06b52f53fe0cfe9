//! 64-byte aligned host allocations with a per-allocation lock.
//!
//! The CPU backend shares allocations between handles (`&CpuMemory`), as device memory is
//! shared on a GPU. To keep that free of data races in Rust's sense, every operation holds
//! the allocation's lock while it touches the bytes; operations on several allocations
//! take the locks in address order, so they cannot deadlock.
//!
//! A closure given to [`CpuMemory::with_bytes`] (or `with_array`) runs with the lock held
//! and may call the backend again. Each thread records the locks it holds, so such a call
//! never deadlocks:
//! * on an allocation the thread already holds, it fails with
//!   [`Error::InvalidArgument`] (re-entrant access would alias the closure's slice);
//! * on an allocation ordered after every lock the thread holds, it waits as usual (the
//!   address order is kept);
//! * on one ordered before, it only tries the lock, and fails with
//!   [`Error::InvalidArgument`] when another thread holds it (waiting there could close a
//!   cycle). Calling from outside the closure avoids both errors.

use gpubuf_core::{DeviceMemory, Error, Result};
use parking_lot::{Mutex, MutexGuard};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::cell::RefCell;
use std::fmt;
use std::ptr::NonNull;

thread_local! {
    /// Ids of the allocations whose locks this thread holds.
    static HELD: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// The allocations whose locks the calling thread holds, to lend to threads that work for
/// it while it waits (see [`lending`]).
pub(crate) fn held_now() -> Vec<usize> {
    HELD.try_with(|h| h.borrow().clone()).unwrap_or_default()
}

/// Runs `f` with `ids` counted as held by this thread too. A worker thread running a
/// closure for a thread that holds locks and waits for the worker must not wait on those
/// locks (the holder cannot release them until the worker is done): with the ids lent, a
/// call back into the same allocation is the re-entrancy error instead of a deadlock, and
/// a busy allocation ordered before them is tried, not waited for.
pub(crate) fn lending<R>(ids: &[usize], f: impl FnOnce() -> R) -> R {
    struct Return<'a>(&'a [usize]);
    impl Drop for Return<'_> {
        fn drop(&mut self) {
            let _ = HELD.try_with(|h| {
                let mut h = h.borrow_mut();
                for id in self.0 {
                    if let Some(at) = h.iter().rposition(|x| x == id) {
                        h.swap_remove(at);
                    }
                }
            });
        }
    }
    let _ = HELD.try_with(|h| h.borrow_mut().extend_from_slice(ids));
    let _back = Return(ids);
    f()
}

/// Alignment of every CPU allocation, in bytes.
pub const ALIGN: usize = 64;

/// One host allocation, zero-initialised, aligned to [`ALIGN`] bytes.
pub struct CpuMemory {
    ptr: NonNull<u8>,
    len: usize,
    /// Bytes mapped with `mmap` (huge-page backed, see [`crate::huge`]), or 0 for a heap
    /// allocation.
    mapped: usize,
    lock: Mutex<()>,
    /// Frees adopted memory instead of `dealloc`/`unmap` (see `crate::interop`).
    release: Option<Box<dyn FnOnce() + Send + Sync>>,
}

// SAFETY: the allocation is owned by this value and every access to its bytes happens while
// `lock` is held (see `Locked`), so sharing references across threads cannot race.
unsafe impl Send for CpuMemory {}
// SAFETY: as above.
unsafe impl Sync for CpuMemory {}

impl fmt::Debug for CpuMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CpuMemory").field("ptr", &self.ptr).field("len", &self.len).finish()
    }
}

impl CpuMemory {
    /// Wraps memory owned elsewhere: `release` runs once, on drop, instead of a free.
    ///
    /// # Safety
    /// * `ptr` is aligned to 8 bytes and valid for reads and writes of `len` bytes until
    ///   `release` runs, and nothing else accesses those bytes meanwhile.
    pub(crate) unsafe fn adopted(
        ptr: NonNull<u8>,
        len: usize,
        release: Box<dyn FnOnce() + Send + Sync>,
    ) -> Self {
        CpuMemory { ptr, len, mapped: 0, lock: Mutex::new(()), release: Some(release) }
    }

    /// Adopts `len` bytes of host memory at `ptr` that something else owns (a numpy
    /// array, a buffer of another library), without a copy. `owner` is kept alive until the
    /// returned memory drops and is then dropped, exactly once (on whichever thread drops the
    /// last handle): that is the moment the memory is given back. gpubuf never frees `ptr`.
    ///
    /// The adopted memory takes part in the lock model of this module like any allocation:
    /// gpubuf's operations on it hold its lock while they touch the bytes.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `ptr` is not a multiple of
    /// [`ADOPT_ALIGN`](crate::interop::ADOPT_ALIGN) (CPU kernels read elements of up to 8
    /// bytes at element-aligned offsets) or `len` exceeds `isize::MAX`; `owner` is dropped
    /// then.
    ///
    /// # Safety
    /// * `ptr` is valid for reads and writes of `len` bytes (one live allocation, or a
    ///   part of one), and those bytes are initialised, from this call until `owner` is
    ///   dropped;
    /// * the memory is not freed, unmapped or reallocated while `owner` lives (holding
    ///   `owner` is what keeps it alive);
    /// * while the returned memory (or any handle of it) lives, nothing outside gpubuf
    ///   reads the bytes while a gpubuf operation may write them, nor writes them while a
    ///   gpubuf operation may read or write them: gpubuf's lock orders its own accesses
    ///   only, so foreign accesses must be ordered by the caller (for example by not
    ///   touching the memory from another thread during a gpubuf call), and no Rust
    ///   reference (`&[u8]`, `&mut [u8]`) to the bytes may be live across a gpubuf call;
    /// * no gpubuf operation is given both this memory and another allocation that shares
    ///   bytes with it (a gpubuf allocation, or the same bytes adopted again), unless the
    ///   operation checks for it: distinct allocations are taken to be disjoint (each has its
    ///   own lock, and copies between them do not allow for overlap). The CPU backend's
    ///   copies, gathers and scatters check, and refuse such a pair with
    ///   [`Error::InvalidArgument`]; nested `with_bytes`/`with_array` closures on two
    ///   allocations, and code walking allocations' bytes itself, do not.
    pub unsafe fn adopt_raw(
        ptr: NonNull<u8>,
        len: usize,
        owner: Box<dyn std::any::Any + Send + Sync>,
    ) -> Result<Self> {
        let align = crate::interop::ADOPT_ALIGN;
        if ptr.as_ptr() as usize % align != 0 {
            return Err(Error::invalid(format!(
                "adopted host memory at {ptr:p} is not aligned to {align} bytes"
            )));
        }
        if isize::try_from(len).is_err() {
            return Err(Error::invalid(format!("adopted host memory of {len} bytes exceeds isize::MAX")));
        }
        let release = Box::new(move || drop(owner));
        // SAFETY: alignment checked above; validity for `len` bytes until `release` (which
        // drops `owner`) runs, and the exclusion of foreign accesses during gpubuf's own,
        // are this function's safety contract.
        Ok(unsafe { Self::adopted(ptr, len, release) })
    }

    /// Allocates `len` zeroed bytes; with `touch`, writes every page so it is resident.
    pub(crate) fn new(len: usize, touch: bool) -> Result<Self> {
        if len == 0 {
            // Dangling but aligned and non-null: the empty slices formed from it are valid.
            let ptr = NonNull::new(std::ptr::without_provenance_mut::<u8>(ALIGN))
                .ok_or_else(|| Error::invalid("null"))?;
            return Ok(CpuMemory { ptr, len, mapped: 0, lock: Mutex::new(()), release: None });
        }
        if let Some((ptr, mapped)) = crate::huge::map(len) {
            if touch {
                crate::huge::touch(ptr, len);
            }
            return Ok(CpuMemory { ptr, len, mapped, lock: Mutex::new(()), release: None });
        }
        let layout = Layout::from_size_align(len, ALIGN).map_err(|_| Error::OutOfMemory {
            requested: len,
            available: None,
            pool: None,
        })?;
        // SAFETY: `layout` has a non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr =
            NonNull::new(raw).ok_or(Error::OutOfMemory { requested: len, available: None, pool: None })?;
        if touch {
            crate::huge::touch(ptr, len);
        }
        Ok(CpuMemory { ptr, len, mapped: 0, lock: Mutex::new(()), release: None })
    }

    /// Locks the allocation for exclusive access, by the rules in the module docs.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when this thread already holds the lock, or when it holds
    /// a lock ordered after this one and another thread holds this one.
    pub(crate) fn lock(&self) -> Result<Locked<'_>> {
        let id = self.id();
        // Outside a thread's lifetime (thread-local destructors) nothing is recorded: the
        // thread holds no lock then, so waiting is safe.
        let (mine, highest) = HELD
            .try_with(|h| {
                let h = h.borrow();
                (h.contains(&id), h.iter().copied().max())
            })
            .unwrap_or((false, None));
        if mine {
            return Err(Error::invalid(format!(
                "re-entrant access to CPU allocation {id:#x}: this thread already holds it (a backend \
                 call from inside with_bytes/with_array on the same allocation)"
            )));
        }
        let guard = match highest {
            Some(top) if top > id => self.lock.try_lock().ok_or_else(|| {
                Error::invalid(format!(
                    "CPU allocation {id:#x} is busy on another thread and this thread holds a later \
                     lock (inside with_bytes/with_array): waiting could deadlock; call from outside \
                     the closure"
                ))
            })?,
            _ => self.lock.lock(),
        };
        let _ = HELD.try_with(|h| h.borrow_mut().push(id));
        Ok(Locked { mem: self, _guard: guard })
    }

    /// The allocation's first byte, for libraries that read or write host memory in place
    /// (MPI). Getting it is safe; using it is not: reads and writes through it race with
    /// gpubuf's own operations on this allocation unless the caller rules them out for as
    /// long as it uses the pointer, and it dangles once the allocation is dropped.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Whether the host byte range `start .. start + len` shares a byte with this
    /// allocation. Only addresses are compared: nothing is read, no reference is formed.
    /// An empty range or an empty allocation shares none. A host slice that shares bytes
    /// with an allocation (memory adopted by [`CpuMemory::adopt_raw`] and seen through a
    /// foreign view) cannot be copied to or from it: the copy would hold a Rust reference
    /// to the slice and one to the allocation over the same bytes.
    pub fn overlaps_host(&self, start: usize, len: usize) -> bool {
        let base = self.ptr.as_ptr() as usize;
        // In u128: a range given by address and length may end past usize::MAX.
        len > 0
            && self.len > 0
            && (start as u128) < base as u128 + self.len as u128
            && (base as u128) < start as u128 + len as u128
    }

    /// Runs `f` on the bytes while holding the lock.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when called from inside a closure that already holds this
    /// allocation (see the module docs); `f` does not run then.
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        let l = self.lock()?;
        Ok(f(l.bytes()))
    }

    /// Runs `f` on the bytes, mutably, while holding the lock.
    ///
    /// # Errors
    /// As [`CpuMemory::with_bytes`].
    pub fn with_bytes_mut<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        let mut l = self.lock()?;
        Ok(f(l.bytes_mut()))
    }
}

impl Drop for CpuMemory {
    fn drop(&mut self) {
        if let Some(free) = self.release.take() {
            free();
        } else if self.mapped > 0 {
            // SAFETY: mapped by `huge::map` with this length, unmapped once.
            unsafe { crate::huge::unmap(self.ptr, self.mapped) };
        } else if self.len > 0 {
            // SAFETY: allocated in `new` with this size and alignment, freed once.
            unsafe { dealloc(self.ptr.as_ptr(), Layout::from_size_align_unchecked(self.len, ALIGN)) };
        }
    }
}

impl DeviceMemory for CpuMemory {
    fn len(&self) -> usize {
        self.len
    }

    fn id(&self) -> usize {
        self as *const CpuMemory as usize
    }
}

/// An allocation whose lock is held: the holder may read and write its bytes.
pub(crate) struct Locked<'a> {
    mem: &'a CpuMemory,
    _guard: MutexGuard<'a, ()>,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let id = self.mem.id();
        let _ = HELD.try_with(|h| {
            let mut h = h.borrow_mut();
            if let Some(at) = h.iter().rposition(|&x| x == id) {
                h.swap_remove(at);
            }
        });
    }
}

impl Locked<'_> {
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: ptr/len describe our live allocation; the lock excludes other accessors.
        unsafe { std::slice::from_raw_parts(self.mem.ptr.as_ptr(), self.mem.len) }
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` makes this the only slice handed out.
        unsafe { std::slice::from_raw_parts_mut(self.mem.ptr.as_ptr(), self.mem.len) }
    }
}

/// Locks every distinct allocation among `mems` in address order; returns the guards and,
/// for each input, the base pointer of its allocation. On an error the locks taken so far
/// are released.
///
/// # Errors
/// As [`CpuMemory::lock`]; [`Error::InvalidArgument`] (nothing locked) when two distinct
/// allocations share bytes (memory adopted twice, or a gpubuf allocation adopted again
/// through a foreign view of it): the callers copy between allocations as if they were
/// disjoint.
pub(crate) fn lock_all<'a>(mems: &[&'a CpuMemory]) -> Result<(Vec<Locked<'a>>, Vec<*mut u8>)> {
    let mut order: Vec<&CpuMemory> = mems.to_vec();
    order.sort_by_key(|m| m.id());
    order.dedup_by_key(|m| m.id());
    let mut spans: Vec<(usize, usize)> =
        order.iter().filter(|m| m.len > 0).map(|m| (m.ptr.as_ptr() as usize, m.len)).collect();
    spans.sort_unstable();
    if spans.windows(2).any(|w| w[0].0.saturating_add(w[0].1) > w[1].0) {
        return Err(Error::invalid(
            "two distinct CPU allocations share memory (host memory adopted twice, or a gpubuf \
             allocation adopted again): one operation cannot use both",
        ));
    }
    let guards: Vec<Locked<'a>> = order.iter().map(|m| m.lock()).collect::<Result<_>>()?;
    let ptrs = mems.iter().map(|m| m.ptr.as_ptr()).collect();
    Ok((guards, ptrs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Counts its drops; holds the storage it stands for.
    struct Owner {
        storage: Vec<u64>,
        drops: Arc<AtomicUsize>,
    }

    impl Drop for Owner {
        fn drop(&mut self) {
            self.drops.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn adopt_raw_shares_bytes_and_drops_owner_once() {
        let drops = Arc::new(AtomicUsize::new(0));
        let mut owner = Box::new(Owner { storage: vec![0u64; 4], drops: drops.clone() });
        let ptr = NonNull::new(owner.storage.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: the Vec's 32 bytes live (inside `owner`, moved into the memory) until the
        // owner drops; nothing else touches them (the Vec is not used again).
        let mem = unsafe { CpuMemory::adopt_raw(ptr, 32, owner) }.unwrap();
        assert_eq!(mem.len(), 32);
        assert_eq!(mem.as_ptr(), ptr.as_ptr());
        mem.with_bytes_mut(|b| b[8] = 7).unwrap();
        mem.with_bytes(|b| assert_eq!(b[8], 7)).unwrap();
        // Re-entrant access is refused as for gpubuf's own allocations.
        assert!(mem.with_bytes(|_| mem.with_bytes(|_| ()).is_err()).unwrap());
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        drop(mem);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn lock_all_refuses_distinct_allocations_sharing_bytes() {
        let mut storage = vec![0u64; 8];
        let base = storage.as_mut_ptr().cast::<u8>();
        let at = |k: usize| NonNull::new(base.wrapping_add(k)).unwrap();
        // SAFETY: every range lies inside the 64 bytes of `storage`, which outlives the three
        // and is not touched otherwise; the overlapping pairs are only given to `lock_all`,
        // which must refuse them before any byte is touched.
        let (a, b, c) = unsafe {
            (
                CpuMemory::adopt_raw(at(0), 32, Box::new(())).unwrap(),
                CpuMemory::adopt_raw(at(24), 16, Box::new(())).unwrap(),
                CpuMemory::adopt_raw(at(32), 32, Box::new(())).unwrap(),
            )
        };
        let own = CpuMemory::new(64, false).unwrap();
        assert!(lock_all(&[&a, &b]).is_err());
        assert!(lock_all(&[&own, &c, &b]).is_err());
        // Adjacent, or the same allocation twice, is fine; nothing stays locked after a
        // refusal.
        assert_eq!(lock_all(&[&a, &c, &a, &own]).unwrap().1.len(), 4);
        assert!(lock_all(&[&b]).is_ok());
        drop((a, b, c));
        drop(storage);
    }

    #[test]
    fn adopt_raw_refuses_misaligned_and_drops_owner() {
        let drops = Arc::new(AtomicUsize::new(0));
        let mut storage = vec![0u64; 2];
        let base = storage.as_mut_ptr().cast::<u8>();
        // SAFETY: one byte into a live 16-byte allocation.
        let odd = NonNull::new(unsafe { base.add(1) }).unwrap();
        let owner = Box::new(Owner { storage: Vec::new(), drops: drops.clone() });
        // SAFETY: 8 bytes from `odd` lie inside `storage`, which outlives the call.
        let r = unsafe { CpuMemory::adopt_raw(odd, 8, owner) };
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        drop(storage);
    }
}
