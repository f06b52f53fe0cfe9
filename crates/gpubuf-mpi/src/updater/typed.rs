//! The datatype path of an updater's links (see [`crate::datatypes`]): per update and
//! link side, whether MPI moves the message straight between the quantities, and the
//! datatype requests, remade when the quantities' addresses change.

use super::link::Held;
use super::HaloUpdater;
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{Element, Kernels, Result};

impl<B: Kernels, T: Element> HaloUpdater<'_, B, T> {
    /// Whether some link side could use a datatype (the switch on, a host link outside the
    /// shared window, its plan eligible).
    pub(super) fn any_typed(&self) -> bool {
        self.datatypes
            && self
                .links
                .iter()
                .any(|l| l.slot.is_none() && (l.typed.send.is_some() || l.typed.recv.is_some()))
    }

    /// Selects link `k`'s datatype request on its receive (`send`: send) side for this
    /// update's quantities `held`, making it when they moved; else (or on any error) its
    /// buffer's request. Whether the datatype one is in use. The request must be inactive.
    ///
    /// A datatype request is used only when the updater holds the caller's own handles
    /// (`held.lent`: nothing else reaches their memory until the update completes), so
    /// that the bytes MPI reads or writes while it is active are touched by nothing else.
    pub(super) fn choose(&mut self, k: usize, send: bool, held: &Held<B, T>) -> bool {
        match self.try_choose(k, send, held) {
            Ok(true) => true,
            Ok(false) | Err(_) => {
                let _ = self.requests.select(k, send, false);
                false
            }
        }
    }

    fn try_choose(&mut self, k: usize, send: bool, held: &Held<B, T>) -> Result<bool> {
        let Some(link) = self.links.get(k) else { return Ok(false) };
        if !(self.datatypes && held.lent && link.slot.is_none()) {
            return Ok(false);
        }
        let xs: Vec<&NDBuffer<B, T>> = held.x.iter().collect();
        let ys: Option<Vec<&NDBuffer<B, T>>> = held.y.as_ref().map(|y| y.iter().collect());
        let (lx, ly) = self.lists(link, &xs, ys.as_deref())?;
        let q: Vec<&NDBuffer<B, T>> = lx.iter().chain(ly.iter().flatten()).copied().collect();
        let link = &mut self.links[k];
        let Some(side) = (if send { link.typed.send.as_mut() } else { link.typed.recv.as_mut() }) else {
            return Ok(false);
        };
        // Each quantity's first element, checked (now, for these quantities) to hold the
        // elements the plan, and so the blocks, reach.
        let Some(bases) = side.bases(&q)? else { return Ok(false) };
        if side.key.as_ref() == Some(&bases) {
            return self.requests.select(k, send, true);
        }
        side.key = None;
        let ty = side.datatype(&bases)?;
        // SAFETY: the type's blocks are the compiled plan's runs (checked in `Side::new`
        // to lie inside each quantity's `need` elements, in bytes with checked arithmetic)
        // at the first elements of this update's quantities (checked by `bases` to hold
        // `need` elements inside their storage). A datatype request is started only in an
        // update whose quantities `try_choose` found at the same addresses (`key`), and
        // those quantities are held by that update, lent (no other handle reaches their
        // memory), until every request completed (`finish`, also for a leaked update or
        // a dropped updater): so while it is active its bytes are allocated and nothing
        // else of this process writes the bytes a send reads (the pack plan's compute-
        // domain elements) or touches the bytes a receive writes (the unpack plan's
        // halos). This updater writes other links' halos meanwhile, through the CPU
        // backend's lock, on this thread and only between its MPI calls, while Open MPI
        // (no progress thread by default) moves this process's bytes inside those calls;
        // a neighbour process may read the sent bytes or write the received ones through
        // its single-copy transport at any time until the request completes, never other
        // bytes.
        unsafe { self.requests.set_typed(k, send, ty)? };
        side.key = Some(bases);
        Ok(true)
    }
}
