//! Region writes: a host array written into a (possibly strided) view of an [`NDBuffer`],
//! as `a[key] = value` does in numpy, with the device plans cached by layout.
//!
//! A contiguous region is one host write. Any other region is uploaded once into a C-order
//! staging array, which one copy plan moves into the region: a gather of its rows (one
//! segment per row, the innermost axes the region holds densely) when the rows are at least
//! [`MIN_ROW`] elements long, else a scatter of the whole region. A strided host array is
//! gathered into C order on the host first.
//!
//! Plans are relative to the bytes the region spans, so every region of one shape and
//! strides (the chunks zarr writes into one output array) shares a plan: a
//! [`RegionPlans`] keeps the prepared plans of the last regions written, per device.

use crate::host::c_order_vec;
use crate::NDBuffer;
use gpubuf_core::{CopyPlan, DType, Element, Error, Kernels, Layout, Order, Result, Segment};
use ndarray::{ArrayView, Dimension, IxDyn};
use std::sync::{Arc, Mutex, PoisonError};

/// Shortest row a row gather takes: shorter rows make a plan of more segments than it saves,
/// and such regions are written by one scatter instead.
pub const MIN_ROW: usize = 64;

/// What a prepared region plan depends on: the region's layout relative to its span.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    dtype: DType,
    shape: Vec<usize>,
    strides: Vec<isize>,
    /// The region's first element, from the start of its span.
    first: usize,
    /// Elements spanned.
    span: usize,
}

/// A prepared plan and the direction it runs in.
enum Prepared<P> {
    /// From the staging array (source 0) into the span (the buffer), row by row.
    Gather(Arc<P>),
    /// From the staging array (the buffer) into the span (source 0), element by element.
    Scatter(Arc<P>),
}

impl<P> Clone for Prepared<P> {
    fn clone(&self) -> Self {
        match self {
            Prepared::Gather(p) => Prepared::Gather(p.clone()),
            Prepared::Scatter(p) => Prepared::Scatter(p.clone()),
        }
    }
}

type Entry<B> = (B, Key, Prepared<<B as Kernels>::Plan>);

/// The prepared plans of the last regions written by [`NDBuffer::write_region`], most
/// recently used first, at most `capacity` of them (shared between threads).
///
/// ```
/// use gpubuf_buffer::{ndarray::array, NDBuffer, RegionPlans};
/// use gpubuf_cpu::CpuBackend;
///
/// let cpu = CpuBackend::new();
/// let plans = RegionPlans::new();
/// let a = NDBuffer::<_, i32>::zeros(&cpu, &[3, 4])?;
/// // Columns 1 to 3 of every row: a strided view, written by one plan.
/// let cols = a.transpose(None)?.slice(&[1..4, 0..3])?.transpose(None)?;
/// cols.write_region(array![[1, 2, 3], [4, 5, 6], [7, 8, 9]].view(), &plans)?;
/// assert_eq!(a.to_vec()?, vec![0, 1, 2, 3, 0, 4, 5, 6, 0, 7, 8, 9]);
/// assert_eq!(plans.len(), 1);
/// # Ok::<(), gpubuf_core::Error>(())
/// ```
pub struct RegionPlans<B: Kernels> {
    entries: Mutex<Vec<Entry<B>>>,
    capacity: usize,
}

impl<B: Kernels> std::fmt::Debug for RegionPlans<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegionPlans").field("len", &self.len()).field("capacity", &self.capacity).finish()
    }
}

impl<B: Kernels> Default for RegionPlans<B> {
    fn default() -> Self {
        Self::new()
    }
}

impl<B: Kernels> RegionPlans<B> {
    /// Plans kept by [`RegionPlans::new`].
    pub const DEFAULT_CAPACITY: usize = 16;

    /// An empty cache of [`RegionPlans::DEFAULT_CAPACITY`] plans.
    pub const fn new() -> Self {
        Self::with_capacity(Self::DEFAULT_CAPACITY)
    }

