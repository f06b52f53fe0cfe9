//! The OpenCL handles gpubuf holds a reference to: every live [`crate::ClMemory`], every
//! queue under a [`crate::ClStream`] and every [`crate::ClEvent`], by raw handle.
//!
//! opencl3's `Buffer::new`, `CommandQueue::new` and `Event::new` are safe constructors from
//! a raw handle, so an opencl3 wrapper proves nothing about whose reference it holds: a
//! wrapper made over [`crate::ClMemory::raw`] releases gpubuf's own reference when it
//! drops. The functions that take a wrapper's reference over
//! ([`crate::OpenClBackend::adopt_buffer`], [`crate::OpenClBackend::stream_from_queue`],
//! [`crate::ClEvent::from_native`]) are `unsafe` for that reason, and in addition refuse a
//! handle recorded here, without releasing the wrapper's reference (it may well be
//! gpubuf's own). [`crate::OpenClBackend::share_raw`] refuses one too: a `cl_mem` is the
//! memory of at most one `ClMemory`.
//!
//! A handle is recorded when gpubuf's object takes its reference and removed when the
//! object drops, *before* the reference is released: a handle value the driver hands out
//! again after the release is never found here by mistake. Handles of live objects are
//! distinct across contexts, so one process-wide record serves every context.

use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::ffi::c_void;

/// What kind of handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// A `cl_mem` buffer object.
    Mem,
    /// A `cl_command_queue`.
    Queue,
    /// A `cl_event`.
    Event,
}

static OWNED: Mutex<BTreeSet<(Kind, usize)>> = Mutex::new(BTreeSet::new());

/// Records a handle gpubuf holds a reference to; `false` (nothing recorded) when it is
/// recorded already, that is, when a live gpubuf object holds it.
pub(crate) fn claim(kind: Kind, handle: *mut c_void) -> bool {
    OWNED.lock().insert((kind, handle as usize))
}

/// Whether a live gpubuf object holds `handle`.
pub(crate) fn is_owned(kind: Kind, handle: *mut c_void) -> bool {
    OWNED.lock().contains(&(kind, handle as usize))
}

/// Removes a handle whose gpubuf object is dropping (before its reference is released).
pub(crate) fn forget(kind: Kind, handle: *mut c_void) {
    OWNED.lock().remove(&(kind, handle as usize));
}

/// The error for a handle a live gpubuf object holds.
pub(crate) fn already_owned(what: &str) -> gpubuf_core::Error {
    gpubuf_core::Error::invalid(format!(
        "this {what} is gpubuf's already (a live gpubuf object holds it): use that object; \
         the wrapper given was not released, its reference may be gpubuf's own"
    ))
}
