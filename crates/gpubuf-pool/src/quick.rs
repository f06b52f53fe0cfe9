//! Per-size-class quick lists: recently freed blocks that a request of the same class
//! takes back without any search. A list's slots are reused in place, so the hit path
//! neither grows a vector nor calls out of line.

use crate::stream::Events;

/// A recently freed block waiting in its class's quick list (not coalesced).
#[derive(Default)]
pub(crate) struct Quick {
    pub(crate) seg: usize,
    pub(crate) offset: usize,
    pub(crate) size: usize,
    /// Events of the streams that used the block; boxed, and absent for host blocks, so
    /// an entry stays 32 bytes.
    pub(crate) events: Option<Box<Events>>,
}

/// One size class: its quick list and how many of its blocks are handed out.
#[derive(Default)]
pub(crate) struct Bin {
    /// `slots[..len]` wait for reuse (newest last); the rest are empty.
    slots: Vec<Quick>,
    len: usize,
    /// Blocks of the class handed out.
    pub(crate) active: usize,
}

impl Bin {
    /// Blocks waiting.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The waiting blocks, oldest first.
    pub(crate) fn entries(&self) -> &[Quick] {
        self.slots.get(..self.len).unwrap_or(&[])
    }

    /// The newest waiting block.
    #[inline(always)]
    pub(crate) fn last(&self) -> Option<&Quick> {
        self.slots.get(self.len.checked_sub(1)?)
    }

    /// Adds a block (newest).
    #[inline(always)]
    pub(crate) fn push(&mut self, q: Quick) {
        if self.len == self.slots.len() {
            self.grow();
        }
        if let Some(slot) = self.slots.get_mut(self.len) {
            *slot = q;
            self.len += 1;
        }
    }

    #[cold]
    fn grow(&mut self) {
        let n = (self.slots.len() * 2).max(4);
        self.slots.resize_with(n, Quick::default);
    }

    /// Takes the newest block.
    #[inline(always)]
    pub(crate) fn pop(&mut self) -> Option<Quick> {
        let i = self.len.checked_sub(1)?;
        self.len = i;
        self.slots.get_mut(i).map(std::mem::take)
    }

    /// The newest waiting block that `pred` accepts.
    pub(crate) fn find(&mut self, mut pred: impl FnMut(&mut Quick) -> bool) -> Option<Quick> {
        let live = self.slots.get_mut(..self.len)?;
        let i = live.iter_mut().rposition(&mut pred)?;
        live.swap(i, self.len - 1);
        self.pop()
    }

    /// Takes every waiting block.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = Quick> + '_ {
        let n = std::mem::take(&mut self.len);
        self.slots.iter_mut().take(n).map(std::mem::take)
    }
}
