//! [`Bufferizer`]: a fixed-capacity batch buffer on a device.

use crate::hooks::{Hook, Hooks};
use gpubuf_buffer::{Buffer, NDBuffer};
use gpubuf_core::{checked_size, DType, Element, Error, Kernels, Layout, Order, Result};
use std::sync::Arc;

/// Allocates the bytes of one batch buffer for work queued on the stream it is given.
pub(crate) type Source<B> =
    Box<dyn Fn(&B, &<B as gpubuf_core::Backend>::Stream, usize) -> Result<Buffer<B>> + Send + Sync>;

/// One batch buffer. Every view handed out holds a clone of the `Arc`, so a buffer whose
/// count is 1 has no view outside and may be written again.
pub(crate) struct Slot<B: Kernels> {
    pub(crate) buffer: Buffer<B>,
}

/// A batch buffer like dolphin's `Bufferizer`: `capacity` elements of `element_shape`,
/// allocated once and zeroed, filled by appends, emptied by [`Bufferizer::flush`] or handed
/// to a consumer whole by [`Bufferizer::take_batch`] (double buffering).
///
/// Every append is all-or-nothing: the room and every input are checked (with the checks
/// the backend itself makes) before the first byte moves, for lists as well as batches, and
/// mistakes are typed errors, never panics. An append that fails leaves `len()` unchanged
/// and fires no hook; only a driver failure during the copies can leave data in the
/// elements past `len()`, which the next append overwrites. Any other failing operation
/// (`flush`, `allocate`, `take_batch`) leaves `len()` and the buffers as they were.
///
/// # Hooks and re-entrancy
/// Hooks run after the operation is complete and receive `&Bufferizer`: they can read it
/// (`len`, `view`, `filled`) but not append, flush or take a batch from inside, which the
/// compiler refuses:
///
/// ```compile_fail
/// # use gpubuf_bufferizer::Bufferizer;
/// # let cpu = gpubuf_cpu::CpuBackend::new();
/// let b = Bufferizer::<_, f32>::builder(&cpu, &[2], 4)
///     .on_full(|b| b.flush(0.0).unwrap()) // error: `b` is a `&` reference
///     .build();
/// ```
///
/// To act on a full buffer, let the hook set a flag and call [`Bufferizer::take_batch`]
/// after the append returns. A hook must not lock a mutex that the appending thread holds
/// (one around this bufferizer, say): that deadlocks as any re-locked `std` mutex does. A
/// hook that panics stays registered; the panic reaches the caller of the operation, which
/// is complete by then (the `on_full` of that append does not fire).
pub struct Bufferizer<B: Kernels, T: Element> {
    pub(crate) backend: B,
    pub(crate) stream: B::Stream,
    pub(crate) element_shape: Vec<usize>,
    pub(crate) element_len: usize,
    pub(crate) capacity: usize,
    pub(crate) len: usize,
    pub(crate) current: Arc<Slot<B>>,
    pub(crate) spare: Option<Arc<Slot<B>>>,
    pub(crate) source: Source<B>,
    pub(crate) hooks: Hooks<B, T>,
    /// The last non-contiguous device layout gathered, and its prepared plan.
    pub(crate) plan_cache: Option<(Layout, usize, B::Plan)>,
}

impl<B: Kernels, T: Element> std::fmt::Debug for Bufferizer<B, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bufferizer")
            .field("element_shape", &self.element_shape)
            .field("capacity", &self.capacity)
            .field("len", &self.len)
            .field("dtype", &T::DTYPE)
            .finish()
    }
}

impl<B: Kernels, T: Element> Bufferizer<B, T> {
    /// A bufferizer of `capacity` elements of `element_shape`, zeroed, on `stream` (the
    /// backend's default stream when `None`). No hook fires for this first allocation.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero capacity or a size that overflows; allocation errors.
    pub fn new(
        backend: &B,
        element_shape: &[usize],
        capacity: usize,
        stream: Option<&B::Stream>,
    ) -> Result<Self> {
        crate::builder::Builder::new(backend, element_shape, capacity).stream_opt(stream).build()
    }

