//! An update in flight: [`HaloUpdater::start`] posts it and returns a [`HaloUpdate`] that
//! borrows the updater and the quantities until [`HaloUpdate::wait`] (or its drop)
//! completes it; [`HaloUpdater::update`] does both.

use super::link::{Flight, Held};
use super::refuse::refused;
use super::{window, HaloUpdater, Lists};
use crate::direct::places;
use crate::hostplan;
use crate::negation::negate_runs;
use crate::phases::{lap, Phases};
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{Element, Error, Kernels, Order, Result};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A halo update in flight, returned by [`HaloUpdater::start`]: it borrows the updater and
/// the quantities exclusively until [`HaloUpdate::wait`] completes it (dropping it
/// completes it too, ignoring errors). Meanwhile the neighbours may read the quantities
/// (the one-copy way of [`HaloUpdater::on_node`]) and this rank's halos are written as
/// messages arrive, so neither the quantities nor the updater can be used:
///
/// ```compile_fail,E0502
/// use gpubuf_buffer::NDBuffer;
/// use gpubuf_core::Result;
/// use gpubuf_cpu::CpuBackend;
/// use gpubuf_mpi::HaloUpdater;
///
/// fn step(halo: &mut HaloUpdater<'_, CpuBackend, f64>, t: &mut NDBuffer<CpuBackend, f64>) -> Result<()> {
///     let mut q = [&mut *t];
///     let update = halo.start(&mut q, None)?;
///     t.fill(1.0)?; // does not compile: `t` is borrowed by the update until `wait`
///     update.wait()
/// }
/// ```
///
/// Leaking it (`std::mem::forget`) never lets anything write memory the neighbours read:
/// the update stays in flight ([`HaloUpdater::in_flight`]) and is completed by the next
/// `start` or by dropping the updater; if it was a one-copy update, the updater keeps the
/// quantities themselves and the caller's handles are left as empty arrays.
#[must_use = "the update completes when `wait` is called or the value is dropped"]
pub struct HaloUpdate<'a, 'c, 'q, B: Kernels, T: Element> {
    updater: &'a mut HaloUpdater<'c, B, T>,
    x: &'a mut [&'q mut NDBuffer<B, T>],
    y: Option<&'a mut [&'q mut NDBuffer<B, T>]>,
    done: bool,
}

impl<B: Kernels, T: Element> std::fmt::Debug for HaloUpdate<'_, '_, '_, B, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HaloUpdate")
            .field("neighbors", &self.updater.neighbors())
            .field("quantities", &self.x.len())
            .field("vector", &self.y.is_some())
            .finish()
    }
}

impl<B: Kernels, T: Element> HaloUpdate<'_, '_, '_, B, T> {
    /// Completes the update: unpacks each neighbour's message as soon as it arrives
    /// (`MPI_Waitany`), returns the credits of the shared-memory links, completes the
    /// sends and waits until no neighbour reads this rank's quantities any more. Every
    /// message completes before it returns, whatever happens, and the quantities are the
    /// caller's again.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming a neighbour that refused the update (its quantities
    /// were refused on its side, see [`HaloUpdater::start`]): the halos from it are not
    /// updated. An unpack or copy error (a driver error, a neighbour's node-shared memory
    /// that is gone): that neighbour's halo is not updated, or partly, or (a message its
    /// receiver negates) written without its negation. Either way the other
    /// messages complete, and the updater is ready for the next `start`. MPI errors.
    pub fn wait(mut self) -> Result<()> {
        self.complete()
    }

    fn complete(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.done, true) {
            return Ok(());
        }
        let (result, held) = self.updater.finish();
        if let Some(held) = held {
            self.updater.give_back(self.x, self.y.as_deref_mut(), held);
        }
        result
    }
}

impl<B: Kernels, T: Element> Drop for HaloUpdate<'_, '_, '_, B, T> {
    fn drop(&mut self) {
        let _ = self.complete();
    }
}

impl<B: Kernels, T: Element> Drop for HaloUpdater<'_, B, T> {
    fn drop(&mut self) {
        // The update of a leaked `HaloUpdate`: completed before the requests and buffers go.
        drop(self.finish());
    }
}

