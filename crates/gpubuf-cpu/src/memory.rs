//! 64-byte aligned host allocations whose bytes are borrowed by range.
//!
//! The CPU backend shares allocations between handles (`&CpuMemory`), as device memory is
//! shared on a GPU. To keep that free of data races in Rust's sense, every operation
//! borrows the byte range it touches (shared to read, exclusive to write, see
//! [`crate::borrow`]) for as long as it touches it; an operation on several ranges borrows
//! them in the order (allocation address, byte offset), so it cannot deadlock.
//!
//! A closure given to [`CpuMemory::with_bytes`] (the whole allocation) or `with_array`
//! (the bytes its view spans) runs with the range borrowed and may call the backend again.
//! Each thread records the borrows it holds, so such a call never deadlocks:
//! * on bytes that conflict with a borrow the thread holds (they overlap, and one of the
//!   two writes), it fails with [`Error::InvalidArgument`] (re-entrant access would alias
//!   the closure's slice); disjoint bytes of the same allocation, or overlapping reads, are
//!   borrowed as usual;
//! * on a range ordered after every borrow the thread holds, it waits as usual for another
//!   thread's conflicting borrow to end;
//! * on any other range, it only tries, and fails with [`Error::InvalidArgument`] when
//!   another thread holds a conflicting borrow (waiting there could close a cycle). Calling
//!   from outside the closure avoids both errors.

use crate::borrow::{Borrowed, Borrows, Mode};
use gpubuf_core::{DeviceMemory, Error, Result};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::fmt;
use std::ptr::NonNull;

/// Alignment of every CPU allocation, in bytes.
pub const ALIGN: usize = 64;

/// One host allocation, zero-initialised, aligned to [`ALIGN`] bytes.
pub struct CpuMemory {
    ptr: NonNull<u8>,
    len: usize,
    /// Bytes mapped with `mmap` (huge-page backed, see [`crate::huge`]), or 0 for a heap
    /// allocation.
    mapped: usize,
    /// The live borrows of its byte ranges.
    borrows: Borrows,
    /// Frees adopted memory instead of `dealloc`/`unmap` (see `crate::interop`).
    release: Option<Box<dyn FnOnce() + Send + Sync>>,
}

