//! The pool's bookkeeping: segments (allocator allocations) carved into blocks, a best-fit
//! set of free blocks that coalesce with their neighbours, and per-bin quick lists of
//! recently freed blocks that a same-bin request takes without any search.
//!
//! Nothing here calls the allocator or frees memory: segments to free are handed back to
//! the caller, which drops them after releasing the pool's lock.

use crate::quick::{Bin, Quick};
use crate::stream::{usable, Events};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Whether no event of a free block is pending any more (completed ones are dropped).
fn idle(events: &mut Events) -> bool {
    events.retain(|(_, e)| !e.complete());
    events.is_empty()
}

/// One allocation from the allocator.
pub(crate) struct Segment<M> {
    pub(crate) mem: Arc<M>,
    pub(crate) size: usize,
    /// Bytes of blocks that are not in the free set (active or in a quick list).
    pub(crate) used: usize,
    pub(crate) large: bool,
}

/// A block in the free set.
struct Free {
    size: usize,
    events: Events,
}

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
    /// Free blocks by (segment, offset), for coalescing.
    free_blocks: BTreeMap<(usize, usize), Free>,
    /// Free blocks by (large, size, segment, offset), for best fit.
    by_size: BTreeSet<(bool, usize, usize, usize)>,
    /// Quick list and active count per request bin.
    bins: Vec<Bin>,
    pub(crate) quick_bytes: usize,
    pub(crate) quick_blocks: usize,
    pub(crate) free_bytes: usize,
    pub(crate) managed: usize,
    pub(crate) active_bytes: usize,
    pub(crate) active_blocks: usize,
}

impl<M> Arena<M> {
    pub(crate) fn new(bins: usize) -> Self {
        Arena {
            segments: Vec::new(),
            spare_ids: Vec::new(),
            free_blocks: BTreeMap::new(),
            by_size: BTreeSet::new(),
            bins: (0..bins).map(|_| Bin::default()).collect(),
            quick_bytes: 0,
            quick_blocks: 0,
            free_bytes: 0,
            managed: 0,
            active_bytes: 0,
            active_blocks: 0,
        }
    }

    pub(crate) fn held_bytes(&self) -> usize {
        self.free_bytes + self.quick_bytes
    }

    pub(crate) fn held_blocks(&self) -> usize {
        self.free_blocks.len() + self.quick_blocks
    }

    /// The allocation of a live segment.
    ///
    /// # Panics
    /// If `seg` is not a live segment (a bookkeeping bug, never user input).
    pub(crate) fn mem_ptr(&self, seg: usize) -> std::ptr::NonNull<M> {
        #[allow(clippy::expect_used)]
        let s = self.segments[seg].as_ref().expect("blocks are only handed out from live segments");
        // `Arc::as_ptr` is never null.
        std::ptr::NonNull::from(&*s.mem)
    }