    pub(crate) fn from_parts(
        backend: &B,
        element_shape: &[usize],
        capacity: usize,
        stream: B::Stream,
        source: Source<B>,
        hooks: Hooks<B, T>,
    ) -> Result<Self> {
        if capacity == 0 {
            return Err(Error::invalid("a bufferizer needs a capacity of at least one element"));
        }
        let element_len = checked_size(element_shape)?;
        // The whole buffer's shape must be a valid array shape, so that `view()` works.
        let mut shape = vec![capacity];
        shape.extend_from_slice(element_shape);
        Layout::contiguous(&shape, Order::C)?;
        let bytes = element_len
            .checked_mul(capacity)
            .and_then(|n| n.checked_mul(T::DTYPE.size()))
            .ok_or_else(|| Error::invalid("bufferizer size overflows"))?;
        let buffer = source(backend, &stream, bytes)?;
        let b = Bufferizer {
            backend: backend.clone(),
            stream,
            element_shape: element_shape.to_vec(),
            element_len,
            capacity,
            len: 0,
            current: Arc::new(Slot { buffer }),
            spare: None,
            source,
            hooks,
            plan_cache: None,
        };
        b.fill_current(T::default())?;
        Ok(b)
    }

    /// Re-allocates the buffer (zeroed, empty), then fires `on_allocate` and, as dolphin's
    /// `allocate` ends with `flush(0)`, `on_flush`.
    ///
    /// # Errors
    /// Allocation and driver errors; on error the bufferizer is unchanged (same buffer,
    /// same elements, same `len()`) and no hook fires.
    pub fn allocate(&mut self) -> Result<()> {
        let slot = self.fresh_slot()?;
        self.current = slot;
        self.spare = None;
        self.len = 0;
        self.fire(|h| &mut h.on_allocate);
        self.fire(|h| &mut h.on_flush);
        Ok(())
    }

    /// A new batch buffer, zeroed.
    fn fresh_slot(&self) -> Result<Arc<Slot<B>>> {
        let buffer = (self.source)(&self.backend, &self.stream, self.nbytes())?;
        if !buffer.is_empty() {
            self.backend.fill(&self.stream, buffer.memref(), bytemuck::bytes_of(&T::default()))?;
        }
        Ok(Arc::new(Slot { buffer }))
    }

    /// Sets every element of the whole capacity to `value`, empties the bufferizer, and
    /// fires `on_flush`.
    ///
    /// # Errors
    /// Driver errors; on error `len()` is unchanged and no hook fires (the fill may have
    /// reached part of the memory).
    pub fn flush(&mut self, value: T) -> Result<()> {
        self.fill_current(value)?;
        self.len = 0;
        self.fire(|h| &mut h.on_flush);
        Ok(())
    }