// SAFETY: the allocation is owned by this value and every access to its bytes happens under
// a borrow of the accessed range in `borrows` (exclusive where it writes, see
// `crate::borrow`), so sharing references across threads cannot race.
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
        CpuMemory { ptr, len, mapped: 0, borrows: Borrows::default(), release: Some(release) }
    }

    /// Adopts `len` bytes of host memory at `ptr` that something else owns (a numpy
    /// array, a buffer of another library), without a copy. `owner` is kept alive until the
    /// returned memory drops and is then dropped, exactly once (on whichever thread drops the
    /// last handle): that is the moment the memory is given back. gpubuf never frees `ptr`.
    ///
    /// The adopted memory takes part in the borrow model of this module like any
    /// allocation: gpubuf's operations on it borrow the bytes they touch while they touch
    /// them.
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
    ///   gpubuf operation may read or write them: gpubuf's borrows order its own accesses
    ///   only, so foreign accesses must be ordered by the caller (for example by not
    ///   touching the memory from another thread during a gpubuf call), and no Rust
    ///   reference (`&[u8]`, `&mut [u8]`) to the bytes may be live across a gpubuf call;
    /// * no gpubuf operation is given both this memory and another allocation that shares
    ///   bytes with it (a gpubuf allocation, or the same bytes adopted again), unless the
    ///   operation checks for it: distinct allocations are taken to be disjoint (each tracks its
    ///   own borrows, and copies between them do not allow for overlap). The CPU backend's
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

    /// Allocates `len` zeroed bytes; with `touch`, writes every page so it is resident. A
    /// request past the machine's memory and swap is refused before anything is mapped
    /// (where the kernel overcommits, the mapping would succeed and its first writes would
    /// end the process).
    pub(crate) fn new(len: usize, touch: bool) -> Result<Self> {
        if len == 0 {
            // Dangling but aligned and non-null: the empty slices formed from it are valid.
            let ptr = NonNull::new(std::ptr::without_provenance_mut::<u8>(ALIGN))
                .ok_or_else(|| Error::invalid("null"))?;
            return Ok(CpuMemory { ptr, len, mapped: 0, borrows: Borrows::default(), release: None });
        }
        if let Some(limit) = crate::huge::memory_limit().filter(|&l| len > l) {
            return Err(Error::OutOfMemory { requested: len, available: Some(limit), pool: None });
        }
        if let Some((ptr, mapped)) = crate::huge::map(len) {
            if touch {
                crate::huge::touch(ptr, len);
            }
            return Ok(CpuMemory { ptr, len, mapped, borrows: Borrows::default(), release: None });
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
        Ok(CpuMemory { ptr, len, mapped: 0, borrows: Borrows::default(), release: None })
    }

    /// Borrows bytes `start .. start + len` (inside the allocation: the callers check),
    /// by the rules in the module docs; released when the guard drops.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when this thread holds a conflicting borrow of these
    /// bytes, or when another thread does and the range is not ordered after every borrow
    /// this thread holds.
    pub(crate) fn borrow(&self, start: usize, len: usize, mode: Mode) -> Result<Borrowed<'_>> {
        let end = start.checked_add(len).filter(|&e| e <= self.len).ok_or(Error::OutOfBounds {
            what: "borrowed bytes of a CPU allocation".into(),
            start,
            end: start.saturating_add(len),
            len: self.len,
        })?;
        self.borrows.borrow(self.id(), start, end, mode)
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

    /// Runs `f` on the whole allocation's bytes while they are borrowed for reading (other
    /// readers may run at the same time; writers of any of its bytes wait, or are refused
    /// as in the module docs).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when called from inside a closure that holds a write
    /// borrow of any of these bytes, or when another thread holds one and waiting could
    /// deadlock (see the module docs); `f` does not run then.
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        self.with_range(0, self.len, f)
    }

    /// Runs `f` on the whole allocation's bytes, mutably, while they are borrowed for
    /// writing (no other borrow of any of its bytes is live meanwhile).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when called from inside a closure that holds a borrow of
    /// any of these bytes, or when another thread holds one and waiting could deadlock
    /// (see the module docs); `f` does not run then.
    pub fn with_bytes_mut<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        self.with_range_mut(0, self.len, f)
    }

    /// Runs `f` on bytes `start .. start + len`, borrowed for reading.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the range leaves the allocation; as
    /// [`CpuMemory::with_bytes`].
    pub(crate) fn with_range<R>(&self, start: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        let _borrow = self.borrow(start, len, Mode::Shared)?;
        // SAFETY: `borrow` checked the range inside our live allocation (`ptr` is valid for
        // `self.len` bytes, initialised: zeroed or adopted initialised) and holds a shared
        // borrow of it until `_borrow` drops, after `f`: no writer touches these bytes
        // meanwhile, and the slice does not escape `f`.
        let bytes = unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(start), len) };
        Ok(f(bytes))
    }

    /// Runs `f` on bytes `start .. start + len`, mutably, borrowed for writing.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the range leaves the allocation; as
    /// [`CpuMemory::with_bytes_mut`].
    pub(crate) fn with_range_mut<R>(
        &self,
        start: usize,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R> {
        let _borrow = self.borrow(start, len, Mode::Exclusive)?;
        // SAFETY: as in `with_range`, with an exclusive borrow: no other access (on any
        // thread) reaches these bytes until `_borrow` drops, after `f`, so this is the only
        // reference to them.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(start), len) };
        Ok(f(bytes))
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

/// One range an operation borrows: the allocation, the first byte, the length, and how.
pub(crate) type Span<'a> = (&'a CpuMemory, usize, usize, Mode);

/// Borrows every range of `spans`, in the order (allocation address, byte offset), the
/// overlapping ranges of one allocation merged into one (a write where any of them
/// writes); returns the borrows and, for each input, the base pointer of its allocation.
/// On an error the borrows taken so far are released.
///
/// # Errors
/// As [`CpuMemory::borrow`]; [`Error::InvalidArgument`] (nothing borrowed) when two
/// distinct allocations share bytes (memory adopted twice, or a gpubuf allocation adopted
/// again through a foreign view of it): the callers copy between allocations as if they
/// were disjoint.
pub(crate) fn borrow_all<'a>(spans: &[Span<'a>]) -> Result<(Vec<Borrowed<'a>>, Vec<*mut u8>)> {
    let mut order: Vec<&CpuMemory> = spans.iter().map(|s| s.0).collect();
    order.sort_by_key(|m| m.id());
    order.dedup_by_key(|m| m.id());
    let mut extents: Vec<(usize, usize)> =
        order.iter().filter(|m| m.len > 0).map(|m| (m.ptr.as_ptr() as usize, m.len)).collect();
    extents.sort_unstable();
    if extents.windows(2).any(|w| w[0].0.saturating_add(w[0].1) > w[1].0) {
        return Err(Error::invalid(
            "two distinct CPU allocations share memory (host memory adopted twice, or a gpubuf \
             allocation adopted again): one operation cannot use both",
        ));
    }
    let mut ranges: Vec<(&CpuMemory, usize, usize, Mode)> = Vec::with_capacity(spans.len());
    for &(m, start, len, mode) in spans {
        let end = start.checked_add(len).filter(|&e| e <= m.len).ok_or(Error::OutOfBounds {
            what: "borrowed bytes of a CPU allocation".into(),
            start,
            end: start.saturating_add(len),
            len: m.len,
        })?;
        if len > 0 {
            ranges.push((m, start, end, mode));
        }
    }
    ranges.sort_by_key(|r| (r.0.id(), r.1));
    let mut merged: Vec<(&CpuMemory, usize, usize, Mode)> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match merged.last_mut() {
            Some(last) if last.0.id() == r.0.id() && r.1 < last.2 => {
                last.2 = last.2.max(r.2);
                if r.3 == Mode::Exclusive {
                    last.3 = Mode::Exclusive;
                }
            }
            _ => merged.push(r),
        }
    }
    let borrows = merged.iter().map(|&(m, start, end, mode)| m.borrow(start, end - start, mode));
    let borrows: Vec<Borrowed<'a>> = borrows.collect::<Result<_>>()?;
    let ptrs = spans.iter().map(|s| s.0.ptr.as_ptr()).collect();
    Ok((borrows, ptrs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A request past the machine's memory is refused with the limit, before any mapping
    /// (on a kernel that overcommits, the mapping would succeed and its pages would be
    /// written until the process is killed).
    #[test]
    fn a_request_past_the_machine_is_refused_before_mapping() {
        let Some(limit) = crate::huge::memory_limit() else { return };
        for len in [limit + 1, limit.saturating_mul(2), usize::MAX / 2, usize::MAX] {
            match CpuMemory::new(len, true) {
                Err(Error::OutOfMemory { requested, available, .. }) => {
                    assert_eq!((requested, available), (len, Some(limit)));
                }
                other => panic!("{len} bytes: {other:?}"),
            }
        }
        assert!(CpuMemory::new(4 << 20, true).is_ok(), "a small request still succeeds");
    }

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
        // Re-entrant writes are refused as for gpubuf's own allocations; reads may nest.
        assert!(mem.with_bytes(|_| mem.with_bytes_mut(|_| ()).is_err()).unwrap());
        assert!(mem.with_bytes(|_| mem.with_bytes(|_| ()).is_ok()).unwrap());
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        drop(mem);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn borrow_all_refuses_distinct_allocations_sharing_bytes() {
        let mut storage = vec![0u64; 8];
        let base = storage.as_mut_ptr().cast::<u8>();
        let at = |k: usize| NonNull::new(base.wrapping_add(k)).unwrap();
        // SAFETY: every range lies inside the 64 bytes of `storage`, which outlives the three
        // and is not touched otherwise; the overlapping pairs are only given to `borrow_all`,
        // which must refuse them before any byte is touched.
        let (a, b, c) = unsafe {
            (
                CpuMemory::adopt_raw(at(0), 32, Box::new(())).unwrap(),
                CpuMemory::adopt_raw(at(24), 16, Box::new(())).unwrap(),
                CpuMemory::adopt_raw(at(32), 32, Box::new(())).unwrap(),
            )
        };
        let own = CpuMemory::new(64, false).unwrap();
        fn all(m: &CpuMemory) -> Span<'_> {
            (m, 0, m.len(), Mode::Shared)
        }
        assert!(borrow_all(&[all(&a), all(&b)]).is_err());
        assert!(borrow_all(&[all(&own), all(&c), all(&b)]).is_err());
        // Adjacent, or the same allocation twice, is fine; nothing stays borrowed after a
        // refusal.
        assert_eq!(borrow_all(&[all(&a), all(&c), all(&a), all(&own)]).unwrap().1.len(), 4);
        assert!(borrow_all(&[all(&b)]).is_ok());
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
