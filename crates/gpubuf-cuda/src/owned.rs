//! What gpubuf owns in the driver: the device ranges it frees (its own allocations and the
//! cudarc slices handed to [`crate::CudaBackend::adopt_slice`]) and the streams it
//! destroys (those it created), so that none of them is taken over a second time.
//!
//! cudarc can wrap any device pointer in a `CudaSlice` (`upgrade_device_ptr`) and any
//! stream handle in a `CudaStream` (`wrap_borrowed_stream`), in `unsafe` code: a slice over
//! gpubuf's memory handed back to `adopt_slice` would be freed twice, a wrapper over one of
//! gpubuf's streams kept by `stream_from_cudarc` would outlive the stream. Both are
//! refused. A range or stream is recorded when gpubuf takes it and removed when its owner
//! drops, *before* the free or destroy, so an address or handle the driver hands out again
//! afterwards is never found here by mistake. Device addresses and stream handles are
//! distinct across contexts, so one process-wide record serves every context.

use cudarc::driver::sys::{CUdeviceptr, CUstream};
use gpubuf_core::Error;
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};

/// Owned device ranges: start address to end address (exclusive), pairwise disjoint.
static RANGES: Mutex<BTreeMap<CUdeviceptr, CUdeviceptr>> = Mutex::new(BTreeMap::new());
/// Streams gpubuf created (and destroys), by handle.
static STREAMS: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

/// The end of `len` bytes at `start`, saturated (an overflowing range overlaps everything
/// above `start`).
fn end_of(start: CUdeviceptr, len: usize) -> CUdeviceptr {
    start.saturating_add(len as u64)
}

fn overlapping(ranges: &BTreeMap<CUdeviceptr, CUdeviceptr>, start: CUdeviceptr, end: CUdeviceptr) -> bool {
    // The recorded range starting last below `end` is the only one that can reach `start`.
    ranges.range(..end).next_back().is_some_and(|(_, &e)| e > start)
}

/// Whether `len` bytes at `start` overlap a range gpubuf owns (never for `len == 0`).
#[cfg(test)]
pub(crate) fn overlaps(start: CUdeviceptr, len: usize) -> bool {
    len > 0 && overlapping(&RANGES.lock(), start, end_of(start, len))
}

/// Records `len` bytes at `start` as gpubuf's; `false` (nothing recorded) when they
/// overlap a recorded range. An empty range records nothing and is `true`.
pub(crate) fn claim(start: CUdeviceptr, len: usize) -> bool {
    if len == 0 {
        return true;
    }
    let end = end_of(start, len);
    let mut ranges = RANGES.lock();
    if overlapping(&ranges, start, end) {
        return false;
    }
    ranges.insert(start, end);
    true
}

/// Removes the range recorded by `claim(start, len)` (its owner is about to free it).
pub(crate) fn forget(start: CUdeviceptr, len: usize) {
    let mut ranges = RANGES.lock();
    if len > 0 && ranges.get(&start) == Some(&end_of(start, len)) {
        ranges.remove(&start);
    }
}

/// Records a stream gpubuf has created.
pub(crate) fn claim_stream(raw: CUstream) {
    STREAMS.lock().insert(raw as usize);
}

/// Whether `raw` is a live stream gpubuf created.
pub(crate) fn owns_stream(raw: CUstream) -> bool {
    STREAMS.lock().contains(&(raw as usize))
}

/// Removes a stream gpubuf is about to destroy.
pub(crate) fn forget_stream(raw: CUstream) {
    STREAMS.lock().remove(&(raw as usize));
}

/// The error for memory or a stream gpubuf owns already.
pub(crate) fn already_owned(what: &str) -> Error {
    Error::invalid(format!(
        "this {what} is gpubuf's already (a live gpubuf buffer or stream owns it): use that \
         buffer or stream; nothing was freed or destroyed"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_overlap_and_are_forgotten_exactly() {
        // Addresses no driver hands out in these tests (the unit tests run without one).
        let base: CUdeviceptr = 0xffff_0000_0000_0000;
        assert!(claim(base, 256));
        assert!(!claim(base, 256));
        assert!(!claim(base + 255, 1));
        assert!(!claim(base - 1, 2));
        assert!(overlaps(base + 100, 1000));
        assert!(!overlaps(base + 256, 16));
        assert!(!overlaps(base, 0));
        assert!(claim(base + 256, 16), "adjacent ranges do not overlap");
        assert!(claim(base - 16, 16));
        assert!(!claim(base - 64, usize::MAX), "a saturated end overlaps what lies above");
        forget(base, 255); // not the recorded range: kept
        assert!(overlaps(base, 1));
        forget(base, 256);
        assert!(!overlaps(base, 256));
        forget(base + 256, 16);
        forget(base - 16, 16);
        assert!(claim(base, 0) && !overlaps(base, 0));
    }
}