    /// An empty cache of at most `capacity` plans (0 keeps none: every write prepares its
    /// plan afresh).
    pub const fn with_capacity(capacity: usize) -> Self {
        RegionPlans { entries: Mutex::new(Vec::new()), capacity }
    }

    /// The plans held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no plan is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most plans held.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Drops every plan.
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Entry<B>>> {
        // A panic while the lock was held leaves a list of complete entries: still valid.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn cached(&self, device: &B, key: &Key) -> Option<Prepared<B::Plan>> {
        let mut entries = self.lock();
        let at = entries.iter().position(|(d, k, _)| k == key && d.same_device(device))?;
        let hit = entries.remove(at);
        let plan = hit.2.clone();
        entries.insert(0, hit);
        Some(plan)
    }

    fn keep(&self, device: &B, key: Key, plan: Prepared<B::Plan>) {
        if self.capacity == 0 {
            return;
        }
        let mut entries = self.lock();
        entries.insert(0, (device.clone(), key, plan));
        entries.truncate(self.capacity);
    }
}

impl<B: Kernels, T: Element> NDBuffer<B, T> {
    /// Writes the host array `host` (this view's shape, any layout) into this view, which
    /// may be strided, flipped or transposed: see the [module docs](crate::region). A
    /// non-contiguous view is written through a fresh C-order staging array and a plan
    /// from `plans`.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when the shapes differ; [`Error::InvalidPlan`] when the view
    /// addresses an element twice (a broadcast); [`Error::OutOfMemory`] when the host
    /// cannot hold a gathered copy of a strided `host`; allocation, plan and driver errors.
    pub fn write_region<D: Dimension>(
        &self,
        host: ArrayView<'_, T, D>,
        plans: &RegionPlans<B>,
    ) -> Result<()> {
        self.write_region_with(host, plans, |shape| NDBuffer::empty(self.backend(), shape, Order::C))
    }

    /// [`NDBuffer::write_region`] with the staging array from `staging` (called with this
    /// view's shape, at most once, only for a non-contiguous view): for instance a pool's
    /// `empty`. It must return a C-contiguous array of that shape on this device.
    ///
    /// # Errors
    /// As [`NDBuffer::write_region`]; [`Error::InvalidArgument`] for a staging array of
    /// another shape or layout, [`Error::DeviceMismatch`] for one on another device; the
    /// errors of `staging`.
    pub fn write_region_with<D: Dimension>(
        &self,
        host: ArrayView<'_, T, D>,
        plans: &RegionPlans<B>,
        staging: impl FnOnce(&[usize]) -> Result<NDBuffer<B, T>>,
    ) -> Result<()> {
        if self.shape() != host.shape() {
            return Err(Error::ShapeMismatch { expected: self.shape().to_vec(), got: host.shape().to_vec() });
        }
        if self.size() == 0 {
            return Ok(());
        }
        let host = host.into_dyn();
        let gathered;
        let dense = if host.is_standard_layout() {
            host
        } else {
            gathered = c_order_vec(&host)?;
            ArrayView::from_shape(IxDyn(host.shape()), &gathered)
                .map_err(|e| Error::invalid(e.to_string()))?
        };
        if self.is_c_contiguous() {
            return self.write_ndarray(dense);
        }
        let staging = staging(self.shape())?;
        if !staging.backend().same_device(self.backend()) {
            return Err(Error::DeviceMismatch("the staging array is on another device".into()));
        }
        let Some(staged) = staging.dense_bytes().filter(|_| staging.shape() == self.shape()) else {
            return Err(Error::invalid("the staging array is not C-contiguous of the region's shape"));
        };
        staging.write_ndarray(dense)?;
        let staged = staging.buffer.slice(staged)?;
        self.run_region_plan(plans, staged.memref())
    }

