//! The persistent MPI requests of a halo updater: one receive and one send per neighbour,
//! created once (`MPI_Recv_init` / `MPI_Send_init`) over buffers that never move, started
//! for every update and freed with the updater.

use crate::datatypes::Datatype;
use gpubuf_core::{Error, Result};
use mpi::ffi::{self, MPI_Comm, MPI_Request};
use std::ffi::{c_int, c_void};

/// One message of a link: its peer, tag, and the bytes MPI reads or writes.
pub(crate) struct Message {
    /// Communicator (a handle that outlives the requests).
    pub comm: MPI_Comm,
    /// Peer rank.
    pub rank: c_int,
    /// Tag.
    pub tag: c_int,
    /// First byte.
    pub ptr: *mut u8,
    /// Length in bytes (at most `i32::MAX`).
    pub len: usize,
}

/// A persistent request over a derived datatype, and whether it is swapped in.
struct Alt {
    req: MPI_Request,
    on: bool,
    ty: Datatype,
}

/// Persistent requests, receives and sends indexed by link. Active requests are always
/// completed before the buffers they name are freed: by [`Requests::wait_sends`] /
/// [`Requests::wait_any_receive`], or by `Drop`.
pub(crate) struct Requests {
    recv: Vec<MPI_Request>,
    send: Vec<MPI_Request>,
    /// Which requests are started and not completed.
    recv_active: Vec<bool>,
    send_active: Vec<bool>,
    /// Where each send goes (communicator, rank, tag), for its refusals.
    send_to: Vec<(MPI_Comm, c_int, c_int)>,
    /// Where each receive comes from (communicator, rank, tag).
    recv_from: Vec<(MPI_Comm, c_int, c_int)>,
    /// Per link, the other persistent receive and send (over a derived datatype, see
    /// [`Requests::set_typed`]) with their types, and whether it is the one in `recv` /
    /// `send` (the two handles are swapped by [`Requests::select`]).
    alt_recv: Vec<Option<Alt>>,
    alt_send: Vec<Option<Alt>>,
    /// Empty messages in place of sends ([`Requests::refuse`]), completed with the sends.
    refusals: Vec<MPI_Request>,
    /// Whether `Drop` cancels active receives instead of waiting for their messages.
    cancel_on_drop: bool,
}

fn check(code: c_int, what: &str) -> Result<()> {
    if code == ffi::MPI_SUCCESS as c_int {
        Ok(())
    } else {
        Err(Error::invalid(format!("{what} failed with MPI error code {code}")))
    }
}

impl Requests {
    /// Creates the persistent requests (no message moves yet).
    ///
    /// # Safety
    /// Every message's `ptr..ptr + len` and communicator must stay valid (allocated, not
    /// moved, not freed) until the returned value is dropped, and nothing but MPI may read a receive's bytes or write a
    /// send's bytes while its request is active.
    ///
    /// # Errors
    /// MPI errors (with an error handler that returns them).
    pub(crate) unsafe fn new(recvs: &[Message], sends: &[Message], cancel_on_drop: bool) -> Result<Self> {
        let mut r = Requests {
            recv: Vec::new(),
            send: Vec::new(),
            recv_active: Vec::new(),
            send_active: Vec::new(),
            send_to: sends.iter().map(|m| (m.comm, m.rank, m.tag)).collect(),
            recv_from: recvs.iter().map(|m| (m.comm, m.rank, m.tag)).collect(),
            alt_recv: recvs.iter().map(|_| None).collect(),
            alt_send: sends.iter().map(|_| None).collect(),
            refusals: Vec::new(),
            cancel_on_drop,
        };
        for (messages, send) in [(recvs, false), (sends, true)] {
            for m in messages {
                // SAFETY: reads an immutable handle constant of the MPI library.
                let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
                let (buf, count, comm) = (m.ptr.cast::<c_void>(), m.len as c_int, m.comm);
                // SAFETY: MPI writes the request slot; the buffer's validity while the
                // request lives is the caller's promise; the count fits (messages are at
                // most i32::MAX bytes).
                let code = unsafe {
                    if send {
                        ffi::MPI_Send_init(
                            buf.cast_const(),
                            count,
                            ffi::RSMPI_UINT8_T,
                            m.rank,
                            m.tag,
                            comm,
                            &mut req,
                        )
                    } else {
                        ffi::MPI_Recv_init(buf, count, ffi::RSMPI_UINT8_T, m.rank, m.tag, comm, &mut req)
                    }
                };
                check(code, if send { "MPI_Send_init" } else { "MPI_Recv_init" })?;
                let (list, active) =
                    if send { (&mut r.send, &mut r.send_active) } else { (&mut r.recv, &mut r.recv_active) };
                list.push(req);
                active.push(false);
            }
        }
        Ok(r)
    }

    /// Starts every receive.
    pub(crate) fn start_receives(&mut self) -> Result<()> {
        for (req, active) in self.recv.iter_mut().zip(&mut self.recv_active) {
            // SAFETY: an inactive persistent request of this value.
            check(unsafe { ffi::MPI_Start(req) }, "MPI_Start")?;
            *active = true;
        }
        Ok(())
    }