/// Whether nothing but `handles` reaches their memory: each allocation has as many strong
/// references as handles given for it, and no weak one. While the handles are borrowed
/// exclusively, nothing can then write that memory but through them.
fn exclusive<'q, B: Kernels + 'q, T: Element>(handles: impl Iterator<Item = &'q NDBuffer<B, T>>) -> bool {
    let mut seen: Vec<(&Arc<B::Memory>, usize)> = Vec::new();
    for h in handles {
        let m = h.buffer().memory();
        match seen.iter_mut().find(|(s, _)| Arc::ptr_eq(s, m)) {
            Some(e) => e.1 += 1,
            None => seen.push((m, 1)),
        }
    }
    seen.iter().all(|&(m, n)| Arc::strong_count(m) == n && Arc::weak_count(m) == 0)
}

/// Swaps `slots` with as many arrays from the end of `spare`: the slots get those, the
/// returned vector the slots' arrays.
fn swap_out<B: Kernels, T: Element>(
    slots: &mut [&mut NDBuffer<B, T>],
    spare: &mut Vec<NDBuffer<B, T>>,
) -> Vec<NDBuffer<B, T>> {
    let mut taken = spare.split_off(spare.len().saturating_sub(slots.len()));
    for (slot, s) in slots.iter_mut().zip(taken.iter_mut()) {
        std::mem::swap(&mut **slot, s);
    }
    taken
}

