//! Streams and events, type-erased so one pool serves any allocator.

use gpubuf_core::{Backend, Result};
use std::any::TypeId;
use std::sync::Arc;

/// Who a stream is: the backend type and the backend's [`Backend::stream_id`]. The type
/// keeps the numbering of one backend from meeting another's on a pool that is given
/// streams of several backend types.
pub(crate) type StreamKey = (TypeId, u64);

/// An event recorded when a block was freed on a stream; the block may go to another
/// stream once it completes.
pub(crate) trait Pending: Send + Sync {
    fn complete(&self) -> bool;
}

/// A stream a block was used on.
pub(crate) trait PoolStream: Send + Sync {
    fn key(&self) -> StreamKey;
    /// Records an event after the work queued so far; `None` when it completed at once.
    fn record(&self) -> Result<Option<Arc<dyn Pending>>>;
}

struct Event<B: Backend> {
    backend: B,
    event: B::Event,
}

impl<B: Backend> Pending for Event<B> {
    fn complete(&self) -> bool {
        // An error means the stream failed; the block is not safe to hand elsewhere.
        self.backend.event_complete(&self.event).unwrap_or(false)
    }
}

/// Stands for an event that could not be recorded: it never completes, so the block is
/// handed out again only on its own stream (whose order covers the reuse) and otherwise
/// waits until its segment is released.
pub(crate) struct Never;

impl Pending for Never {
    fn complete(&self) -> bool {
        false
    }
}

/// A backend's stream, owned (streams are cheap clones of one queue).
pub(crate) struct StreamHandle<B: Backend> {
    pub(crate) backend: B,
    pub(crate) stream: B::Stream,
}

/// The key of `stream` of `backend`.
pub(crate) fn key_of<B: Backend>(backend: &B, stream: &B::Stream) -> StreamKey {
    (TypeId::of::<B>(), backend.stream_id(stream))
}

impl<B: Backend> PoolStream for StreamHandle<B> {
    fn key(&self) -> StreamKey {
        key_of(&self.backend, &self.stream)
    }

    fn record(&self) -> Result<Option<Arc<dyn Pending>>> {
        let Some(event) = self.backend.record_pending(&self.stream)? else { return Ok(None) };
        Ok(Some(Arc::new(Event { backend: self.backend.clone(), event })))
    }
}

/// Events a free block waits on: `(stream, event)`.
pub(crate) type Events = Vec<(StreamKey, Arc<dyn Pending>)>;

/// Whether a block with `events` may be handed to stream `tag` (`None`: to the host,
/// which needs every event complete). Completed events are dropped on the way.
#[inline]
pub(crate) fn usable(events: &mut Events, tag: Option<StreamKey>) -> bool {
    if events.is_empty() {
        return true;
    }
    events.retain(|(_, e)| !e.complete());
    events.iter().all(|(s, _)| Some(*s) == tag)
}

/// The one stream all of `events` belong to, if they belong to one (and there are any).
pub(crate) fn sole_stream(events: &Events) -> Option<StreamKey> {
    let (first, _) = events.first()?;
    events.iter().all(|(s, _)| s == first).then_some(*first)
}
