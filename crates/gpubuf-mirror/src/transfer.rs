//! The two directions of a [`Mirror`]: [`Mirror::sync`] (host to device) and
//! [`Mirror::mark_device_dirty`] + [`Mirror::download`] (device to host).

use crate::mirror::{as_bytes, EXACT};
use crate::ranges::RangeSet;
use crate::view::View;
use crate::Mirror;
use gpubuf_buffer::Buffer;
use gpubuf_core::{CopyPlan, DType, Element, Kernels, MemRef, Result, Segment};
use std::ops::Range;

/// What one [`Mirror::sync`] or [`Mirror::download`] moved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transfer {
    /// The byte ranges moved.
    pub ranges: Vec<Range<usize>>,
    /// Bytes moved.
    pub bytes: usize,
    /// Copy commands issued (one per range, or two past 16 ranges: a staging copy and one
    /// copy-plan launch).
    pub commands: usize,
}

/// Ranges above this count move as one staging copy plus one copy-plan launch.
const PLAN_ABOVE: usize = 16;

/// One u8 plan segment per range, packed one after the other in a staging buffer.
fn packed_plan(ranges: &[Range<usize>], array_len: usize, total: usize) -> Result<CopyPlan> {
    let mut segments = Vec::with_capacity(ranges.len());
    let mut at = 0;
    for r in ranges {
        segments.push(Segment::new(0, r.start, &[(r.len(), 1)], at)?);
        at += r.len();
    }
    CopyPlan::new(vec![array_len], total, segments)
}

impl<B: Kernels, T: Element> Mirror<B, T> {
    /// Makes the mirror's stream wait for the work queued on the default stream so far
    /// (nothing when they are one stream): the device array's `NDBuffer` operations and the
    /// user's launches on it run there, as do the staging buffers' initial writes.
    fn after_default_stream(&self) -> Result<()> {
        let b = self.device.backend();
        let d = b.default_stream();
        if b.stream_id(d) == b.stream_id(&self.stream) {
            return Ok(());
        }
        let queued = b.record_event(d)?;
        b.stream_wait(&self.stream, &queued)
    }

    /// Makes the default stream wait for the work queued so far on the mirror's stream
    /// (nothing when they are one stream).
    fn before_default_stream(&self) -> Result<()> {
        let b = self.device.backend();
        let d = b.default_stream();
        if b.stream_id(d) == b.stream_id(&self.stream) {
            return Ok(());
        }
        let queued = b.record_event(&self.stream)?;
        b.stream_wait(d, &queued)
    }

    /// Uploads the host bytes of `ranges` (disjoint, inside the array).
    fn upload(&self, ranges: &[Range<usize>]) -> Result<usize> {
        let b = self.device.backend().clone();
        let mem = self.device.buffer().memory().clone();
        let base = self.device.buffer().offset();
        let host = as_bytes(&self.host);
        if ranges.len() <= PLAN_ABOVE {
            if !ranges.is_empty() {
                self.after_default_stream()?;
            }
            for r in ranges {
                b.write(&self.stream, &mem, base + r.start, &host[r.clone()])?;
            }
            if !ranges.is_empty() {
                // A blocking write may still be queued on the device: later work on the
                // default stream reads what it wrote.
                self.before_default_stream()?;
            }
            return Ok(ranges.len());
        }
        let total = ranges.iter().map(|r| r.len()).sum();
        let mut staged = Vec::with_capacity(total);
        for r in ranges {
            staged.extend_from_slice(&host[r.clone()]);
        }
        let staging = Buffer::from_bytes(&b, &staged)?;
        let plan = b.prepare(&packed_plan(ranges, self.device.buffer().len(), total)?, DType::U8)?;
        let target = MemRef { memory: &*mem, offset: base, len: self.device.buffer().len() };
        self.after_default_stream()?;
        b.scatter(&self.stream, &plan, staging.memref(), &[target])?;
        b.synchronize(&self.stream)?;
        Ok(2)
    }

