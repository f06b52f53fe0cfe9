//! The pool's bookkeeping: segments (allocator allocations) carved into blocks, a best-fit
//! set of free blocks that coalesce with their neighbours, and per-bin quick lists of
//! recently freed blocks that a same-bin request takes without any search.
//!
//! Nothing here calls the allocator or frees memory: segments to free are handed back to
//! the caller, which drops them after releasing the pool's lock.

use crate::free::{Free, FreeSet};
use crate::quick::{Bin, Quick};
use crate::stream::{usable, Events, StreamKey};
use std::sync::Arc;

/// One allocation from the allocator.
pub(crate) struct Segment<M> {
    pub(crate) mem: Arc<M>,
    pub(crate) size: usize,
    /// Bytes of blocks that are not in the free set (active or in a quick list).
    pub(crate) used: usize,
    pub(crate) large: bool,
}

/// `min_split` of [`Arena::take`] for pools of whole blocks: never split, take only a free
/// block of the very size asked for.
pub(crate) const EXACT: usize = usize::MAX;

/// A block handed out: which segment, where, how big.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Taken {
    pub(crate) seg: usize,
    pub(crate) offset: usize,
    pub(crate) size: usize,
}

pub(crate) struct Arena<M> {
    pub(crate) segments: Vec<Option<Segment<M>>>,
    spare_ids: Vec<usize>,
    pub(crate) free: FreeSet,
    /// Quick list and active count per request bin, grown on first use of a bin (with 16
    /// leading bits there are 4 million bins, most never used).
    bins: Vec<Bin>,
    pub(crate) quick_bytes: usize,
    pub(crate) quick_blocks: usize,
    pub(crate) managed: usize,
    pub(crate) active_bytes: usize,
    pub(crate) active_blocks: usize,
}

impl<M> Arena<M> {
    pub(crate) fn new() -> Self {
        Arena {
            segments: Vec::new(),
            spare_ids: Vec::new(),
            free: FreeSet::default(),
            bins: Vec::new(),
            quick_bytes: 0,
            quick_blocks: 0,
            managed: 0,
            active_bytes: 0,
            active_blocks: 0,
        }
    }

    pub(crate) fn held_bytes(&self) -> usize {
        self.free.bytes + self.quick_bytes
    }

    pub(crate) fn held_blocks(&self) -> usize {
        self.free.len() + self.quick_blocks
    }

    /// The allocation of a live segment.
    ///
    /// # Panics
    /// If `seg` is not a live segment (a bookkeeping bug, never user input).
    pub(crate) fn mem_ptr(&self, seg: usize) -> std::ptr::NonNull<M> {
        #[allow(clippy::expect_used)]
        let s = self.segments[seg].as_ref().expect("blocks are only handed out from live segments");
        // `Arc::as_ptr` is never null, and keeps the provenance of the whole allocation that
        // `Arc::from_raw` needs (a pointer made from `&*s.mem` covers only `M`).
        std::ptr::NonNull::new(std::sync::Arc::as_ptr(&s.mem).cast_mut()).unwrap_or_else(|| unreachable!())
    }

    fn activate(&mut self, t: Taken, bin: usize) -> Taken {
        self.active_bytes += t.size;
        self.active_blocks += 1;
        if bin >= self.bins.len() {
            // `bin` comes from `bin_number` with at most 16 bits: below 65 << 16.
            self.bins.resize_with(bin + 1, Bin::default);
        }
        if let Some(b) = self.bins.get_mut(bin) {
            b.active += 1;
        }
        t
    }

    /// The hit path for the host: the newest block of `bin`'s quick list, if it waits on
    /// no event.
    #[inline(always)]
    pub(crate) fn take_quick(&mut self, bin: usize) -> Option<Taken> {
        let b = self.bins.get_mut(bin)?;
        if b.last()?.events.is_some() {
            return None;
        }
        let q = b.pop()?;
        b.active += 1;
        self.quick_bytes -= q.size;
        self.quick_blocks -= 1;
        self.active_bytes += q.size;
        self.active_blocks += 1;
        Some(Taken { seg: q.seg, offset: q.offset, size: q.size })
    }

    /// The release path for a host block: onto `bin`'s quick list if it holds fewer than
    /// `cap` blocks; returns whether it did.
    #[inline(always)]
    pub(crate) fn put_quick(&mut self, t: Taken, bin: usize, cap: usize) -> bool {
        let Some(b) = self.bins.get_mut(bin) else { return false };
        if b.len() >= cap {
            return false;
        }
        b.push(Quick { seg: t.seg, offset: t.offset, size: t.size, events: None });
        b.active -= 1;
        self.quick_bytes += t.size;
        self.quick_blocks += 1;
        self.active_bytes -= t.size;
        self.active_blocks -= 1;
        true
    }

    /// A block of exactly `size` bytes for a request in `bin`, usable on stream `tag`,
    /// from the quick list or by best fit (splitting off the remainder when it is at least
    /// `min_split`; with `min_split` [`EXACT`], only a free block of exactly `size` bytes
    /// is taken). Pending free blocks count only as their last [`Arena::flush_quick`]
    /// found them.
    pub(crate) fn take(
        &mut self,
        size: usize,
        bin: usize,
        large: bool,
        tag: Option<StreamKey>,
        min_split: usize,
    ) -> Option<Taken> {
        if let Some(b) = self.bins.get_mut(bin) {
            let found = b.find(|q| q.size == size && q.events.as_deref_mut().is_none_or(|e| usable(e, tag)));
            if let Some(q) = found {
                self.quick_bytes -= q.size;
                self.quick_blocks -= 1;
                return Some(self.activate(Taken { seg: q.seg, offset: q.offset, size: q.size }, bin));
            }
        }
        let (seg, offset) = self.free.best_fit(size, large, tag)?;
        if min_split == EXACT && self.free.size_at(seg, offset) != Some(size) {
            return None;
        }
        let f = self.free.remove(seg, offset)?;
        let bsize = f.size;
        let mut given = bsize;
        // best_fit only returns blocks of at least `size` bytes.
        let rest = bsize.saturating_sub(size);
        if rest >= min_split {
            given = size;
            self.free.insert(seg, offset + size, Free { size: rest, large, events: f.events });
        }
        if let Some(s) = self.segments.get_mut(seg).and_then(|s| s.as_mut()) {
            s.used += given;
        }
        Some(self.activate(Taken { seg, offset, size: given }, bin))
    }

