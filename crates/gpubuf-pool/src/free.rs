//! The free set: free blocks by place (for coalescing) and by size (for best fit).
//!
//! A free block either waits on no event (*idle*: any stream or the host may take it) or
//! on events of streams that used it (*pending*). Idle blocks and pending blocks whose
//! events all belong to one stream are indexed by size, the latter under that stream, so
//! best fit is one ordered lookup for each and never walks past blocks it may not take.
//! Pending blocks are polled only by [`FreeSet::settle`].

use crate::stream::{sole_stream, Events, StreamKey};
use std::collections::{BTreeMap, BTreeSet};

/// A block in the free set.
pub(crate) struct Free {
    pub(crate) size: usize,
    pub(crate) large: bool,
    pub(crate) events: Events,
}

/// Free blocks of every segment.
#[derive(Default)]
pub(crate) struct FreeSet {
    /// By `(segment, offset)`.
    blocks: BTreeMap<(usize, usize), Free>,
    /// Idle blocks by `(large, size, segment, offset)`.
    idle: BTreeSet<(bool, usize, usize, usize)>,
    /// Pending blocks whose events all belong to one stream, by
    /// `(stream, large, size, segment, offset)`: that stream may take them at once.
    own: BTreeSet<(StreamKey, bool, usize, usize, usize)>,
    /// Every pending block, by `(segment, offset)`.
    pending: BTreeSet<(usize, usize)>,
    /// Bytes of all free blocks.
    pub(crate) bytes: usize,
}

impl FreeSet {
    /// Number of free blocks.
    pub(crate) fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Number of free blocks that wait on events.
    pub(crate) fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Sizes of the free blocks.
    pub(crate) fn sizes(&self) -> impl Iterator<Item = usize> + '_ {
        self.blocks.values().map(|f| f.size)
    }

    /// Adds a block (the caller has merged it with whatever neighbours it should).
    pub(crate) fn insert(&mut self, seg: usize, offset: usize, f: Free) {
        self.bytes += f.size;
        if f.events.is_empty() {
            self.idle.insert((f.large, f.size, seg, offset));
        } else {
            self.pending.insert((seg, offset));
            if let Some(s) = sole_stream(&f.events) {
                self.own.insert((s, f.large, f.size, seg, offset));
            }
        }
        self.blocks.insert((seg, offset), f);
    }

    /// Removes the block at `(seg, offset)`.
    pub(crate) fn remove(&mut self, seg: usize, offset: usize) -> Option<Free> {
        let f = self.blocks.remove(&(seg, offset))?;
        self.bytes -= f.size;
        if f.events.is_empty() {
            self.idle.remove(&(f.large, f.size, seg, offset));
        } else {
            self.pending.remove(&(seg, offset));
            if let Some(s) = sole_stream(&f.events) {
                self.own.remove(&(s, f.large, f.size, seg, offset));
            }
        }
        Some(f)
    }

    /// The smallest block of at least `size` bytes in the `large` class that stream `tag`
    /// (the host for `None`) may take: idle, or pending only on `tag`.
    pub(crate) fn best_fit(
        &self,
        size: usize,
        large: bool,
        tag: Option<StreamKey>,
    ) -> Option<(usize, usize)> {
        let idle = self
            .idle
            .range((large, size, 0, 0)..)
            .next()
            .filter(|k| k.0 == large)
            .map(|&(_, s, seg, o)| (s, seg, o));
        let own = tag.and_then(|t| {
            self.own
                .range((t, large, size, 0, 0)..)
                .next()
                .filter(|k| k.0 == t && k.1 == large)
                .map(|&(_, _, s, seg, o)| (s, seg, o))
        });
        let pick = match (idle, own) {
            (Some(i), Some(o)) => Some(i.min(o)),
            (i, o) => i.or(o),
        };
        pick.map(|(_, seg, o)| (seg, o))
    }

    /// The size of the free block that starts at `(seg, offset)`, if any.
    pub(crate) fn size_at(&self, seg: usize, offset: usize) -> Option<usize> {
        self.blocks.get(&(seg, offset)).map(|f| f.size)
    }

    /// The idle free block that starts at `(seg, offset)`, if any.
    pub(crate) fn idle_at(&self, seg: usize, offset: usize) -> Option<usize> {
        self.blocks.get(&(seg, offset)).filter(|f| f.events.is_empty()).map(|f| f.size)
    }

    /// The idle free block that ends at `(seg, end)`, as `(offset, size)`.
    pub(crate) fn idle_ending_at(&self, seg: usize, end: usize) -> Option<(usize, usize)> {
        let (&(s, o), f) = self.blocks.range(..(seg, end)).next_back()?;
        (s == seg && f.events.is_empty() && o.checked_add(f.size) == Some(end)).then_some((o, f.size))
    }

    /// Polls every pending block: drops its completed events and re-indexes it; returns
    /// (removed from the set) the blocks that no longer wait on anything, as
    /// `(segment, offset, size, large)`, for the caller to merge.
    pub(crate) fn settle(&mut self) -> Vec<(usize, usize, usize, bool)> {
        let keys: Vec<(usize, usize)> = self.pending.iter().copied().collect();
        let mut idle = Vec::new();
        for (seg, offset) in keys {
            let Some(mut f) = self.remove(seg, offset) else { continue };
            f.events.retain(|(_, e)| !e.complete());
            if f.events.is_empty() {
                idle.push((seg, offset, f.size, f.large));
            } else {
                self.insert(seg, offset, f);
            }
        }
        idle
    }

    /// Removes every free block of segment `seg`.
    pub(crate) fn remove_segment(&mut self, seg: usize) {
        let offsets: Vec<usize> =
            self.blocks.range((seg, 0)..=(seg, usize::MAX)).map(|(&(_, o), _)| o).collect();
        for o in offsets {
            self.remove(seg, o);
        }
    }

    /// Whether the block at `(seg, offset)` is free (for tests).
    #[cfg(test)]
    pub(crate) fn contains(&self, seg: usize, offset: usize) -> bool {
        self.blocks.contains_key(&(seg, offset))
    }
}
