//! The appends of a [`Bufferizer`]: every input is checked, with the checks the backend
//! itself makes, before the first byte moves.

use crate::input::Input;
use crate::Bufferizer;
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{
    check_copy, check_plan_args, checked_size, CopyPlan, Element, Error, Kernels, MemRef, PreparedPlan,
    Result, Segment,
};

/// `a * b`, or an error when it overflows.
pub(crate) fn mul(a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b).ok_or_else(|| Error::invalid(format!("{a} * {b} overflows usize")))
}

/// `a + b`, or an error when it overflows.
fn add(a: usize, b: usize) -> Result<usize> {
    a.checked_add(b).ok_or_else(|| Error::invalid(format!("{a} + {b} overflows usize")))
}

impl<B: Kernels, T: Element> Bufferizer<B, T> {
    /// Fires the append hook, then `on_full` if the buffer is full: only for an append of
    /// at least one element (an append of none changes nothing and fires nothing).
    fn after_append(&mut self, added: usize, multiple: bool) {
        if added == 0 {
            return;
        }
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
        match self.len.checked_add(adding) {
            Some(end) if end <= self.capacity => Ok(()),
            _ => Err(Error::Capacity { capacity: self.capacity, len: self.len, adding }),
        }
    }

    /// The bytes of `count` elements from element position `at` of the current buffer.
    fn dst(&self, at: usize, count: usize) -> Result<MemRef<'_, B::Memory>> {
        let buf = &self.current.buffer;
        let offset = add(buf.offset(), mul(at, self.element_nbytes())?)?;
        MemRef::new(&**buf.memory(), offset, mul(count, self.element_nbytes())?)
    }

    /// The plan gathering a strided device input in C order (the cached one when it fits).
    fn gather_plan(&self, a: &NDBuffer<B, T>) -> Result<Option<CopyPlan>> {
        let storage_len = a.buffer().len() / T::DTYPE.size();
        match &self.plan_cache {
            Some((l, n, _)) if l == a.layout() && *n == storage_len => Ok(None),
            _ => {
                Ok(Some(CopyPlan::new(vec![storage_len], a.size(), Segment::from_layout(0, a.layout(), 0)?)?))
            }
        }
    }

    /// The bytes a device input is read from: its dense range when C-contiguous, else its
    /// whole storage (what a plan gather is checked against). An empty view reads nothing,
    /// whatever its offset: an empty range at the start of its storage.
    fn device_source<'s>(a: &'s NDBuffer<B, T>) -> Result<MemRef<'s, B::Memory>> {
        let storage = a.storage();
        if a.size() == 0 {
            return Ok(MemRef { len: 0, ..storage });
        }
        if !a.is_c_contiguous() {
            return Ok(storage);
        }
        let size = T::DTYPE.size();
        let offset = add(storage.offset, mul(a.layout().offset(), size)?)?;
        MemRef::new(storage.memory, offset, mul(a.size(), size)?)
    }

    /// Checks an input of `shape` holding `count` elements that lands at element position
    /// `at`, `whole` being the destination of the entire append: everything the copy and
    /// the backend will check, so that only a device failure can stop the copy.
    fn check_input(
        &self,
        input: &Input<'_, B, T>,
        shape: &[usize],
        at: usize,
        count: usize,
        whole: MemRef<'_, B::Memory>,
    ) -> Result<()> {
        if input.shape() != shape {
            return Err(Error::ShapeMismatch { expected: shape.to_vec(), got: input.shape().to_vec() });
        }
        match input {
            Input::Bytes { dtype, bytes, .. } => {
                if *dtype != T::DTYPE {
                    return Err(Error::DTypeMismatch { expected: T::DTYPE, got: *dtype });
                }
                let want = mul(checked_size(shape)?, T::DTYPE.size())?;
                if bytes.len() != want {
                    return Err(Error::invalid(format!(
                        "{} bytes for shape {shape:?} of {}",
                        bytes.len(),
                        T::DTYPE
                    )));
                }
            }
            Input::Host(_) => {}
            Input::Device(a) => {
                if !a.backend().same_device(&self.backend) {
                    return Err(Error::DeviceMismatch("the input array lives on another device".into()));
                }
                if a.size() == 0 {
                    // Nothing of it is read: an empty view may carry any offset.
                    return Ok(());
                }
                let src = Self::device_source(a)?;
                if src.overlaps(&whole) {
                    return Err(Error::invalid(
                        "a device input shares bytes with the elements this append writes",
                    ));
                }
                let dst = self.dst(at, count)?;
                if a.is_c_contiguous() {
                    check_copy(&src, dst.memory, dst.offset)?;
                } else {
                    match (self.gather_plan(a)?, &self.plan_cache) {
                        (Some(plan), _) => check_plan_args(&plan, T::DTYPE, &[src], dst)?,
                        (None, Some((_, _, p))) => check_plan_args(p.plan(), T::DTYPE, &[src], dst)?,
                        (None, None) => return Err(Error::invalid("plan cache empty")),
                    }
                }
            }
        }
        Ok(())
    }

    /// Appends one element of `element_shape`; fires `on_append_one`, then `on_full` if the
    /// bufferizer became full.
    ///
    /// # Errors
    /// [`Error::Capacity`] when full; [`Error::ShapeMismatch`]; [`Error::DTypeMismatch`]
    /// for raw bytes of another dtype; [`Error::DeviceMismatch`]; [`Error::InvalidArgument`]
    /// for a device input that shares bytes with the element it would be copied to (or is
    /// misaligned); driver errors. On any error `len()` is unchanged and no hook fires; only
    /// a driver error during the copy can leave part of the input in the element past
    /// `len()` (which the next append overwrites).
    pub fn append_one<'a>(&mut self, element: impl Into<Input<'a, B, T>>) -> Result<()> {
        let input = element.into();
        self.check_room(1)?;
        let shape = self.element_shape.clone();
        self.check_input(&input, &shape, self.len, 1, self.dst(self.len, 1)?)?;
        self.after_default_stream(std::slice::from_ref(&input))?;
        self.copy_in(&input, self.len, 1)?;
        self.len += 1;
        self.after_append(1, false);
        Ok(())
    }

    /// Appends a batch whose first axis counts the elements (`[n, *element_shape]`); fires
    /// `on_append_multiple`, then `on_full` if full. A batch of no elements (`n = 0`) is
    /// checked as any other and changes nothing: no hook fires (it filled nothing).
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
        self.check_input(&input, &shape, self.len, n, self.dst(self.len, n)?)?;
        self.after_default_stream(std::slice::from_ref(&input))?;
        self.copy_in(&input, self.len, n)?;
        self.len += n;
        self.after_append(n, true);
        Ok(())
    }

    /// Appends every element of a list, all or nothing: the room, and every element with
    /// every check its copy will make (shape, dtype, byte count, device, alignment, and no
    /// device input sharing bytes with the elements the list is copied to), are checked
    /// before the first byte moves (dolphin appends one by one and leaves a list
    /// half-appended on overflow). Fires `on_append_multiple` once, then `on_full` if the
    /// list filled the buffer; an empty list changes nothing and fires no hook (as dolphin,
    /// which appends a list element by element).
    ///
    /// # Errors
    /// As [`Bufferizer::append_multiple`]; a bad element copies nothing. An error while
    /// copying (after every check passed: the driver's, or running out of memory gathering
    /// a strided host element or preparing a strided device element's plan) leaves `len()`
    /// unchanged and no hook fired, but the elements copied before it hold their data in
    /// the positions past `len()` (which the next append overwrites).
    pub fn append_list(&mut self, elements: &[Input<'_, B, T>]) -> Result<()> {
        self.check_room(elements.len())?;
        let shape = self.element_shape.clone();
        let whole = self.dst(self.len, elements.len())?;
        for (k, e) in elements.iter().enumerate() {
            self.check_input(e, &shape, self.len + k, 1, whole)?;
        }
        self.after_default_stream(elements)?;
        for (k, e) in elements.iter().enumerate() {
            self.copy_in(e, self.len + k, 1)?;
        }
        self.len += elements.len();
        self.after_append(elements.len(), true);
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

    /// Device inputs are written by `NDBuffer` operations, which run on the default stream:
    /// once per append holding any, the bufferizer's stream is made to wait for the work
    /// queued there so far (nothing when the two are one stream).
    fn after_default_stream(&self, inputs: &[Input<'_, B, T>]) -> Result<()> {
        if inputs.iter().any(|i| matches!(i, Input::Device(a) if a.size() > 0)) {
            self.order(&self.stream, self.backend.default_stream())?;
        }
        Ok(())
    }

    /// Copies `count` elements of a checked input to element position `at`.
    fn copy_in(&mut self, input: &Input<'_, B, T>, at: usize, count: usize) -> Result<()> {
        let buf = self.current.buffer.clone();
        let (offset, bytes) = self.dst(at, count).map(|d| (d.offset, d.len))?;
        if bytes == 0 {
            return Ok(());
        }
        let memory = &**buf.memory();
        let _span = tracing::trace_span!("bufferizer.append", bytes, count).entered();
        match input {
            Input::Bytes { bytes: raw, .. } => self.backend.write(&self.stream, memory, offset, raw),
            Input::Host(v) => match v.as_slice() {
                Some(s) => self.backend.write(&self.stream, memory, offset, bytemuck::cast_slice(s)),
                None => {
                    let packed = gpubuf_buffer::c_order_vec(v)?;
                    self.backend.write(&self.stream, memory, offset, bytemuck::cast_slice(&packed))
                }
            },
            Input::Device(a) if a.is_c_contiguous() => {
                self.backend.copy(&self.stream, Self::device_source(a)?, memory, offset)
            }
            Input::Device(a) => {
                if let Some(plan) = self.gather_plan(a)? {
                    let storage_len = a.buffer().len() / T::DTYPE.size();
                    self.plan_cache =
                        Some((a.layout().clone(), storage_len, self.backend.prepare(&plan, T::DTYPE)?));
                }
                let dst = MemRef { memory, offset, len: bytes };
                match &self.plan_cache {
                    Some((_, _, plan)) => self.backend.gather(&self.stream, plan, &[a.storage()], dst),
                    None => Err(Error::invalid("plan cache empty")),
                }
            }
        }
    }
}
