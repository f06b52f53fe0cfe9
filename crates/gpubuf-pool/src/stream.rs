//! Streams and events, type-erased so one pool serves any allocator.

use gpubuf_core::{Backend, Result};
use std::sync::Arc;

/// An event recorded when a block was freed on a stream; the block may go to another
/// stream once it completes.
pub(crate) trait Pending: Send + Sync {
    fn complete(&self) -> bool;
}

/// A stream a block was used on.
pub(crate) trait PoolStream: Send + Sync {
    fn id(&self) -> u64;
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

/// A backend's stream, owned (streams are cheap clones of one queue).
pub(crate) struct StreamHandle<B: Backend> {
    pub(crate) backend: B,
    pub(crate) stream: B::Stream,
}

impl<B: Backend> PoolStream for StreamHandle<B> {
    fn id(&self) -> u64 {
        self.backend.stream_id(&self.stream)
    }

    fn record(&self) -> Result<Option<Arc<dyn Pending>>> {
        let event = self.backend.record_event(&self.stream)?;
        if self.backend.event_complete(&event)? {
            return Ok(None);
        }
        Ok(Some(Arc::new(Event { backend: self.backend.clone(), event })))
    }
}

/// Events a free block waits on: `(stream id, event)`.
pub(crate) type Events = Vec<(u64, Arc<dyn Pending>)>;

/// Whether a block with `events` may be handed to stream `tag` (`None`: to the host,
/// which needs every event complete). Completed events are dropped on the way.
#[inline]
pub(crate) fn usable(events: &mut Events, tag: Option<u64>) -> bool {
    if events.is_empty() {
        return true;
    }
    events.retain(|(_, e)| !e.complete());
    events.iter().all(|(s, _)| Some(*s) == tag)
}