    /// Starts the receive of link `k`.
    pub(crate) fn start_receive(&mut self, k: usize) -> Result<()> {
        let (Some(req), Some(active)) = (self.recv.get_mut(k), self.recv_active.get_mut(k)) else {
            return Err(Error::invalid(format!("no link {k}")));
        };
        if !*active {
            // SAFETY: an inactive persistent request of this value.
            check(unsafe { ffi::MPI_Start(req) }, "MPI_Start")?;
            *active = true;
        }
        Ok(())
    }

    /// Waits for the receive of link `k`, if it is active.
    pub(crate) fn wait_receive(&mut self, k: usize) -> Result<()> {
        let (Some(req), Some(active)) = (self.recv.get_mut(k), self.recv_active.get_mut(k)) else {
            return Err(Error::invalid(format!("no link {k}")));
        };
        if *active {
            // SAFETY: an active persistent request of this value; MPI leaves it inactive.
            check(unsafe { ffi::MPI_Wait(req, ffi::RSMPI_STATUS_IGNORE) }, "MPI_Wait")?;
            *active = false;
        }
        Ok(())
    }

    /// Starts the send of link `k`.
    pub(crate) fn start_send(&mut self, k: usize) -> Result<()> {
        let (Some(req), Some(active)) = (self.send.get_mut(k), self.send_active.get_mut(k)) else {
            return Err(Error::invalid(format!("no link {k}")));
        };
        // SAFETY: an inactive persistent request of this value (a send is started once per
        // update, after the previous update's sends completed).
        check(unsafe { ffi::MPI_Start(req) }, "MPI_Start")?;
        *active = true;
        Ok(())
    }

    /// Waits for one active receive to complete: the link it belongs to and the bytes that
    /// arrived (fewer than the message's length when the neighbour refused the update: see
    /// [`Requests::refuse`]), or `None` when no receive is active.
    pub(crate) fn wait_any_receive(&mut self) -> Result<Option<(usize, usize)>> {
        if !self.recv_active.iter().any(|&a| a) {
            return Ok(None);
        }
        let mut index: c_int = ffi::MPI_UNDEFINED;
        // SAFETY: an all-zero status is a valid value of the plain C struct; MPI fills it.
        let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
        // SAFETY: `recv` holds this value's persistent requests (inactive ones are ignored);
        // MPI writes `index` and `status` only. At most 8 links: the count fits.
        let code = unsafe {
            ffi::MPI_Waitany(self.recv.len() as c_int, self.recv.as_mut_ptr(), &mut index, &mut status)
        };
        check(code, "MPI_Waitany")?;
        match usize::try_from(index).ok().filter(|&k| k < self.recv.len()) {
            Some(k) => {
                self.recv_active[k] = false;
                let mut count: c_int = 0;
                // Bytes: the receive's type is `MPI_UINT8_T` or a derived type of it.
                let ty = match &self.alt_recv[k] {
                    Some(a) if a.on => a.ty.raw(),
                    // SAFETY: reads an immutable handle constant of the MPI library.
                    _ => unsafe { ffi::RSMPI_UINT8_T },
                };
                // SAFETY: the status of the receive just completed, with the type it was
                // made with; MPI writes `count`.
                let code = unsafe { ffi::MPI_Get_elements(&status, ty, &mut count) };
                check(code, "MPI_Get_elements")?;
                Ok(Some((k, usize::try_from(count).unwrap_or(0))))
            }
            None => {
                self.recv_active.iter_mut().for_each(|a| *a = false);
                Ok(None)
            }
        }
    }

    /// Sends link `k`'s neighbour an empty message in place of this update's (on the same
    /// communicator and tag, so its receive completes with no byte): this rank refuses the
    /// update. Completed with the sends ([`Requests::wait_sends`]).
    pub(crate) fn refuse(&mut self, k: usize) -> Result<()> {
        let Some(&(comm, rank, tag)) = self.send_to.get(k) else {
            return Err(Error::invalid(format!("no link {k}")));
        };
        // SAFETY: reads an immutable handle constant of the MPI library.
        let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
        let none = std::ptr::NonNull::<u8>::dangling().as_ptr().cast::<c_void>();
        // SAFETY: a message of no byte (MPI reads nothing at `none`) on a communicator that
        // outlives the requests (the promise of `new`); MPI writes the request slot.
        let code =
            unsafe { ffi::MPI_Isend(none.cast_const(), 0, ffi::RSMPI_UINT8_T, rank, tag, comm, &mut req) };
        check(code, "MPI_Isend")?;
        self.refusals.push(req);
        Ok(())
    }