    /// Uploads the pending ranges and clears them: one write per range, or, past 16
    /// ranges, the ranges packed into one staging upload and scattered in place by one
    /// copy-plan launch. Bytes marked with [`Mirror::mark_device_dirty`] and not yet
    /// downloaded are never uploaded: pending ranges (widened by the policy) are split
    /// around them. The returned [`Transfer`] lists the ranges actually uploaded.
    ///
    /// # Errors
    /// Allocation and transfer errors. On error the pending ranges stay pending (some of
    /// them may already be on the device: uploading them again is harmless).
    pub fn sync(&mut self) -> Result<Transfer> {
        let ranges = self.pending.difference(&self.device_dirty);
        let total: usize = ranges.iter().map(|r| r.len()).sum();
        let _span = tracing::debug_span!("mirror.sync", ranges = ranges.len(), bytes = total).entered();
        let commands = self.upload(&ranges)?;
        self.pending.clear();
        Ok(Transfer { ranges, bytes: total, commands })
    }

    /// Uploads the whole array (what a mirror without tracking does), for comparison;
    /// bytes marked with [`Mirror::mark_device_dirty`] and not downloaded are left alone,
    /// as by [`Mirror::sync`].
    ///
    /// # Errors
    /// As [`Mirror::sync`].
    pub fn upload_all(&mut self) -> Result<Transfer> {
        let mut whole = RangeSet::default();
        whole.insert(0..as_bytes(&self.host).len(), EXACT);
        let ranges = whole.difference(&self.device_dirty);
        let commands = self.upload(&ranges)?;
        self.pending.clear();
        let bytes = ranges.iter().map(|r| r.len()).sum();
        Ok(Transfer { ranges, bytes, commands })
    }

    /// Records that device work changed the bytes of `view`, for [`Mirror::download`].
    /// The bytes are kept exact (the policy does not widen them). Host writes to those
    /// bytes that were not uploaded yet are dropped: the device's bytes win, since its work
    /// came later.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`](gpubuf_core::Error::ShapeMismatch) for a view of another
    /// array; [`Error::OutOfBounds`](gpubuf_core::Error::OutOfBounds) when it does not
    /// fit. On error nothing is marked.
    pub fn mark_device_dirty(&mut self, view: &View) -> Result<()> {
        for r in self.check_view(view)? {
            self.pending.remove(r.clone());
            self.device_dirty.insert(r, EXACT);
        }
        Ok(())
    }

    /// Downloads the ranges marked with [`Mirror::mark_device_dirty`] into the host array
    /// and forgets them (one read per range, or, past 16 ranges, one copy-plan gather into
    /// a staging buffer and one read). Any pending range over those bytes can only be the
    /// policy's widening, and is dropped for them.
    ///
    /// # Errors
    /// Allocation and transfer errors. On error every range stays marked; host bytes inside
    /// them may already hold the device's values (they were stale before).
    pub fn download(&mut self) -> Result<Transfer> {
        let ranges = self.device_dirty.ranges();
        let total: usize = ranges.iter().map(|r| r.len()).sum();
        let _span = tracing::debug_span!("mirror.download", ranges = ranges.len(), bytes = total).entered();
        let b = self.device.backend().clone();
        let mem = self.device.buffer().memory().clone();
        let base = self.device.buffer().offset();
        let array_len = self.device.buffer().len();
        // Made before the ordering: its initial write runs on the default stream.
        let staging = if ranges.len() > PLAN_ABOVE { Some(Buffer::empty(&b, total)?) } else { None };
        if !ranges.is_empty() {
            self.after_default_stream()?;
        }
        let bytes: &mut [u8] =
            bytemuck::cast_slice_mut(self.host.as_slice_memory_order_mut().unwrap_or(&mut []));
        let commands = match staging {
            None => {
                for r in &ranges {
                    b.read(&self.stream, &mem, base + r.start, &mut bytes[r.clone()])?;
                }
                ranges.len()
            }
            Some(staging) => {
                let plan = b.prepare(&packed_plan(&ranges, array_len, total)?, DType::U8)?;
                let source = MemRef { memory: &*mem, offset: base, len: array_len };
                b.gather(&self.stream, &plan, &[source], staging.memref())?;
                let mut staged = vec![0u8; total];
                b.read(&self.stream, staging.memory(), staging.offset(), &mut staged)?;
                let mut at = 0;
                for r in &ranges {
                    bytes[r.clone()].copy_from_slice(&staged[at..at + r.len()]);
                    at += r.len();
                }
                2
            }
        };
        for r in &ranges {
            self.pending.remove(r.clone());
        }
        self.device_dirty.clear();
        Ok(Transfer { ranges, bytes: total, commands })
    }
}
