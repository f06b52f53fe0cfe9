//! [`Builder`]: a bufferizer with a stream, a memory pool and hooks set at construction.

use crate::bufferizer::Source;
use crate::hooks::Hooks;
use crate::Bufferizer;
use gpubuf_buffer::Buffer;
use gpubuf_core::{Allocator, Element, Kernels, Result};
use gpubuf_pool::MemoryPool;

/// Builds a [`Bufferizer`].
pub struct Builder<'a, B: Kernels, T: Element> {
    backend: &'a B,
    element_shape: &'a [usize],
    capacity: usize,
    stream: Option<B::Stream>,
    source: Option<Source<B>>,
    hooks: Hooks<B, T>,
}

macro_rules! hook {
    ($name:ident, $field:ident, $doc:literal) => {
        #[doc = $doc]
        pub fn $name(mut self, hook: impl FnMut(&Bufferizer<B, T>) + Send + 'static) -> Self {
            self.hooks.$field = Some(Box::new(hook));
            self
        }
    };
}

impl<'a, B: Kernels, T: Element> Builder<'a, B, T> {
    /// Starts a bufferizer of `capacity` elements of `element_shape`.
    pub fn new(backend: &'a B, element_shape: &'a [usize], capacity: usize) -> Self {
        Builder { backend, element_shape, capacity, stream: None, source: None, hooks: Hooks::default() }
    }

    /// Queue the copies on `stream` (default: the backend's default stream).
    pub fn stream(mut self, stream: &B::Stream) -> Self {
        self.stream = Some(stream.clone());
        self
    }

    pub(crate) fn stream_opt(mut self, stream: Option<&B::Stream>) -> Self {
        self.stream = stream.cloned();
        self
    }

    /// Take the batch buffers from `pool`. They return to it when the bufferizer and the
    /// last view of them drop, stream-ordered: each block is allocated on the bufferizer's
    /// stream (`MemoryPool::allocate_on`) and also names the backend's default stream, where
    /// `NDBuffer` operations on a batch run, so the pool hands it to another stream or the
    /// host only once the copies queued there have completed. A consumer that queues work
    /// on a batch on a stream of its own must finish it before dropping the batch.
    pub fn pool<A>(mut self, pool: &MemoryPool<A>) -> Self
    where
        A: Allocator<Memory = B::Memory>,
    {
        let pool = pool.clone();
        self.source = Some(Box::new(move |b: &B, stream: &B::Stream, bytes| {
            let mut block = pool.allocate_on(bytes, b, stream)?;
            block.record_stream(b, b.default_stream());
            block.into_buffer(b)
        }));
        self
    }

    hook!(on_flush, on_flush, "Hook fired after every flush.");
    hook!(on_allocate, on_allocate, "Hook fired when `allocate` re-allocates.");
    hook!(on_append_one, on_append_one, "Hook fired after each single-element append.");
    hook!(on_append_multiple, on_append_multiple, "Hook fired after each batch or list append.");
    hook!(on_full, on_full, "Hook fired when an append fills the bufferizer.");

    /// Allocates the (zeroed) buffer. No hook fires for this first allocation (as dolphin).
    ///
    /// # Errors
    /// As [`Bufferizer::new`].
    pub fn build(self) -> Result<Bufferizer<B, T>> {
        let stream = self.stream.unwrap_or_else(|| self.backend.default_stream().clone());
        let source =
            self.source.unwrap_or_else(|| Box::new(|b: &B, _: &B::Stream, bytes| Buffer::empty(b, bytes)));
        Bufferizer::from_parts(self.backend, self.element_shape, self.capacity, stream, source, self.hooks)
    }
}

impl<B: Kernels, T: Element> Bufferizer<B, T> {
    /// A [`Builder`] for a bufferizer with hooks, a stream or a pool.
    pub fn builder<'a>(backend: &'a B, element_shape: &'a [usize], capacity: usize) -> Builder<'a, B, T> {
        Builder::new(backend, element_shape, capacity)
    }
}