    /// Empties the bufferizer without touching its memory (the next appends overwrite the
    /// old elements); cheaper than [`Bufferizer::flush`] when nothing reads past `len()`.
    /// Fires no hook.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    fn fill_current(&self, value: T) -> Result<()> {
        let buf = &self.current.buffer;
        if buf.is_empty() {
            return Ok(());
        }
        self.backend.fill(&self.stream, buf.memref(), bytemuck::bytes_of(&value))
    }

    /// Calls one hook with the bufferizer. A hook that panics stays registered: it is put
    /// back before the panic goes on to the caller.
    pub(crate) fn fire(&mut self, pick: impl Fn(&mut Hooks<B, T>) -> &mut Option<Hook<B, T>>) {
        if let Some(mut hook) = pick(&mut self.hooks).take() {
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(self)));
            let slot = pick(&mut self.hooks);
            if slot.is_none() {
                *slot = Some(hook);
            }
            if let Err(panic) = run {
                std::panic::resume_unwind(panic);
            }
        }
    }

    /// Elements appended so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was appended since the last flush or batch.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the capacity is used up.
    pub fn is_full(&self) -> bool {
        self.len == self.capacity
    }

    /// Elements the bufferizer holds when full.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Shape of one element.
    pub fn element_shape(&self) -> &[usize] {
        &self.element_shape
    }

    /// `[capacity, *element_shape]`.
    pub fn shape(&self) -> Vec<usize> {
        let mut s = vec![self.capacity];
        s.extend_from_slice(&self.element_shape);
        s
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        T::DTYPE
    }

    /// Bytes of the whole buffer.
    pub fn nbytes(&self) -> usize {
        self.capacity * self.element_nbytes()
    }

    /// Bytes of one element (dolphin's `element_nbytes` returns an element count instead).
    pub fn element_nbytes(&self) -> usize {
        self.element_len * T::DTYPE.size()
    }

    /// The stream appends are queued on.
    pub fn stream(&self) -> &B::Stream {
        &self.stream
    }

    /// The backend handle.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Makes `waiter` wait for the work queued so far on `on` (nothing when they are one
    /// stream).
    pub(crate) fn order(&self, waiter: &B::Stream, on: &B::Stream) -> Result<()> {
        if self.backend.stream_id(waiter) == self.backend.stream_id(on) {
            return Ok(());
        }
        let queued = self.backend.record_event(on)?;
        self.backend.stream_wait(waiter, &queued)
    }

    /// A view of `count` elements of `slot`. `NDBuffer` operations run on the default
    /// stream, so it is made to wait for the appends queued on the bufferizer's stream.
    fn view_of(&self, slot: &Arc<Slot<B>>, count: usize) -> Result<NDBuffer<B, T>> {
        self.order(self.backend.default_stream(), &self.stream)?;
        let buf = &slot.buffer;
        let bytes = count * self.element_nbytes();
        let lease: Arc<dyn std::any::Any + Send + Sync> = slot.clone();
        let view = Buffer::from_lease(
            &self.backend,
            buf.memory().clone(),
            buf.offset()..buf.offset() + bytes,
            lease,
        )?;
        let mut shape = vec![count];
        shape.extend_from_slice(&self.element_shape);
        NDBuffer::from_buffer(view, &shape, Order::C)
    }

    /// An array view over the whole capacity (`shape()`), sharing the storage: appends show
    /// through it. While it is alive its buffer is not reused by double buffering. Its
    /// operations (on the default stream) come after the appends queued so far on the
    /// bufferizer's stream; to read later appends through it, take a view again (or
    /// synchronize the bufferizer's stream).
    ///
    /// # Errors
    /// Driver errors from ordering the default stream after the bufferizer's; otherwise
    /// only on inconsistent internal state.
    pub fn view(&self) -> Result<NDBuffer<B, T>> {
        self.view_of(&self.current, self.capacity)
    }

    /// An array view over the appended elements, `[len, *element_shape]`, ordered after
    /// them as [`Bufferizer::view`].
    ///
    /// # Errors
    /// As [`Bufferizer::view`].
    pub fn filled(&self) -> Result<NDBuffer<B, T>> {
        self.view_of(&self.current, self.len)
    }

    /// Hands out the appended elements as an array and switches appends to a second buffer,
    /// so the producer keeps appending while a consumer works on the batch. The two never
    /// alias: the second buffer is the previous batch's only when no view of that batch is
    /// alive any more, otherwise a fresh one is allocated (zeroed). A reused buffer's elements
    /// past `len()` hold its old data until a [`Bufferizer::flush`]. Fires no hook.
    ///
    /// Streams: the batch's operations (on the default stream) come after the appends that
    /// filled it, and appends into a reused buffer come after the work queued on the
    /// default stream before this call (the previous batch's consumer).
    ///
    /// # Errors
    /// Allocation and driver errors; on error nothing changes (the same buffer keeps its
    /// elements and `len()`, and the spare buffer is kept).
    pub fn take_batch(&mut self) -> Result<NDBuffer<B, T>> {
        let batch = self.filled()?;
        let next = match self.spare.take() {
            Some(s) if Arc::strong_count(&s) == 1 => {
                if let Err(e) = self.order(&self.stream, self.backend.default_stream()) {
                    self.spare = Some(s);
                    return Err(e);
                }
                s
            }
            spare => match self.fresh_slot() {
                Ok(s) => s,
                Err(e) => {
                    self.spare = spare;
                    return Err(e);
                }
            },
        };
        let previous = std::mem::replace(&mut self.current, next);
        self.spare = Some(previous);
        self.len = 0;
        Ok(batch)
    }

    /// Whether two arrays share storage with the buffer appends currently go to.
    pub fn aliases(&self, array: &NDBuffer<B, T>) -> bool {
        array.buffer().overlaps(&self.current.buffer)
    }
}