impl<'c, B: Kernels, T: Element> HaloUpdater<'c, B, T> {
    /// Starts every receive, then, neighbour by neighbour, packs its message, stages it on
    /// the host (device memory only) and starts its send, so a message travels while the
    /// next one is packed. Every check comes before the first message is started. The
    /// returned [`HaloUpdate`] borrows the updater and the quantities until its
    /// [`HaloUpdate::wait`]; work on other arrays can overlap the messages meanwhile:
    ///
    /// ```no_run
    /// use gpubuf_buffer::NDBuffer;
    /// use gpubuf_core::Result;
    /// use gpubuf_cpu::CpuBackend;
    /// use gpubuf_mpi::HaloUpdater;
    ///
    /// fn step(
    ///     halo: &mut HaloUpdater<'_, CpuBackend, f64>,
    ///     t: &mut NDBuffer<CpuBackend, f64>,
    ///     other: &NDBuffer<CpuBackend, f64>,
    /// ) -> Result<()> {
    ///     let mut q = [&mut *t];
    ///     let update = halo.start(&mut q, None)?;
    ///     other.fill(1.0)?; // overlaps the messages
    ///     update.wait()?;
    ///     t.fill(0.0) // the update is complete: `t` is free again
    /// }
    /// ```
    ///
    /// An update left in flight by a leaked [`HaloUpdate`] is completed first.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for the wrong number of quantities, and the transformer's
    /// errors for quantities of the wrong shape, strides or device. This rank then refuses
    /// the update, so that no neighbour waits for it: nothing of its quantities is read or
    /// written, each neighbour gets an empty message in place of this rank's (its
    /// [`HaloUpdate::wait`] returns an error naming this rank, its other halos updated),
    /// and the neighbours' messages to this rank are received and dropped. The updater is
    /// ready for the next `start`, which pairs with the neighbours' next update.
    /// An MPI error starting the receives, or a pack or transfer error (a driver error)
    /// after they started: the neighbours whose message was not sent get an empty one (as
    /// above), and the messages started are completed before it returns.
    pub fn start<'a, 'q>(
        &'a mut self,
        x: &'a mut [&'q mut NDBuffer<B, T>],
        mut y: Option<&'a mut [&'q mut NDBuffer<B, T>]>,
    ) -> Result<HaloUpdate<'a, 'c, 'q, B, T>> {
        if self.in_flight.is_some() {
            drop(self.finish());
        }
        let _span = tracing::debug_span!("halo.start", neighbors = self.links.len()).entered();
        let checked = {
            let xs: Vec<&NDBuffer<B, T>> = x.iter().map(|q| &**q).collect();
            let ys: Option<Vec<&NDBuffer<B, T>>> = y.as_ref().map(|y| y.iter().map(|q| &**q).collect());
            self.checked_lists(&xs, ys.as_deref()).map(drop)
        };
        let held = match checked.and_then(|()| self.hold(x, y.as_deref_mut())) {
            Ok(held) => held,
            Err(e) => {
                // The neighbours are in this update too: none must wait for this rank.
                let refused = self.refuse_update();
                return Err(refused.err().unwrap_or(e));
            }
        };
        let exclusive = held.lent;
        self.current = Phases::default();
        // In flight from the first receive on: a receive started before a failing one stays
        // active, and must be completed (never started again while active).
        self.in_flight = Some(Flight { held, broken: None, direct: Vec::new() });
        if let Err(e) = self.post(exclusive) {
            let (_, held) = self.finish();
            if let Some(held) = held {
                self.give_back(x, y.as_deref_mut(), held);
            }
            return Err(e);
        }
        Ok(HaloUpdate { updater: self, x, y, done: false })
    }

    /// [`HaloUpdater::start`], then [`HaloUpdate::wait`].
    ///
    /// # Errors
    /// As both.
    pub fn update<'q>(
        &mut self,
        x: &mut [&'q mut NDBuffer<B, T>],
        y: Option<&mut [&'q mut NDBuffer<B, T>]>,
    ) -> Result<()> {
        self.start(x, y)?.wait()
    }

    /// The quantities of an update: the caller's own handles when a neighbour may copy
    /// straight from them and nothing else reaches their memory (the caller's slots then
    /// hold empty arrays until [`HaloUpdater::give_back`]), else clones.
    fn hold(
        &mut self,
        x: &mut [&mut NDBuffer<B, T>],
        y: Option<&mut [&mut NDBuffer<B, T>]>,
    ) -> Result<Held<B, T>> {
        // A neighbour copying from the quantities, or MPI moving them as datatypes, needs
        // them held exclusively.
        let readers = self.links.iter().any(|l| l.slot.is_some() && l.peer_reads) || self.any_typed();
        let all = x.iter().chain(y.iter().flat_map(|y| y.iter())).map(|q| &**q);
        if !(readers && exclusive(all)) {
            let clone = |v: &[&mut NDBuffer<B, T>]| v.iter().map(|q| (**q).clone()).collect();
            return Ok(Held { x: clone(x), y: y.map(|y| clone(y)), lent: false });
        }
        let n = x.len() + y.as_ref().map_or(0, |y| y.len());
        let backend = x.first().map(|q| q.backend().clone());
        let backend = backend.ok_or_else(|| Error::invalid("a halo update needs quantities"))?;
        while self.spare.len() < n {
            self.spare.push(NDBuffer::empty(&backend, &[0], Order::C)?);
        }
        let hx = swap_out(x, &mut self.spare);
        let hy = y.map(|y| swap_out(y, &mut self.spare));
        Ok(Held { x: hx, y: hy, lent: true })
    }

    /// Puts lent quantities back in the caller's slots (the placeholders back in `spare`).
    fn give_back(
        &mut self,
        x: &mut [&mut NDBuffer<B, T>],
        y: Option<&mut [&mut NDBuffer<B, T>]>,
        held: Held<B, T>,
    ) {
        if !held.lent {
            return;
        }
        let Held { x: mut hx, y: hy, .. } = held;
        for (slot, h) in x.iter_mut().zip(hx.iter_mut()) {
            std::mem::swap(&mut **slot, h);
        }
        self.spare.append(&mut hx);
        if let (Some(y), Some(mut hy)) = (y, hy) {
            for (slot, h) in y.iter_mut().zip(hy.iter_mut()) {
                std::mem::swap(&mut **slot, h);
            }
            self.spare.append(&mut hy);
        }
    }

    /// Starts the receives, then packs and sends every link's message.
    fn post(&mut self, exclusive: bool) -> Result<()> {
        let t0 = Instant::now();
        let Some(mut flight) = self.in_flight.take() else { return Ok(()) };
        for k in 0..self.links.len() {
            self.choose(k, false, &flight.held);
        }
        if let Err(e) = self.requests.start_receives() {
            self.in_flight = Some(flight);
            return Err(e);
        }
        lap(&mut self.current.post, t0);
        let result = self.send_all(&flight.held, &mut flight.direct, exclusive);
        self.in_flight = Some(flight);
        result
    }

    fn send_all(&mut self, held: &Held<B, T>, direct: &mut Vec<usize>, exclusive: bool) -> Result<()> {
        let xs: Vec<&NDBuffer<B, T>> = held.x.iter().collect();
        let ys: Option<Vec<&NDBuffer<B, T>>> = held.y.as_ref().map(|y| y.iter().collect());
        for k in 0..self.links.len() {
            let sent = self
                .lists(&self.links[k], &xs, ys.as_deref())
                .and_then(|(lx, ly)| self.pack_and_send(k, held, &lx, ly.as_deref(), exclusive));
            match sent {
                Ok(true) => direct.push(k),
                Ok(false) => {}
                Err(e) => {
                    // The neighbours whose message was not sent get an empty one instead.
                    for j in k..self.links.len() {
                        let _ = self.refuse_link(j);
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Packs link `k`'s message, stages it unless MPI reads the pack buffer in place, and
    /// starts its send; whether the neighbour copies straight from the quantities.
    fn pack_and_send(
        &mut self,
        k: usize,
        held: &Held<B, T>,
        xs: &[&NDBuffer<B, T>],
        ys: Option<&[&NDBuffer<B, T>]>,
        exclusive: bool,
    ) -> Result<bool> {
        let t0 = Instant::now();
        let typed = self.choose(k, true, held);
        let link = &mut self.links[k];
        let mut direct = false;
        if typed {
            // MPI gathers the message straight from the quantities.
            self.typed_bytes = self.typed_bytes.saturating_add(link.bytes);
        } else if let (Some(slot), Some(shared)) = (link.slot, &self.shared) {
            let q: Vec<&NDBuffer<B, T>> = xs.iter().chain(ys.into_iter().flatten()).copied().collect();
            direct = window::pack(link, k, slot, shared, &mut self.credits, &q, exclusive)?;
        } else if let Some(plan) = &link.raw_send {
            // Packed without negation (the neighbour negates), on this thread.
            let q: Vec<&NDBuffer<B, T>> = xs.iter().chain(ys.into_iter().flatten()).copied().collect();
            let (pack, _) = places(&link.transformer, false)?;
            // SAFETY: `pack` is the first byte of the transformer's pack buffer, a whole
            // host allocation of its own (checked when the link was made) holding
            // `plan.buffer_len()` elements (the plan is the transformer's pack plan,
            // negation cleared), aligned to 64 bytes, disjoint from the quantities (they are
            // the caller's arrays, never that buffer). Nothing else touches it now: the
            // updater keeps the transformer private and never packs through it on this
            // link; the CPU backend has no work pending on it (its operations complete
            // before they return, and every update ends by synchronising each
            // transformer); and this link's send, which MPI reads it for, is not active
            // (the previous update completed it, this one starts it below). The plan only
            // reads the quantities, whose bytes other links' datatype sends may be reading
            // meanwhile.
            if !unsafe { hostplan::run(plan, &q, pack, true)? } {
                return Err(Error::invalid("a raw halo message needs host quantities"));
            }
        } else if link.direct {
            link.transformer.async_pack(xs, ys)?;
            // The pack (a kernel on a device) must be complete before MPI reads its buffer.
            link.transformer.synchronize()?;
        } else {
            link.transformer.async_pack(xs, ys)?;
            // SAFETY: the send of this link is not active (the previous update completed
            // it, and this one starts it below), so MPI does not read this buffer.
            let send = unsafe { link.send.bytes_mut() };
            link.transformer.pack_buffer()?.read_into(0, send)?;
            self.staged = self.staged.saturating_add(2 * link.bytes);
        }
        let t1 = lap(&mut self.current.pack, t0);
        self.requests.start_send(k)?;
        lap(&mut self.current.send, t1);
        Ok(direct)
    }

    /// Completes the update in flight, whatever happens: unpacks each neighbour's message
    /// as it arrives and returns its credit, completes the sends, and waits until no
    /// neighbour copies from this rank's quantities. The first error, and the quantities.
    pub(super) fn finish(&mut self) -> (Result<()>, Option<Held<B, T>>) {
        let Some(mut flight) = self.in_flight.take() else { return (Ok(()), None) };
        let _span = tracing::debug_span!("halo.wait", neighbors = self.links.len()).entered();
        self.complete(&mut flight);
        let result = flight.broken.take().map_or(Ok(()), Err);
        (result, Some(flight.held))
    }

    fn complete(&mut self, flight: &mut Flight<B, T>) {
        let Flight { held, broken, direct } = flight;
        let xs: Vec<&NDBuffer<B, T>> = held.x.iter().collect();
        let ys: Option<Vec<&NDBuffer<B, T>>> = held.y.as_ref().map(|y| y.iter().collect());
        let lists: Vec<Option<Lists<'_, B, T>>> =
            self.links.iter().map(|l| self.lists(l, &xs, ys.as_deref()).ok()).collect();
        let mut t = Instant::now();
        loop {
            let next = self.requests.wait_any_receive();
            t = lap(&mut self.current.wait, t);
            let k = match next {
                Ok(Some((k, got))) if got < self.expected_bytes(k) => {
                    // The neighbour refused the update: nothing to unpack; a shared-memory
                    // link's credit still goes back.
                    let link = &self.links[k];
                    let credit = if link.slot.is_some() { self.credits.start_send(k) } else { Ok(()) };
                    broken.get_or_insert(credit.err().unwrap_or_else(|| refused(link.rank)));
                    continue;
                }
                Ok(Some((k, _))) => k,
                Ok(None) => break,
                Err(e) => {
                    broken.get_or_insert(e);
                    break;
                }
            };
            if let Err(e) = self.unpack(k, lists.get(k).and_then(Option::as_ref)) {
                broken.get_or_insert(e);
            }
            t = lap(&mut self.current.unpack, t);
        }
        let mut done = vec![self.requests.wait_sends(), self.credits.wait_sends()];
        // The neighbours that copy from this rank's quantities are done with them.
        done.extend(direct.drain(..).map(|k| self.credits.wait_receive(k)));
        fence(Ordering::SeqCst);
        done.extend(self.links.iter().map(|l| l.transformer.synchronize()));
        if let Some(e) = done.into_iter().find_map(Result::err) {
            broken.get_or_insert(e);
        }
        lap(&mut self.current.complete, t);
        self.phases.add_update(&self.current);
    }

    /// The bytes of link `k`'s incoming message: its note on a link through the window,
    /// else the halo message.
    fn expected_bytes(&self, k: usize) -> usize {
        self.links.get(k).map_or(0, |l| if l.slot.is_some() { l.note_in.len() } else { l.bytes })
    }

    /// Unpacks link `k`'s message into `lists` (none: the message is dropped), returning
    /// the credit of a shared-memory link whatever happens.
    fn unpack(&mut self, k: usize, lists: Option<&Lists<'_, B, T>>) -> Result<()> {
        let link = &mut self.links[k];
        if let (Some(slot), Some(shared)) = (link.slot, &self.shared) {
            let q: Option<Vec<&NDBuffer<B, T>>> =
                lists.map(|(xs, ys)| xs.iter().chain(ys.iter().flatten()).copied().collect());
            return window::unpack(link, k, slot, shared, &mut self.credits, q.as_deref());
        }
        let Some((xs, ys)) = lists else { return Ok(()) };
        let typed = self.requests.typed(k, false);
        if typed {
            // MPI scattered the message straight into the halos.
            self.typed_bytes = self.typed_bytes.saturating_add(link.bytes);
        }
        if let Some(runs) = &link.raw_recv {
            // A raw message (see `crate::negation`): unpacked as any other unless MPI
            // scattered it (the unpack complete before anything reads the halos), then
            // negated where the neighbour did not.
            if !typed {
                link.transformer.async_unpack(xs, ys.as_deref())?;
                link.transformer.synchronize()?;
            }
            let q: Vec<&NDBuffer<B, T>> = xs.iter().chain(ys.iter().flatten()).copied().collect();
            let need = link.transformer.compiled().unpack.source_lens();
            if !negate_runs(runs, need, &q)? {
                return Err(Error::invalid("a raw halo message needs host quantities"));
            }
            return Ok(());
        }
        if typed {
            return Ok(());
        }
        if !link.direct {
            // SAFETY: this link's receive completed, so MPI no longer writes its buffer.
            let recv = unsafe { link.recv.bytes() };
            link.transformer.receive_host(recv)?;
        }
        link.transformer.async_unpack(xs, ys.as_deref())
    }
}
