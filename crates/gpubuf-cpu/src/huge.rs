//! Large host allocations backed by transparent huge pages (Linux).
//!
//! Allocations of at least [`HUGE_FROM`] bytes are mapped directly, aligned to 2 MiB, and
//! marked `MADV_HUGEPAGE`, as numpy does for its large arrays (from 4 MiB there). The
//! mapping is the length rounded to 4 KiB: the whole 2 MiB pages inside it can be huge,
//! the tail stays small, and nothing is wasted. With the kernel's default
//! `madvise` policy that is what gives them 2 MiB pages: a halo pack that reads a few
//! hundred bytes per array row then stays inside a handful of pages instead of taking a
//! TLB miss on every row. Elsewhere (or when the mapping fails) the heap serves them.

use std::ptr::NonNull;

/// Allocations from this size up are mapped with huge pages.
#[cfg_attr(miri, allow(dead_code))] // the mapping is compiled out under Miri
pub const HUGE_FROM: usize = 2 << 20;

/// The huge page size the mappings are aligned to.
#[cfg_attr(miri, allow(dead_code))] // the mapping is compiled out under Miri
const HUGE_PAGE: usize = 2 << 20;

/// The most one allocation may take: the machine's memory and swap together (`sysinfo`,
/// read once), or `None` where that is not known (off Linux, under Miri). Where the kernel
/// overcommits, a mapping larger than the machine succeeds and the first writes to it end
/// the process; gpubuf refuses such a request instead.
#[cfg(all(target_os = "linux", not(miri)))]
pub(crate) fn memory_limit() -> Option<usize> {
    static LIMIT: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        let mut info = std::mem::MaybeUninit::<libc::sysinfo>::zeroed();
        // SAFETY: `sysinfo` writes the struct it is given, which lives for the call.
        if unsafe { libc::sysinfo(info.as_mut_ptr()) } != 0 {
            return None;
        }
        // SAFETY: written by the successful call above (and zeroed before it).
        let info = unsafe { info.assume_init() };
        // The fields are `c_ulong` (u32 on 32-bit targets): the conversions are not useless
        // everywhere.
        #[allow(clippy::useless_conversion)]
        let bytes = u64::from(info.totalram)
            .checked_add(u64::from(info.totalswap))?
            .checked_mul(u64::from(info.mem_unit.max(1)))?;
        usize::try_from(bytes).ok().filter(|&b| b > 0)
    })
}

/// Off Linux and under Miri the limit is not known: the allocator decides.
#[cfg(not(all(target_os = "linux", not(miri))))]
pub(crate) fn memory_limit() -> Option<usize> {
    None
}

/// Writes one byte per 4 KiB page so every page is resident.
pub(crate) fn touch(ptr: NonNull<u8>, len: usize) {
    for page in (0..len).step_by(4096) {
        // SAFETY: `page < len`, inside an allocation of `len` bytes the caller owns
        // exclusively (it was just created).
        unsafe { ptr.as_ptr().add(page).write_volatile(0) };
    }
}

/// Maps `len` zeroed bytes aligned to 2 MiB with huge pages advised; returns the pointer
/// and the mapped length (for [`unmap`]), or `None` below [`HUGE_FROM`], off Linux, under
/// Miri, or when the kernel refuses.
#[cfg(all(target_os = "linux", not(miri)))]
pub(crate) fn map(len: usize) -> Option<(NonNull<u8>, usize)> {
    if len < HUGE_FROM {
        return None;
    }
    // Whole 4 KiB pages, not whole huge pages: the tail past the last 2 MiB boundary gets
    // small pages, so no memory is wasted.
    let size = len.checked_next_multiple_of(4096)?;
    let reserve = size.checked_add(HUGE_PAGE)?;
    // SAFETY: an anonymous private mapping at an address of the kernel's choice touches no
    // existing memory; the result is checked against MAP_FAILED.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            reserve,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return None;
    }
    let base = raw as usize;
    // `start - base < HUGE_PAGE`, so the head and tail lengths below cannot underflow.
    let Some(start) = base.checked_next_multiple_of(HUGE_PAGE) else {
        // SAFETY: the whole mapping just made, which nothing refers to.
        unsafe { libc::munmap(raw, reserve) };
        return None;
    };
    let (head, tail) = (start - base, reserve - (start - base) - size);
    // SAFETY: the head `[base, start)` and the tail `[start + size, base + reserve)` lie in
    // the mapping just made, which nothing else refers to; the madvise range is the rest.
    // Failures leave the pages mapped (a leak of at most 2 MiB) or unadvised (4 KiB pages):
    // neither is unsafe.
    unsafe {
        if head > 0 {
            libc::munmap(raw, head);
        }
        if tail > 0 {
            libc::munmap((start + size) as *mut libc::c_void, tail);
        }
        libc::madvise(start as *mut libc::c_void, size, libc::MADV_HUGEPAGE);
    }
    NonNull::new(start as *mut u8).map(|p| (p, size))
}

/// See the Linux version: no huge-page mapping elsewhere. Under Miri neither: Miri models
/// `mmap` as one allocation and reports the trimming `munmap` of its head and tail (valid
/// on Linux) as a deallocation of the wrong size, and does not model `madvise`. The heap
/// then serves every size, and that is the path Miri checks.
#[cfg(any(not(target_os = "linux"), miri))]
pub(crate) fn map(_len: usize) -> Option<(NonNull<u8>, usize)> {
    None
}

/// Unmaps a mapping made by [`map`].
///
/// # Safety
/// `ptr` and `mapped` come from one [`map`] call, the mapping is unmapped once, and
/// nothing refers to it afterwards.
#[cfg(all(target_os = "linux", not(miri)))]
pub(crate) unsafe fn unmap(ptr: NonNull<u8>, mapped: usize) {
    // SAFETY: forwarded from the contract.
    unsafe { libc::munmap(ptr.as_ptr().cast(), mapped) };
}

/// Never called off Linux or under Miri ([`map`] maps nothing there).
///
/// # Safety
/// As the Linux version.
#[cfg(any(not(target_os = "linux"), miri))]
pub(crate) unsafe fn unmap(_ptr: NonNull<u8>, _mapped: usize) {}

#[cfg(test)]
mod tests {
    use crate::memory::CpuMemory;

    #[test]
    #[cfg_attr(miri, ignore = "the huge-page mapping is compiled out under Miri (see `map`)")]
    fn large_allocations_are_zeroed_aligned_and_usable() {
        for (len, touch) in
            [(super::HUGE_FROM, false), (3 * super::HUGE_FROM + 5, true), (super::HUGE_FROM - 1, true)]
        {
            let m = CpuMemory::new(len, touch).expect("allocation");
            m.with_bytes(|b| {
                assert_eq!(b.len(), len);
                assert!(b.iter().all(|&v| v == 0), "fresh memory is zeroed");
                if cfg!(all(target_os = "linux", not(miri))) && len >= super::HUGE_FROM {
                    assert_eq!(
                        b.as_ptr() as usize % super::HUGE_PAGE,
                        0,
                        "huge mappings start on a 2 MiB boundary"
                    );
                }
            })
            .unwrap();
            m.with_bytes_mut(|b| {
                b[0] = 1;
                b[len - 1] = 2;
            })
            .unwrap();
            m.with_bytes(|b| assert_eq!((b[0], b[len - 1]), (1, 2))).unwrap();
        }
    }
}
