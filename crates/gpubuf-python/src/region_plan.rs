//! The row gather of region uploads: a region whose rows (innermost axes held densely)
//! are long is written from its C-order staging array by a gather plan of one segment per
//! row, into the bytes the region spans. A gather's buffer ranges are checked disjoint per
//! segment, where a scatter checks every element written.
//!
//! The plan is relative to the region's span, so every region of one shape and strides
//! (the chunks zarr writes into one output array) has the same plan: prepared plans are
//! kept per device, the last [`CACHED`] used.

use gpubuf::{
    Backend as _, CopyPlan, DType, Device, Element, Error, Kernels, Layout, NDBuffer, Result, Segment,
};
use parking_lot::Mutex;
use std::sync::Arc;

/// Prepared plans kept.
pub const CACHED: usize = 16;

/// What a prepared plan depends on.
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

type Prepared = Arc<<Device as Kernels>::Plan>;

/// Most recently used first.
static PLANS: Mutex<Vec<(Device, Key, Prepared)>> = Mutex::new(Vec::new());

fn cached(device: &Device, key: &Key) -> Option<Prepared> {
    let mut plans = PLANS.lock();
    let at = plans.iter().position(|(d, k, _)| k == key && d.same_device(device))?;
    let hit = plans.remove(at);
    let plan = hit.2.clone();
    plans.insert(0, hit);
    Some(plan)
}

fn keep(device: &Device, key: Key, plan: Prepared) {
    let mut plans = PLANS.lock();
    plans.insert(0, (device.clone(), key, plan));
    plans.truncate(CACHED);
}

/// Writes `staging` (C order, the shape of `region`, same device) into `region` by one
/// row gather; false (nothing done) when the region's rows are not contiguous or too short.
///
/// # Errors
/// Plan, allocation and driver errors.
pub fn gather_rows<T: Element>(region: &NDBuffer<Device, T>, staging: &NDBuffer<Device, T>) -> Result<bool> {
    let layout = region.layout();
    let Some(span) = layout.span()? else { return Ok(true) };
    // Element [0, ..] of a non-empty view lies in its span.
    let first = layout.offset().checked_sub(span.start).ok_or_else(|| Error::invalid("the region's span"))?;
    let key = Key {
        dtype: T::DTYPE,
        shape: layout.shape().to_vec(),
        strides: layout.strides().to_vec(),
        first,
        span: span.len(),
    };
    let device = region.backend();
    let plan = match cached(device, &key) {
        Some(p) => p,
        None => {
            let Some(plan) = row_plan(&layout.clone().with_offset(first), span.len())? else {
                return Ok(false);
            };
            let p = Arc::new(device.prepare(&plan, T::DTYPE)?);
            keep(device, key, p.clone());
            p
        }
    };
    let size = T::DTYPE.size();
    let bytes = |n: usize| n.checked_mul(size).ok_or_else(|| Error::invalid("the region's span overflows"));
    let dst = region.buffer().slice(bytes(span.start)?..bytes(span.end)?)?;
    device.gather(device.default_stream(), &plan, &[staging.storage()], dst.memref())?;
    Ok(true)
}

/// Shortest row [`row_plan`] takes: shorter rows make a plan of more segments than it saves.
pub const MIN_ROW: usize = 64;

/// The region `layout` (non-empty, in a storage of `storage_len` elements) as a gather
/// plan from a C-order staging array (source 0) into the storage (the buffer): one
/// segment per row, a row being the innermost axes the region holds densely (stride 1).
/// A gather's buffer ranges are checked disjoint per segment, where a scatter checks every
/// element. `None` when the innermost stride is not 1 or rows are shorter than [`MIN_ROW`].
///
/// # Errors
/// [`Error::InvalidArgument`] when an offset overflows; plan errors.
pub fn row_plan(layout: &Layout, storage_len: usize) -> Result<Option<CopyPlan>> {
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
    let rows: usize = outer.iter().product();
    let overflow = || Error::invalid("the region's offsets do not fit");
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