    /// Moves the C-order elements at `staged` (this view's size) into this non-empty view.
    fn run_region_plan(
        &self,
        plans: &RegionPlans<B>,
        staged: gpubuf_core::MemRef<'_, B::Memory>,
    ) -> Result<()> {
        let layout = self.layout();
        let span = layout.span()?.ok_or_else(|| Error::invalid("an empty region has no plan"))?;
        // Element [0, ..] of a non-empty view lies in its span.
        let first =
            layout.offset().checked_sub(span.start).ok_or_else(|| Error::invalid("the region's span"))?;
        let key = Key {
            dtype: T::DTYPE,
            shape: layout.shape().to_vec(),
            strides: layout.strides().to_vec(),
            first,
            span: span.len(),
        };
        let device = self.backend();
        let plan = match plans.cached(device, &key) {
            Some(p) => p,
            None => {
                let relative = layout.clone().with_offset(first);
                let p = match row_plan(&relative, span.len())? {
                    Some(plan) => Prepared::Gather(Arc::new(device.prepare(&plan, T::DTYPE)?)),
                    None => {
                        let segments = Segment::from_layout(0, &relative, 0)?;
                        let plan = CopyPlan::new(vec![span.len()], self.size(), segments)?;
                        plan.check_scatter()?;
                        Prepared::Scatter(Arc::new(device.prepare(&plan, T::DTYPE)?))
                    }
                };
                plans.keep(device, key, p.clone());
                p
            }
        };
        let size = T::DTYPE.size();
        let bytes =
            |n: usize| n.checked_mul(size).ok_or_else(|| Error::invalid("the region's span overflows"));
        let dst = self.buffer.slice(bytes(span.start)?..bytes(span.end)?)?;
        let stream = device.default_stream();
        match plan {
            Prepared::Gather(p) => device.gather(stream, &p, &[staged], dst.memref()),
            Prepared::Scatter(p) => device.scatter(stream, &p, staged, &[dst.memref()]),
        }
    }
}

/// The region `layout` (non-empty, in a storage of `storage_len` elements) as a gather
/// plan from a C-order staging array (source 0) into the storage (the buffer): one
/// segment per row, a row being the innermost axes the region holds densely (stride 1).
/// A gather's buffer ranges are checked disjoint per segment, where a scatter checks every
/// element. `None` when the innermost stride is not 1 or rows are shorter than [`MIN_ROW`].
fn row_plan(layout: &Layout, storage_len: usize) -> Result<Option<CopyPlan>> {
    let (shape, strides) = (layout.shape(), layout.strides());
    if shape.is_empty() || strides.last() != Some(&1) {
        return Ok(None);
    }
    // Fold the innermost axes that are contiguous with each other into one row.
    let mut inner = shape.len() - 1;
    let mut row = shape[inner];
    while inner > 0 && isize::try_from(row).ok() == Some(strides[inner - 1]) {
        inner -= 1;
        row = row.checked_mul(shape[inner]).ok_or_else(|| Error::invalid("row length"))?;
    }
    if row < MIN_ROW {
        return Ok(None);
    }
    let outer = &shape[..inner];
    let overflow = || Error::invalid("the region's offsets do not fit");
    let rows = outer.iter().try_fold(1usize, |n, &e| n.checked_mul(e)).ok_or_else(overflow)?;
    let mut segments = Vec::with_capacity(rows);
    let mut index = vec![0usize; outer.len()];
    for r in 0..rows {
        let mut at = isize::try_from(layout.offset()).map_err(|_| overflow())?;
        for (k, &i) in index.iter().enumerate() {
            let step =
                isize::try_from(i).ok().and_then(|i| i.checked_mul(strides[k])).ok_or_else(overflow)?;
            at = at.checked_add(step).ok_or_else(overflow)?;
        }
        let dst = usize::try_from(at).map_err(|_| overflow())?;
        let src = r.checked_mul(row).ok_or_else(overflow)?;
        segments.push(Segment::new(0, src, &[(row, 1)], dst)?);
        for k in (0..outer.len()).rev() {
            index[k] += 1;
            if index[k] < outer[k] {
                break;
            }
            index[k] = 0;
        }
    }
    let staged = rows.checked_mul(row).ok_or_else(overflow)?;
    CopyPlan::new(vec![staged], storage_len, segments).map(Some)
}

#[cfg(test)]
#[path = "region_tests.rs"]
mod tests;