    /// Makes link `k`'s other receive (`send`: send) a persistent request of one `ty` at
    /// `MPI_BOTTOM` (absolute addresses) and swaps it in; the previous one is freed.
    ///
    /// # Safety
    /// Until this value drops or the request is replaced, every byte `ty` names must stay
    /// valid, and nothing but MPI may read a receive's bytes or write a send's bytes while
    /// the request is active (it is started only while [`Requests::select`] keeps it in).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a link that does not exist or whose request is
    /// active; MPI errors.
    pub(crate) unsafe fn set_typed(&mut self, k: usize, send: bool, ty: Datatype) -> Result<()> {
        self.select(k, send, false)?;
        let (to, alts) =
            if send { (&self.send_to, &mut self.alt_send) } else { (&self.recv_from, &mut self.alt_recv) };
        let (Some(&(comm, rank, tag)), Some(alt)) = (to.get(k), alts.get_mut(k)) else {
            return Err(Error::invalid(format!("no link {k}")));
        };
        if let Some(mut old) = alt.take() {
            // SAFETY: an inactive persistent request (swapped out above), freed once.
            unsafe { ffi::MPI_Request_free(&mut old.req) };
        }
        // SAFETY: reads an immutable handle constant of the MPI library.
        let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
        let bottom = std::ptr::null_mut::<c_void>(); // MPI_BOTTOM
                                                     // SAFETY: MPI writes the request slot; the bytes `ty` names are the caller's
                                                     // promise; the communicator outlives the requests (the promise of `new`).
        let code = unsafe {
            if send {
                ffi::MPI_Send_init(bottom.cast_const(), 1, ty.raw(), rank, tag, comm, &mut req)
            } else {
                ffi::MPI_Recv_init(bottom, 1, ty.raw(), rank, tag, comm, &mut req)
            }
        };
        check(code, if send { "MPI_Send_init" } else { "MPI_Recv_init" })?;
        *alt = Some(Alt { req, on: false, ty });
        self.select(k, send, true).map(drop)
    }

    /// Uses link `k`'s datatype receive (`send`: send) when `typed` and one was made, else
    /// its buffer's; whether the datatype one is in use.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a link that does not exist or whose request is active.
    pub(crate) fn select(&mut self, k: usize, send: bool, typed: bool) -> Result<bool> {
        let (reqs, active, alts) = if send {
            (&mut self.send, &self.send_active, &mut self.alt_send)
        } else {
            (&mut self.recv, &self.recv_active, &mut self.alt_recv)
        };
        let (Some(req), Some(&active), Some(alt)) = (reqs.get_mut(k), active.get(k), alts.get_mut(k)) else {
            return Err(Error::invalid(format!("no link {k}")));
        };
        let Some(alt) = alt else { return Ok(false) };
        if alt.on != typed {
            if active {
                return Err(Error::invalid(format!("link {k}'s request is active")));
            }
            std::mem::swap(req, &mut alt.req);
            alt.on = typed;
        }
        Ok(alt.on)
    }

    /// Whether link `k`'s receive (`send`: send) in use is a datatype one.
    pub(crate) fn typed(&self, k: usize, send: bool) -> bool {
        let alts = if send { &self.alt_send } else { &self.alt_recv };
        alts.get(k).is_some_and(|a| a.as_ref().is_some_and(|a| a.on))
    }

    /// Waits for every active send.
    pub(crate) fn wait_sends(&mut self) -> Result<()> {
        // SAFETY: this value's persistent requests; inactive ones are ignored.
        let code = unsafe {
            ffi::MPI_Waitall(self.send.len() as c_int, self.send.as_mut_ptr(), ffi::RSMPI_STATUSES_IGNORE)
        };
        check(code, "MPI_Waitall")?;
        self.send_active.iter_mut().for_each(|a| *a = false);
        if !self.refusals.is_empty() {
            // SAFETY: requests of `refuse`, each active until this wait completes it; they
            // are at most one a link, so the count fits.
            let code = unsafe {
                ffi::MPI_Waitall(
                    self.refusals.len() as c_int,
                    self.refusals.as_mut_ptr(),
                    ffi::RSMPI_STATUSES_IGNORE,
                )
            };
            self.refusals.clear();
            check(code, "MPI_Waitall")?;
        }
        Ok(())
    }

    /// Completes every active request (receives first), ignoring errors: what `Drop` and an
    /// abandoned update need before buffers may go.
    pub(crate) fn complete_all(&mut self) {
        if self.cancel_on_drop {
            for (req, active) in self.recv.iter_mut().zip(&mut self.recv_active) {
                if *active {
                    // SAFETY: an active persistent request of this value: cancelled, then
                    // completed (cancelled or matched), which leaves it inactive.
                    unsafe {
                        ffi::MPI_Cancel(req);
                        ffi::MPI_Wait(req, ffi::RSMPI_STATUS_IGNORE);
                    }
                    *active = false;
                }
            }
        }
        while let Ok(Some(_)) = self.wait_any_receive() {}
        let _ = self.wait_sends();
    }
}

impl Drop for Requests {
    fn drop(&mut self) {
        self.complete_all();
        let alts = self.alt_recv.iter_mut().chain(self.alt_send.iter_mut()).flatten().map(|a| &mut a.req);
        for req in self.recv.iter_mut().chain(self.send.iter_mut()).chain(alts) {
            // SAFETY: an inactive persistent request of this value, freed once (the
            // datatypes go after it, with the fields).
            unsafe { ffi::MPI_Request_free(req) };
        }
    }
}
