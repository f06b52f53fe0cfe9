//! [`ClStream`] and [`ClEvent`]: in-order queues and marker events, each recorded as
//! gpubuf's while it lives (see [`crate::owned`]).

use crate::error::cl;
use crate::owned::{self, Kind};
use gpubuf_core::Result;
use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::event::Event;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// An in-order OpenCL command queue (clones share the queue).
#[derive(Clone)]
pub struct ClStream {
    pub(crate) queue: Arc<OwnedQueue>,
    /// The stream's identity: never given to another queue in this process (a released
    /// queue's handle may come back for a new one, so the handle cannot serve).
    pub(crate) id: u64,
    /// The context of the queue (its raw handle, which the queue keeps alive).
    pub(crate) context: usize,
}

/// Identities of queues: process-wide and never reused.
static NEXT_STREAM_ID: AtomicU64 = AtomicU64::new(1);

impl std::fmt::Debug for ClStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClStream").field("id", &self.id).field("queue", &self.queue.get()).finish()
    }
}

/// The queue of a stream, recorded as gpubuf's while it lives (see [`crate::owned`]).
pub(crate) struct OwnedQueue(CommandQueue);

impl std::ops::Deref for OwnedQueue {
    type Target = CommandQueue;

    fn deref(&self) -> &CommandQueue {
        &self.0
    }
}

impl Drop for OwnedQueue {
    fn drop(&mut self) {
        // Before the field releases the reference.
        owned::forget(Kind::Queue, self.0.get());
    }
}

/// A marker event on an OpenCL queue.
#[derive(Debug)]
pub struct ClEvent {
    pub(crate) event: Event,
}

impl ClEvent {
    /// An event gpubuf's enqueue call has just returned (no other object can hold it).
    pub(crate) fn created(event: Event) -> Self {
        owned::claim(Kind::Event, event.get());
        ClEvent { event }
    }

    /// An event handed in (its reference becomes this value's), unless a live `ClEvent`
    /// holds the handle already: then the wrapper comes back unreleased.
    pub(crate) fn claimed(event: Event) -> std::result::Result<Self, Event> {
        if owned::claim(Kind::Event, event.get()) {
            Ok(ClEvent { event })
        } else {
            Err(event)
        }
    }
}

impl Drop for ClEvent {
    fn drop(&mut self) {
        // Before the field releases the reference.
        owned::forget(Kind::Event, self.event.get());
    }
}

pub(crate) fn new_queue(context: &Context) -> Result<ClStream> {
    // SAFETY: the context's default device belongs to the context.
    let q = unsafe { CommandQueue::create_with_properties(context, context.default_device(), 0, 0) };
    let queue = match q {
        Ok(q) => q,
        #[allow(deprecated)]
        Err(_) => CommandQueue::create_default(context, 0).map_err(|e| cl(e, "clCreateCommandQueue"))?,
    };
    Ok(stream_of(queue, context.get() as usize))
}

/// A stream over a queue gpubuf has just created, with a fresh identity.
fn stream_of(queue: CommandQueue, context: usize) -> ClStream {
    owned::claim(Kind::Queue, queue.get());
    with_identity(queue, context)
}

/// A stream over the caller's queue, taking its reference over, unless a live stream holds
/// the handle already: then the queue comes back unreleased.
pub(crate) fn claimed_stream(
    queue: CommandQueue,
    context: usize,
) -> std::result::Result<ClStream, CommandQueue> {
    if owned::claim(Kind::Queue, queue.get()) {
        Ok(with_identity(queue, context))
    } else {
        Err(queue)
    }
}

/// A stream over a recorded queue, with a fresh identity.
fn with_identity(queue: CommandQueue, context: usize) -> ClStream {
    // A u64 counter does not wrap in any process's lifetime.
    let id = NEXT_STREAM_ID.fetch_add(1, Ordering::Relaxed);
    ClStream { queue: Arc::new(OwnedQueue(queue)), id, context }
}
