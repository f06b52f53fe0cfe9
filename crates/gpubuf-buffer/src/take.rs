//! Integer-array indexing on the device: [`NDBuffer::take`] gathers the elements at a list
//! of flat indices (numpy's `a.flat[indices]`, what orthogonal, coordinate and mask
//! selections come down to) and [`NDBuffer::put`] scatters values to them (numpy's
//! `a.flat[indices] = values`: the last of repeated indices wins). Both are one copy plan
//! launch: runs of indices that step through memory evenly become one segment each.

use crate::NDBuffer;
use gpubuf_core::{CopyPlan, Element, Error, Kernels, Order, Result, Segment};

/// One segment per run: `(storage offset of the first, count, stride, buffer position)`.
type Run = (usize, usize, isize, usize);

impl<B: Kernels, T: Element> NDBuffer<B, T> {
    /// The storage offset of the element at C-order flat index `flat`.
    fn flat_offset(&self, flat: usize) -> Result<usize> {
        if flat >= self.size() {
            return Err(Error::OutOfBounds {
                what: "flat index".into(),
                start: flat,
                end: flat.saturating_add(1),
                len: self.size(),
            });
        }
        let mut rest = flat;
        let mut at = self.layout().offset() as i128;
        for (&n, &s) in self.shape().iter().zip(self.strides()).rev() {
            at += (rest % n) as i128 * s as i128;
            rest /= n;
        }
        usize::try_from(at).map_err(|_| Error::invalid("an element offset below the storage"))
    }

    /// Runs of `(position in the buffer, storage offset)` pairs, in order: consecutive
    /// positions whose offsets step evenly share a segment.
    fn runs(pairs: impl Iterator<Item = (usize, usize)>) -> Vec<Run> {
        let mut runs: Vec<Run> = Vec::new();
        for (pos, off) in pairs {
            if let Some(last) = runs.last_mut() {
                let (first, count, stride, start) = *last;
                let next_pos = start + count == pos;
                let step = off as isize - (first as isize + stride * (count as isize - 1));
                if next_pos && count == 1 && step != 0 {
                    *last = (first, 2, step, start);
                    continue;
                }
                if next_pos && count > 1 && step == stride {
                    last.1 += 1;
                    continue;
                }
            }
            runs.push((off, 1, 1, pos));
        }
        runs
    }

    fn plan_of(&self, runs: &[Run], buffer_len: usize) -> Result<CopyPlan> {
        let len = self.buffer().len() / T::DTYPE.size();
        let segments = runs
            .iter()
            .map(|&(off, n, stride, pos)| Segment::new(0, off, &[(n, stride)], pos))
            .collect::<Result<Vec<_>>>()?;
        CopyPlan::new(vec![len], buffer_len, segments)
    }

    /// A new 1-d C-contiguous array of the elements at `indices` (C-order flat indices
    /// into this array, in any order, repeats allowed), gathered on the device in one
    /// launch. Reshape it to the selection's shape.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] for an index past the array's size (nothing is allocated);
    /// allocation and driver errors.
    pub fn take(&self, indices: &[usize]) -> Result<Self> {
        let offsets = indices.iter().map(|&i| self.flat_offset(i)).collect::<Result<Vec<_>>>()?;
        let out = Self::empty(self.backend(), &[indices.len()], Order::C)?;
        if indices.is_empty() {
            return Ok(out);
        }
        let plan = self.plan_of(&Self::runs(offsets.into_iter().enumerate()), indices.len())?;
        let b = self.backend();
        let _span = tracing::trace_span!("ndbuffer.take", elements = indices.len()).entered();
        let plan = b.prepare(&plan, T::DTYPE)?;
        b.gather(b.default_stream(), &plan, &[self.storage()], out.storage())?;
        Ok(out)
    }

    /// Writes `values[k]` to the element at flat index `indices[k]` (C order), on the
    /// device in one launch; of repeated indices the last one's value is written, as numpy
    /// assigns. `values` is a 1-d array of `indices.len()` elements on this backend (a view
    /// is copied to contiguous first); a value that shares this array's memory is copied
    /// first too.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] for an index past the array's size and
    /// [`Error::ShapeMismatch`] for another number of values (nothing is written in either
    /// case); allocation and driver errors.
    pub fn put(&self, indices: &[usize], values: &NDBuffer<B, T>) -> Result<()> {
        if values.shape() != [indices.len()] {
            return Err(Error::ShapeMismatch { expected: vec![indices.len()], got: values.shape().to_vec() });
        }
        let offsets = indices.iter().map(|&i| self.flat_offset(i)).collect::<Result<Vec<_>>>()?;
        if indices.is_empty() {
            return Ok(());
        }
        // The last occurrence of each offset wins: keep positions whose offset does not
        // come again later.
        let mut seen = std::collections::HashSet::with_capacity(offsets.len());
        let mut keep = vec![false; offsets.len()];
        for (k, off) in offsets.iter().enumerate().rev() {
            keep[k] = seen.insert(*off);
        }
        let shares = values.buffer().memref().overlaps(&self.storage());
        let values = if values.is_c_contiguous() && !shares { values.clone() } else { values.copy()? };
        let runs = Self::runs(offsets.into_iter().enumerate().filter(|(k, _)| keep[*k]));
        // The plan reads the values from their view's first element on.
        let first = values.layout().offset();
        let runs: Vec<Run> = runs.into_iter().map(|(o, n, s, p)| (o, n, s, p + first)).collect();
        let plan = self.plan_of(&runs, values.buffer().len() / T::DTYPE.size())?;
        plan.check_scatter()?;
        let b = self.backend();
        let _span = tracing::trace_span!("ndbuffer.put", elements = indices.len()).entered();
        let plan = b.prepare(&plan, T::DTYPE)?;
        b.scatter(b.default_stream(), &plan, values.storage(), &[self.storage()])
    }
}
