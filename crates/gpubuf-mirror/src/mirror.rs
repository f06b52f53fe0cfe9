//! [`Mirror`]: a host array and its device copy, with dirty tracking both ways.

use crate::arith::Arith;
use crate::ranges::{DirtyPolicy, RangeSet};
use crate::view::View;
use gpubuf_buffer::{Buffer, NDBuffer};
use gpubuf_core::{CopyPlan, DType, Element, Error, Kernels, MemRef, Result, Segment};
use ndarray::{ArrayD, ArrayViewD, ArrayViewMutD};
use std::ops::Range;

/// What one [`Mirror::sync`] or [`Mirror::download`] moved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transfer {
    /// The byte ranges moved.
    pub ranges: Vec<Range<usize>>,
    /// Bytes moved.
    pub bytes: usize,
    /// Copy commands issued (one per range, or one staging copy plus one scatter launch).
    pub commands: usize,
}

/// Ranges above this count are uploaded as one staging copy plus one scatter plan.
const PLAN_ABOVE: usize = 16;

/// A host array mirrored on a device, after glumpy's `GPUData`: every mutation goes
/// through the mirror, which records the bytes it touched, and [`Mirror::sync`] uploads
/// only those. The other way, [`Mirror::mark_device_dirty`] records what device work
/// changed and [`Mirror::download`] brings exactly that back.
pub struct Mirror<B: Kernels, T: Element> {
    host: ArrayD<T>,
    device: NDBuffer<B, T>,
    stream: B::Stream,
    policy: DirtyPolicy,
    pending: RangeSet,
    device_dirty: RangeSet,
}

impl<B: Kernels, T: Element> std::fmt::Debug for Mirror<B, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mirror")
            .field("shape", &self.host.shape())
            .field("pending", &self.pending.ranges())
            .finish()
    }
}

fn as_bytes<T: Element>(a: &ArrayD<T>) -> &[u8] {
    // The host array is always standard layout (built so, never re-laid out).
    bytemuck::cast_slice(a.as_slice_memory_order().unwrap_or(&[]))
}

impl<B: Kernels, T: Element> Mirror<B, T> {
    /// Mirrors `host` (copied into a C-order array) on `backend`, uploaded whole, with
    /// `policy` for merging dirty ranges and copies queued on `stream` (default stream
    /// when `None`).
    ///
    /// # Errors
    /// Allocation and transfer errors.
    pub fn new(
        backend: &B,
        host: ArrayViewD<'_, T>,
        policy: DirtyPolicy,
        stream: Option<&B::Stream>,
    ) -> Result<Self> {
        let host = host.as_standard_layout().into_owned();
        let device = NDBuffer::from_ndarray(backend, host.view())?;
        let stream = stream.cloned().unwrap_or_else(|| backend.default_stream().clone());
        Ok(Mirror {
            host,
            device,
            stream,
            policy,
            pending: RangeSet::default(),
            device_dirty: RangeSet::default(),
        })
    }