    /// Adds a fresh segment, wholly free; returns its id.
    pub(crate) fn add_segment(&mut self, mem: Arc<M>, size: usize, large: bool) -> usize {
        let seg = Segment { mem, size, used: 0, large };
        let id = match self.spare_ids.pop() {
            Some(id) => {
                self.segments[id] = Some(seg);
                id
            }
            None => {
                self.segments.push(Some(seg));
                self.segments.len() - 1
            }
        };
        // The pool reserved `size` below its limit and below usize::MAX before allocating.
        self.managed += size;
        self.free.insert(id, 0, Free { size, large, events: Vec::new() });
        id
    }

    /// Returns an active block: to its bin's quick list when `quick` allows, else to the
    /// free set (coalescing). Returns whether its segment became wholly free.
    pub(crate) fn release(&mut self, t: Taken, bin: usize, events: Events, quick: bool) -> bool {
        self.active_bytes -= t.size;
        self.active_blocks -= 1;
        if let Some(b) = self.bins.get_mut(bin) {
            b.active -= 1;
        }
        if quick {
            if let Some(b) = self.bins.get_mut(bin) {
                let events = (!events.is_empty()).then(|| Box::new(events));
                b.push(Quick { seg: t.seg, offset: t.offset, size: t.size, events });
                self.quick_bytes += t.size;
                self.quick_blocks += 1;
                return false;
            }
        }
        self.coalesce(t.seg, t.offset, t.size, events)
    }

    /// Puts a non-free block into the free set, merged with idle neighbours. A block whose
    /// events are still pending stays apart (merging would make its neighbours wait for
    /// them too); [`Arena::flush_quick`] merges it once they complete. Returns whether its
    /// segment is now wholly free.
    fn coalesce(&mut self, seg: usize, offset: usize, size: usize, mut events: Events) -> bool {
        if let Some(s) = self.segments.get_mut(seg).and_then(|s| s.as_mut()) {
            s.used -= size;
        }
        events.retain(|(_, e)| !e.complete());
        self.merge_in(seg, offset, size, events)
    }

    fn merge_in(&mut self, seg: usize, mut offset: usize, mut size: usize, events: Events) -> bool {
        let Some(large) = self.segments.get(seg).and_then(|s| s.as_ref()).map(|s| s.large) else {
            return false;
        };
        if events.is_empty() {
            if let Some(next) = self.free.idle_at(seg, offset + size) {
                self.free.remove(seg, offset + size);
                size += next;
            }
            if let Some((po, psize)) = self.free.idle_ending_at(seg, offset) {
                self.free.remove(seg, po);
                offset = po;
                size += psize;
            }
        }
        self.free.insert(seg, offset, Free { size, large, events });
        self.segments.get(seg).and_then(|s| s.as_ref()).is_some_and(|s| s.used == 0)
    }

    /// Moves every quick-list block into the free set, and merges free blocks whose
    /// events have completed since they were freed.
    pub(crate) fn flush_quick(&mut self) {
        if self.quick_blocks > 0 {
            let waiting: Vec<Quick> = self.bins.iter_mut().flat_map(Bin::drain).collect();
            self.quick_bytes = 0;
            self.quick_blocks = 0;
            for q in waiting {
                self.coalesce(q.seg, q.offset, q.size, q.events.map(|e| *e).unwrap_or_default());
            }
        }
        for (seg, offset, size, _) in self.free.settle() {
            self.merge_in(seg, offset, size, Vec::new());
        }
    }

    /// Removes wholly free segments, largest first, while `more(self)` says so; returns
    /// their memory for the caller to drop outside the lock.
    pub(crate) fn release_free_segments(&mut self, mut more: impl FnMut(&Self) -> bool) -> Vec<Arc<M>> {
        let mut ids: Vec<(usize, usize)> = self
            .segments
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().filter(|s| s.used == 0).map(|s| (s.size, i)))
            .collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        let mut out = Vec::new();
        for (size, id) in ids {
            if !more(self) {
                break;
            }
            let Some(seg) = self.segments.get_mut(id).and_then(Option::take) else { continue };
            // Usually one block; several when some still wait on events (backend frees
            // are ordered after queued work, so dropping the memory is safe regardless).
            self.free.remove_segment(id);
            self.managed -= size;
            self.spare_ids.push(id);
            out.push(seg.mem);
        }
        out
    }

    /// Blocks waiting in `bin`'s quick list.
    pub(crate) fn quick_len(&self, bin: usize) -> usize {
        self.bins.get(bin).map_or(usize::MAX, Bin::len)
    }

    /// Active blocks per request bin.
    pub(crate) fn active_per_bin(&self) -> impl Iterator<Item = usize> + '_ {
        self.bins.iter().map(|b| b.active)
    }

    /// Sizes of the held blocks: free-set blocks and quick-list blocks.
    pub(crate) fn held_sizes(&self) -> impl Iterator<Item = usize> + '_ {
        self.free.sizes().chain(self.bins.iter().flat_map(Bin::entries).map(|q| q.size))
    }
}

#[cfg(test)]
#[path = "arena_tests.rs"]
mod tests;
