//! [`Mirror`]: a host array and its device copy, with dirty tracking both ways.

use crate::arith::Arith;
use crate::ranges::{DirtyPolicy, RangeSet};
use crate::view::View;
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{Element, Error, Kernels, Result};
use ndarray::{ArrayD, ArrayView, ArrayViewD, ArrayViewMutD, Dimension};
use std::ops::Range;

/// A host array mirrored on a device, after glumpy's `GPUData`: every mutation goes
/// through the mirror, which records the bytes it touched, and [`Mirror::sync`] uploads
/// only those. The other way, [`Mirror::mark_device_dirty`] records what device work
/// changed and [`Mirror::download`] brings exactly that back.
///
/// # Nothing is lost between the two sides
/// * An upload never covers a device-dirty byte: ranges widened by the policy (glumpy's
///   hull, a gap) are split around the bytes marked with [`Mirror::mark_device_dirty`],
///   which keep the device's value until [`Mirror::download`] brings it over.
/// * A host write to a device-dirty byte is a conflict: an [`Error::InvalidArgument`]
///   naming the bytes, and nothing changes (the host's copy of those bytes is stale, so a
///   read-modify-write such as `add_assign` would compute on old data). Download first.
/// * Marking bytes that the host wrote and did not upload yet is the one documented
///   overwrite: the device's bytes win (its work came later) and those host writes are
///   dropped from the pending set.
///
/// # Re-entrancy
/// Every mutation takes `&mut self`, and the closure of [`Mirror::write`] receives a
/// mutable view borrowed from the mirror, so no mirror operation can run inside another:
///
/// ```compile_fail
/// # use gpubuf_cpu::CpuBackend;
/// # use gpubuf_mirror::{DirtyPolicy, Mirror};
/// # let cpu = CpuBackend::new();
/// # let mut m = Mirror::new(&cpu, ndarray::Array1::<f32>::zeros(4).into_dyn().view(), DirtyPolicy::exact(), None).unwrap();
/// let all = m.full();
/// m.write(&all, |_| m.sync()); // error: `m` is already borrowed mutably
/// ```
pub struct Mirror<B: Kernels, T: Element> {
    pub(crate) host: ArrayD<T>,
    pub(crate) device: NDBuffer<B, T>,
    pub(crate) stream: B::Stream,
    pub(crate) policy: DirtyPolicy,
    /// Host bytes to upload (widened by the policy).
    pub(crate) pending: RangeSet,
    /// Bytes changed on the device and not downloaded, exact (never widened).
    pub(crate) device_dirty: RangeSet,
}

/// Device-dirty ranges are kept exact: widening them would download bytes the host wrote.
pub(crate) const EXACT: DirtyPolicy = DirtyPolicy { gap: 0, max_ranges: usize::MAX };

impl<B: Kernels, T: Element> std::fmt::Debug for Mirror<B, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mirror")
            .field("shape", &self.host.shape())
            .field("pending", &self.pending.ranges())
            .finish()
    }
}

pub(crate) fn as_bytes<T: Element>(a: &ArrayD<T>) -> &[u8] {
    // The host array is always standard layout (built so, never re-laid out).
    bytemuck::cast_slice(a.as_slice_memory_order().unwrap_or(&[]))
}

/// A C-order copy of `view`, or [`Error::OutOfMemory`] (never an abort) when a view with
/// repeated elements (a broadcast) holds more than the host can.
fn standard<T: Element>(view: ArrayViewD<'_, T>) -> Result<ArrayD<T>> {
    Ok(ArrayD::from_shape_vec(view.raw_dim(), gpubuf_buffer::c_order_vec(&view)?)?)
}

impl<B: Kernels, T: Element> Mirror<B, T> {
    /// Mirrors `host`, a view of any dimension (`a.view()`, `a.t()`, a slice), copied into a
    /// C-order array, on `backend`, uploaded whole, with `policy` for merging dirty ranges
    /// and copies queued on `stream` (default stream when `None`).
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the host copy does not fit in memory; allocation and
    /// transfer errors.
    pub fn new<D: Dimension>(
        backend: &B,
        host: ArrayView<'_, T, D>,
        policy: DirtyPolicy,
        stream: Option<&B::Stream>,
    ) -> Result<Self> {
        let host = standard(host.into_dyn())?;
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

    /// Checks that `view` is a view of this array and returns the bytes it covers.
    pub(crate) fn check_view(&self, view: &View) -> Result<Vec<Range<usize>>> {
        if view.base_shape() != self.host.shape() {
            return Err(Error::ShapeMismatch {
                expected: self.host.shape().to_vec(),
                got: view.base_shape().to_vec(),
            });
        }
        view.layout()?.check_fits(self.host.len())?;
        view.byte_runs(T::DTYPE.size())
    }

    /// Writes through `view` with `f`, marking every byte of the view as pending. The
    /// closure gets a mutable ndarray view of exactly the view's elements. The bytes are
    /// marked before `f` runs, so a closure that panics half-way leaves them pending and
    /// the next [`Mirror::sync`] still brings the device level with the host.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for a view of another array; [`Error::OutOfBounds`] when
    /// the view does not fit; [`Error::InvalidArgument`] for a conflict: the view covers
    /// bytes marked with [`Mirror::mark_device_dirty`] and not downloaded yet. On error
    /// `f` does not run and nothing changes.
    pub fn write<R>(&mut self, view: &View, f: impl FnOnce(ArrayViewMutD<'_, T>) -> R) -> Result<R> {
        let runs = self.check_view(view)?;
        if !self.device_dirty.is_empty() {
            if let Some(c) = runs.iter().find_map(|r| self.device_dirty.overlap(r.clone())) {
                return Err(Error::invalid(format!(
                    "write conflict: bytes {}..{} were changed on the device and not downloaded \
                     (download() first)",
                    c.start, c.end
                )));
            }
        }
        self.pending.insert_all(runs, self.policy);
        Ok(f(view.apply(self.host.view_mut())))
    }

    /// Sets one element.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] for an index outside its axis, [`Error::InvalidArgument`]
    /// for an index with another number of axes than the array; as [`Mirror::write`].
    pub fn set(&mut self, index: &[usize], value: T) -> Result<()> {
        if index.len() != self.host.ndim() {
            return Err(Error::invalid(format!(
                "an index needs one entry per axis: {index:?} has {}, the array has {} (shape {:?})",
                index.len(),
                self.host.ndim(),
                self.host.shape()
            )));
        }
        for (axis, (&i, &n)) in index.iter().zip(self.host.shape()).enumerate() {
            if i >= n {
                return Err(Error::OutOfBounds {
                    what: format!("index on axis {axis}"),
                    start: i,
                    end: i.saturating_add(1),
                    len: n,
                });
            }
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

    /// Copies the device array back in full (for checks).
    ///
    /// # Errors
    /// Transfer errors.
    pub fn device_to_host(&self) -> Result<ArrayD<T>> {
        self.device.to_ndarray()
    }
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