    /// The host array (read-only: writes go through the mirror).
    pub fn host(&self) -> ArrayViewD<'_, T> {
        self.host.view()
    }

    /// The device copy.
    pub fn device(&self) -> &NDBuffer<B, T> {
        &self.device
    }

    /// The whole array as a [`View`].
    pub fn full(&self) -> View {
        View::full(self.host.shape())
    }

    /// A sub-view (`ranges[k]` on axis `k`).
    ///
    /// # Errors
    /// As [`View::slice`].
    pub fn view(&self, ranges: &[Range<usize>]) -> Result<View> {
        self.full().slice(ranges)
    }

    /// The merge policy.
    pub fn policy(&self) -> DirtyPolicy {
        self.policy
    }

    /// Byte ranges written on the host and not yet uploaded.
    pub fn pending(&self) -> Vec<Range<usize>> {
        self.pending.ranges()
    }

    /// Whether anything waits for [`Mirror::sync`].
    pub fn is_dirty(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Byte ranges marked as changed on the device and not yet downloaded.
    pub fn device_pending(&self) -> Vec<Range<usize>> {
        self.device_dirty.ranges()
    }

    fn check_view(&self, view: &View) -> Result<()> {
        let full = self.full();
        let l = view.layout()?;
        l.check_fits(self.host.len())?;
        if full.layout()?.shape().len() != l.strides().len() {
            return Err(Error::invalid("the view belongs to an array of another rank"));
        }
        Ok(())
    }

    fn mark(&mut self, view: &View) -> Result<()> {
        for r in view.byte_runs(T::DTYPE.size())? {
            self.pending.insert(r, self.policy);
        }
        Ok(())
    }

    /// Writes through `view` with `f`, then marks every byte of the view as pending. The
    /// closure gets a mutable ndarray view of exactly the view's elements.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the view does not fit this array.
    pub fn write<R>(&mut self, view: &View, f: impl FnOnce(ArrayViewMutD<'_, T>) -> R) -> Result<R> {
        self.check_view(view)?;
        if view.layout()?.strides().len() != self.host.ndim() || view_shape_base(view) != self.host.shape() {
            return Err(Error::ShapeMismatch {
                expected: self.host.shape().to_vec(),
                got: view_shape_base(view),
            });
        }
        let r = f(view.apply(self.host.view_mut()));
        self.mark(view)?;
        Ok(r)
    }

    /// Sets one element.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] / [`Error::ShapeMismatch`] for a bad index.
    pub fn set(&mut self, index: &[usize], value: T) -> Result<()> {
        if index.len() != self.host.ndim() {
            return Err(Error::ShapeMismatch { expected: self.host.shape().to_vec(), got: index.to_vec() });
        }
        let ranges: Vec<Range<usize>> = index.iter().map(|&i| i..i + 1).collect();
        let view = self.view(&ranges)?;
        self.write(&view, |mut v| v.iter_mut().for_each(|x| *x = value))
    }

    /// Sets every element of `view` to `value`.
    ///
    /// # Errors
    /// As [`Mirror::write`].
    pub fn fill(&mut self, view: &View, value: T) -> Result<()> {
        self.write(view, |mut v| v.fill(value))
    }

    /// Copies `src` (same shape as the view) into `view`.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when the shapes differ; as [`Mirror::write`].
    pub fn copy_from(&mut self, view: &View, src: ArrayViewD<'_, T>) -> Result<()> {
        if src.shape() != view.shape().as_slice() {
            return Err(Error::ShapeMismatch { expected: view.shape(), got: src.shape().to_vec() });
        }
        self.write(view, |mut v| v.assign(&src))
    }

    /// Downloads the ranges marked with [`Mirror::mark_device_dirty`] into the host array
    /// and forgets them; host writes pending in those bytes are dropped (the device's
    /// bytes win, since the device work came later).
    ///
    /// # Errors
    /// Transfer errors.
    pub fn download(&mut self) -> Result<Transfer> {
        let ranges = self.device_dirty.ranges();
        let b = self.device.backend().clone();
        let mem = self.device.buffer().memory().clone();
        let base = self.device.buffer().offset();
        let bytes: &mut [u8] =
            bytemuck::cast_slice_mut(self.host.as_slice_memory_order_mut().unwrap_or(&mut []));
        for r in &ranges {
            b.read(&self.stream, &mem, base + r.start, &mut bytes[r.clone()])?;
        }
        for r in &ranges {
            self.pending.remove(r.clone());
        }
        self.device_dirty.clear();
        let total = ranges.iter().map(|r| r.len()).sum();
        Ok(Transfer { commands: ranges.len(), bytes: total, ranges })
    }

    /// Records that device work changed the bytes of `view`, for [`Mirror::download`].
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the view does not fit this array.
    pub fn mark_device_dirty(&mut self, view: &View) -> Result<()> {
        self.check_view(view)?;
        for r in view.byte_runs(T::DTYPE.size())? {
            self.device_dirty.insert(r, self.policy);
        }
        Ok(())
    }

    /// Uploads exactly the pending ranges and clears them: one write per range, or, past
    /// 16 ranges, the ranges packed into one staging upload and scattered in place by one
    /// copy-plan launch.
    ///
    /// # Errors
    /// Allocation and transfer errors; the pending ranges stay pending on error.
    pub fn sync(&mut self) -> Result<Transfer> {
        let ranges = self.pending.ranges();
        let total: usize = ranges.iter().map(|r| r.len()).sum();
        let _span = tracing::debug_span!("mirror.sync", ranges = ranges.len(), bytes = total).entered();
        let b = self.device.backend().clone();
        let mem = self.device.buffer().memory().clone();
        let base = self.device.buffer().offset();
        let host = as_bytes(&self.host);
        let commands = if ranges.len() <= PLAN_ABOVE {
            for r in &ranges {
                b.write(&self.stream, &mem, base + r.start, &host[r.clone()])?;
            }
            ranges.len()
        } else {
            let mut staged = Vec::with_capacity(total);
            let mut segments = Vec::with_capacity(ranges.len());
            for r in &ranges {
                segments.push(Segment::new(0, r.start, &[(r.len(), 1)], staged.len())?);
                staged.extend_from_slice(&host[r.clone()]);
            }
            let staging = Buffer::from_bytes(&b, &staged)?;
            let plan =
                b.prepare(&CopyPlan::new(vec![self.device.buffer().len()], total, segments)?, DType::U8)?;
            let target = MemRef { memory: &*mem, offset: base, len: self.device.buffer().len() };
            b.scatter(&self.stream, &plan, staging.memref(), &[target])?;
            b.synchronize(&self.stream)?;
            2
        };
        self.pending.clear();
        Ok(Transfer { ranges, bytes: total, commands })
    }

    /// Uploads the whole array (what a mirror without tracking does), for comparison.
    ///
    /// # Errors
    /// Transfer errors.
    pub fn upload_all(&mut self) -> Result<Transfer> {
        let b = self.device.backend().clone();
        let bytes = as_bytes(&self.host);
        b.write(&self.stream, self.device.buffer().memory(), self.device.buffer().offset(), bytes)?;
        self.pending.clear();
        let whole = 0..bytes.len();
        Ok(Transfer { ranges: std::iter::once(whole).collect(), bytes: bytes.len(), commands: 1 })
    }

    /// Copies the device array back in full (for checks).
    ///
    /// # Errors
    /// Transfer errors.
    pub fn device_to_host(&self) -> Result<ArrayD<T>> {
        self.device.to_ndarray()
    }
}

fn view_shape_base(view: &View) -> Vec<usize> {
    view.base_shape().to_vec()
}

impl<B: Kernels, T: Arith> Mirror<B, T> {
    fn apply(&mut self, view: &View, f: impl Fn(T) -> T) -> Result<()> {
        self.write(view, |mut v| v.mapv_inplace(&f))
    }

    /// `view += value`.
    ///
    /// # Errors
    /// As [`Mirror::write`].
    pub fn add_assign(&mut self, view: &View, value: T) -> Result<()> {
        self.apply(view, |x| x.add(value))
    }

    /// `view -= value`.
    ///
    /// # Errors
    /// As [`Mirror::write`].
    pub fn sub_assign(&mut self, view: &View, value: T) -> Result<()> {
        self.apply(view, |x| x.sub(value))
    }

    /// `view *= value`.
    ///
    /// # Errors
    /// As [`Mirror::write`].
    pub fn mul_assign(&mut self, view: &View, value: T) -> Result<()> {
        self.apply(view, |x| x.mul(value))
    }

    /// `view /= value` (glumpy misses this one).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an integer division by zero (nothing is written);
    /// as [`Mirror::write`].
    pub fn div_assign(&mut self, view: &View, value: T) -> Result<()> {
        if T::default().div(value).is_none() {
            return Err(Error::invalid("integer division by zero"));
        }
        self.apply(view, |x| x.div(value).unwrap_or(x))
    }
}