    fn activate(&mut self, t: Taken, bin: usize) -> Taken {
        self.active_bytes += t.size;
        self.active_blocks += 1;
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
    /// `min_split`).
    pub(crate) fn take(
        &mut self,
        size: usize,
        bin: usize,
        large: bool,
        tag: Option<u64>,
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
        let mut pick = None;
        for &(l, bsize, seg, offset) in self.by_size.range((large, size, 0, 0)..).take(16) {
            if l != large {
                break;
            }
            let f = self.free_blocks.get_mut(&(seg, offset))?;
            if usable(&mut f.events, tag) {
                pick = Some((bsize, seg, offset));
                break;
            }
        }
        let (bsize, seg, offset) = pick?;
        self.by_size.remove(&(large, bsize, seg, offset));
        let f = self.free_blocks.remove(&(seg, offset))?;
        self.free_bytes -= bsize;
        let mut given = bsize;
        if bsize - size >= min_split {
            given = size;
            self.insert_free(seg, offset + size, bsize - size, f.events, large);
        }
        if let Some(s) = self.segments.get_mut(seg).and_then(|s| s.as_mut()) {
            s.used += given;
        }
        Some(self.activate(Taken { seg, offset, size: given }, bin))
    }

    fn insert_free(&mut self, seg: usize, offset: usize, size: usize, events: Events, large: bool) {
        self.free_bytes += size;
        self.by_size.insert((large, size, seg, offset));
        self.free_blocks.insert((seg, offset), Free { size, events });
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
        self.managed += size;
        self.insert_free(id, 0, size, Vec::new(), large);
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

    /// Puts a non-free block into the free set, merged with free neighbours. A block whose
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
            let next_idle =
                self.free_blocks.get_mut(&(seg, offset + size)).is_some_and(|n| idle(&mut n.events));
            if next_idle {
                if let Some(next) = self.free_blocks.remove(&(seg, offset + size)) {
                    self.by_size.remove(&(large, next.size, seg, offset + size));
                    self.free_bytes -= next.size;
                    size += next.size;
                }
            }
            let prev = self.free_blocks.range_mut(..(seg, offset)).next_back();
            let prev =
                prev.filter(|(&(s, o), f)| s == seg && o + f.size == offset).map(|(&(_, o), f)| (o, f));
            if let Some((po, p)) = prev {
                if idle(&mut p.events) {
                    let psize = p.size;
                    self.free_blocks.remove(&(seg, po));
                    self.by_size.remove(&(large, psize, seg, po));
                    self.free_bytes -= psize;
                    offset = po;
                    size += psize;
                }
            }
        }
        self.insert_free(seg, offset, size, events, large);
        self.segments.get(seg).and_then(|s| s.as_ref()).is_some_and(|s| s.used == 0)
    }

    /// Merges free blocks whose pending events have completed with their neighbours.
    fn merge_settled(&mut self) {
        let settled: Vec<(usize, usize)> = self
            .free_blocks
            .iter_mut()
            .filter(|(_, f)| !f.events.is_empty())
            .filter_map(|(&k, f)| idle(&mut f.events).then_some(k))
            .collect();
        for (seg, offset) in settled {
            let Some(large) = self.segments.get(seg).and_then(|s| s.as_ref()).map(|s| s.large) else {
                continue;
            };
            if let Some(f) = self.free_blocks.remove(&(seg, offset)) {
                self.by_size.remove(&(large, f.size, seg, offset));
                self.free_bytes -= f.size;
                self.merge_in(seg, offset, f.size, Vec::new());
            }
        }
    }

    /// Moves every quick-list block into the free set, and merges free blocks whose
    /// events have completed since they were freed.
    pub(crate) fn flush_quick(&mut self) {
        if self.quick_blocks == 0 {
            self.merge_settled();
            return;
        }
        let waiting: Vec<Quick> = self.bins.iter_mut().flat_map(Bin::drain).collect();
        self.quick_bytes = 0;
        self.quick_blocks = 0;
        for q in waiting {
            self.coalesce(q.seg, q.offset, q.size, q.events.map(|e| *e).unwrap_or_default());
        }
        self.merge_settled();
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
            let Some(seg) = self.segments[id].take() else { continue };
            // Usually one block; several when some still wait on events (backend frees
            // are ordered after queued work, so dropping the memory is safe regardless).
            let offsets: Vec<usize> =
                self.free_blocks.range((id, 0)..(id + 1, 0)).map(|(&(_, o), _)| o).collect();
            for o in offsets {
                if let Some(f) = self.free_blocks.remove(&(id, o)) {
                    self.by_size.remove(&(seg.large, f.size, id, o));
                    self.free_bytes -= f.size;
                }
            }
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
        self.free_blocks
            .values()
            .map(|f| f.size)
            .chain(self.bins.iter().flat_map(Bin::entries).map(|q| q.size))
    }
}

#[cfg(test)]
#[path = "arena_tests.rs"]
mod tests;
