//! [`Bufferizer`]: a fixed-capacity batch buffer on a device.

use crate::hooks::{Hook, Hooks};
use crate::input::Input;
use gpubuf_buffer::{Buffer, NDBuffer};
use gpubuf_core::{
    checked_size, CopyPlan, DType, Element, Error, Kernels, Layout, MemRef, Order, Result, Segment,
};
use std::sync::Arc;

/// Allocates the bytes of one batch buffer.
pub(crate) type Source<B> = Box<dyn Fn(&B, usize) -> Result<Buffer<B>> + Send + Sync>;

/// One batch buffer. Every view handed out holds a clone of the `Arc`, so a buffer whose
/// count is 1 has no view outside and may be written again.
pub(crate) struct Slot<B: Kernels> {
    pub(crate) buffer: Buffer<B>,
}

/// A batch buffer like dolphin's `Bufferizer`: `capacity` elements of `element_shape`,
/// allocated once and zeroed, filled by appends, emptied by [`Bufferizer::flush`] or handed
/// to a consumer whole by [`Bufferizer::take_batch`] (double buffering).
///
/// Every append is all-or-nothing: an append that would overflow copies nothing, for lists
/// as well as batches, and mistakes are typed errors, never panics.
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
    plan_cache: Option<(Layout, usize, B::Plan)>,
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
        let bytes = element_len
            .checked_mul(capacity)
            .and_then(|n| n.checked_mul(T::DTYPE.size()))
            .ok_or_else(|| Error::invalid("bufferizer size overflows"))?;
        let buffer = source(backend, bytes)?;
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
    /// Allocation errors.
    pub fn allocate(&mut self) -> Result<()> {
        let buffer = (self.source)(&self.backend, self.nbytes())?;
        self.current = Arc::new(Slot { buffer });
        self.spare = None;
        self.len = 0;
        self.fire(|h| &mut h.on_allocate);
        self.flush(T::default())
    }

    /// Sets every element of the whole capacity to `value`, empties the bufferizer, and
    /// fires `on_flush`.
    ///
    /// # Errors
    /// Driver errors.
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

    pub(crate) fn fire(&mut self, pick: impl Fn(&mut Hooks<B, T>) -> &mut Option<Hook<B, T>>) {
        if let Some(mut hook) = pick(&mut self.hooks).take() {
            hook(self);
            let slot = pick(&mut self.hooks);
            if slot.is_none() {
                *slot = Some(hook);
            }
        }
    }

    fn after_append(&mut self, multiple: bool) {
        if multiple {
            self.fire(|h| &mut h.on_append_multiple);
        } else {
            self.fire(|h| &mut h.on_append_one);
        }
        if self.is_full() {
            self.fire(|h| &mut h.on_full);
        }
    }

    fn check_room(&self, adding: usize) -> Result<()> {
        if self.len + adding > self.capacity {
            return Err(Error::Capacity { capacity: self.capacity, len: self.len, adding });
        }
        Ok(())
    }

    fn check_input(&self, input: &Input<'_, B, T>, shape: &[usize]) -> Result<()> {
        if input.shape() != shape {
            return Err(Error::ShapeMismatch { expected: shape.to_vec(), got: input.shape().to_vec() });
        }
        match input {
            Input::Bytes { dtype, bytes, .. } => {
                if *dtype != T::DTYPE {
                    return Err(Error::DTypeMismatch { expected: T::DTYPE, got: *dtype });
                }
                let want = checked_size(shape)? * T::DTYPE.size();
                if bytes.len() != want {
                    return Err(Error::invalid(format!(
                        "{} bytes for shape {shape:?} of {}",
                        bytes.len(),
                        T::DTYPE
                    )));
                }
            }
            Input::Device(a) if !a.backend().same_device(&self.backend) => {
                return Err(Error::DeviceMismatch("the input array lives on another device".into()));
            }
            _ => {}
        }
        Ok(())
    }

    /// Appends one element of `element_shape`; fires `on_append_one`, then `on_full` if the
    /// bufferizer became full.
    ///
    /// # Errors
    /// [`Error::Capacity`] when full; [`Error::ShapeMismatch`]; [`Error::DTypeMismatch`]
    /// for raw bytes of another dtype; [`Error::DeviceMismatch`]; driver errors.
    pub fn append_one<'a>(&mut self, element: impl Into<Input<'a, B, T>>) -> Result<()> {
        let input = element.into();
        self.check_room(1)?;
        let shape = self.element_shape.clone();
        self.check_input(&input, &shape)?;
        self.copy_in(&input, self.len, 1)?;
        self.len += 1;
        self.after_append(false);
        Ok(())
    }

    /// Appends a batch whose first axis counts the elements (`[n, *element_shape]`); fires
    /// `on_append_multiple`, then `on_full` if full.
    ///
    /// # Errors
    /// [`Error::Capacity`] when the batch does not fit (nothing is copied), and as
    /// [`Bufferizer::append_one`].
    pub fn append_multiple<'a>(&mut self, batch: impl Into<Input<'a, B, T>>) -> Result<()> {
        let input = batch.into();
        let n = match input.shape().first() {
            Some(&n) if input.shape().len() == self.element_shape.len() + 1 => n,
            _ => {
                let mut expected = vec![0];
                expected.extend_from_slice(&self.element_shape);
                return Err(Error::ShapeMismatch { expected, got: input.shape().to_vec() });
            }
        };
        self.check_room(n)?;
        let mut shape = vec![n];
        shape.extend_from_slice(&self.element_shape);
        self.check_input(&input, &shape)?;
        self.copy_in(&input, self.len, n)?;
        self.len += n;
        self.after_append(true);
        Ok(())
    }

    /// Appends every element of a list, all or nothing: the shapes and the room are checked
    /// for the whole list before anything is copied (dolphin appends one by one and leaves
    /// a list half-appended on overflow). Fires `on_append_multiple` once, then `on_full`.
    ///
    /// # Errors
    /// As [`Bufferizer::append_multiple`].
    pub fn append_list(&mut self, elements: &[Input<'_, B, T>]) -> Result<()> {
        self.check_room(elements.len())?;
        let shape = self.element_shape.clone();
        for e in elements {
            self.check_input(e, &shape)?;
        }
        for (k, e) in elements.iter().enumerate() {
            self.copy_in(e, self.len + k, 1)?;
        }
        self.len += elements.len();
        self.after_append(true);
        Ok(())
    }

    /// Dispatches on shape like dolphin's `append`: `element_shape` appends one,
    /// `[n, *element_shape]` appends a batch, anything else is an error.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for any other shape; otherwise as the method it calls.
    pub fn append<'a>(&mut self, input: impl Into<Input<'a, B, T>>) -> Result<()> {
        let input = input.into();
        if input.shape() == self.element_shape.as_slice() {
            self.append_one(input)
        } else if input.shape().len() == self.element_shape.len() + 1
            && input.shape()[1..] == self.element_shape[..]
        {
            self.append_multiple(input)
        } else {
            Err(Error::ShapeMismatch { expected: self.element_shape.clone(), got: input.shape().to_vec() })
        }
    }

    /// Copies `count` elements of a checked input to element position `at`.
    fn copy_in(&mut self, input: &Input<'_, B, T>, at: usize, count: usize) -> Result<()> {
        let size = T::DTYPE.size();
        let bytes = count * self.element_len * size;
        if bytes == 0 {
            return Ok(());
        }
        let buf = self.current.buffer.clone();
        let dst = MemRef {
            memory: &**buf.memory(),
            offset: buf.offset() + at * self.element_len * size,
            len: bytes,
        };
        let _span = tracing::trace_span!("bufferizer.append", bytes, count).entered();
        match input {
            Input::Bytes { bytes: raw, .. } => self.backend.write(&self.stream, dst.memory, dst.offset, raw),
            Input::Host(v) => match v.as_slice() {
                Some(s) => self.backend.write(&self.stream, dst.memory, dst.offset, bytemuck::cast_slice(s)),
                None => {
                    let packed: Vec<T> = v.iter().copied().collect();
                    self.backend.write(&self.stream, dst.memory, dst.offset, bytemuck::cast_slice(&packed))
                }
            },
            Input::Device(a) if a.is_c_contiguous() => {
                let src = a.storage();
                let from = MemRef {
                    memory: src.memory,
                    offset: src.offset + a.layout().offset() * size,
                    len: bytes,
                };
                self.backend.copy(&self.stream, from, dst.memory, dst.offset)
            }
            Input::Device(a) => {
                let storage_len = a.buffer().len() / size;
                let hit = matches!(&self.plan_cache, Some((l, n, _)) if l == a.layout() && *n == storage_len);
                if !hit {
                    let plan =
                        CopyPlan::new(vec![storage_len], a.size(), Segment::from_layout(0, a.layout(), 0)?)?;
                    self.plan_cache =
                        Some((a.layout().clone(), storage_len, self.backend.prepare(&plan, T::DTYPE)?));
                }
                match &self.plan_cache {
                    Some((_, _, plan)) => self.backend.gather(&self.stream, plan, &[a.storage()], dst),
                    None => Err(Error::invalid("plan cache empty")),
                }
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

    fn view_of(&self, slot: &Arc<Slot<B>>, count: usize) -> Result<NDBuffer<B, T>> {
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
    /// through it. While it is alive its buffer is not reused by double buffering.
    ///
    /// # Errors
    /// Only on inconsistent internal state.
    pub fn view(&self) -> Result<NDBuffer<B, T>> {
        self.view_of(&self.current, self.capacity)
    }

    /// An array view over the appended elements, `[len, *element_shape]`.
    ///
    /// # Errors
    /// Only on inconsistent internal state.
    pub fn filled(&self) -> Result<NDBuffer<B, T>> {
        self.view_of(&self.current, self.len)
    }

    /// Hands out the appended elements as an array and switches appends to a second buffer,
    /// so the producer keeps appending while a consumer works on the batch. The two never
    /// alias: the second buffer is the previous batch's only when no view of that batch is
    /// alive any more, otherwise a fresh one is allocated (zeroed). A reused buffer's elements
    /// past `len()` hold its old data until a [`Bufferizer::flush`]. Fires no hook.
    ///
    /// # Errors
    /// Allocation errors.
    pub fn take_batch(&mut self) -> Result<NDBuffer<B, T>> {
        let batch = self.filled()?;
        let next = match self.spare.take() {
            Some(s) if Arc::strong_count(&s) == 1 => s,
            _ => {
                let buffer = (self.source)(&self.backend, self.nbytes())?;
                self.backend.fill(&self.stream, buffer.memref(), bytemuck::bytes_of(&T::default()))?;
                Arc::new(Slot { buffer })
            }
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
