//! Pinned host staging for host<->device copies.
//!
//! Pageable host memory cannot be copied asynchronously by the DMA engines. Copies larger
//! than [`DIRECT_BELOW`] go through two pinned halves, alternately: while one half's
//! transfer runs, the host fills (or drains) the other. A write returns as soon as the
//! caller's bytes are in pinned memory; the device-side copy stays ordered on the stream.
//!
//! The pinned block has a fixed size (two halves of 4 MiB), allocated once per backend on
//! the first large copy: no user number reaches `cuMemHostAlloc`, so a huge copy is split
//! into halves rather than asking the driver for pinned memory of its size.

use crate::error::{driver, maybe_oom};
use crate::memory::CudaEvent;
use cudarc::driver::sys::{CUdeviceptr, CUevent_flags, CUstream};
use cudarc::driver::{result, CudaContext};
use gpubuf_core::Result;
use std::sync::Arc;

/// Copies smaller than this go straight from or to the caller's memory.
pub(crate) const DIRECT_BELOW: usize = 256 * 1024;
/// Bytes per staging half.
const HALF: usize = 4 * 1024 * 1024;

pub(crate) struct Staging {
    host: *mut u8,
    events: [Option<CudaEvent>; 2],
    ctx: Arc<CudaContext>,
}

// SAFETY: the pinned block is owned here and only touched under the backend's lock.
unsafe impl Send for Staging {}

impl Staging {
    pub(crate) fn new(ctx: Arc<CudaContext>) -> Result<Self> {
        // SAFETY: allocates page-locked host memory of a fixed size.
        let host = unsafe { result::malloc_host(2 * HALF, 0) }
            .map_err(|e| maybe_oom(e, "cuMemHostAlloc", 2 * HALF))?;
        Ok(Staging { host: host as *mut u8, events: [None, None], ctx })
    }

    fn half(&mut self, i: usize) -> &mut [u8] {
        // SAFETY: `host` holds 2*HALF bytes; halves do not overlap; `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.host.add(i * HALF), HALF) }
    }

    /// Waits until the last transfer through half `i` has finished.
    fn wait(&mut self, i: usize) -> Result<()> {
        if let Some(ev) = self.events[i].take() {
            // SAFETY: a live event of our context.
            unsafe { result::event::synchronize(ev.raw) }.map_err(|e| driver(e, "cuEventSynchronize"))?;
        }
        Ok(())
    }

    fn record(&mut self, i: usize, stream: CUstream) -> Result<()> {
        let raw = result::event::create(CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map_err(|e| driver(e, "cuEventCreate"))?;
        let ev = CudaEvent::created(raw, self.ctx.clone());
        // SAFETY: a live event and stream of our context.
        unsafe { result::event::record(ev.raw, stream) }.map_err(|e| driver(e, "cuEventRecord"))?;
        self.events[i] = Some(ev);
        Ok(())
    }

    /// Host -> device through the pinned halves.
    pub(crate) fn write(&mut self, stream: CUstream, dst: CUdeviceptr, src: &[u8]) -> Result<()> {
        for (k, chunk) in src.chunks(HALF).enumerate() {
            let i = k % 2;
            self.wait(i)?;
            let half = &mut self.half(i)[..chunk.len()];
            half.copy_from_slice(chunk);
            let at = dst + (k * HALF) as u64;
            // SAFETY: `half` is pinned and stays untouched until the recorded event completes.
            unsafe { result::memcpy_htod_async(at, &*half, stream) }
                .map_err(|e| driver(e, "cuMemcpyHtoDAsync"))?;
            self.record(i, stream)?;
        }
        Ok(())
    }

    /// Device -> host through the pinned halves; returns when `dst` is filled.
    pub(crate) fn read(&mut self, stream: CUstream, src: CUdeviceptr, dst: &mut [u8]) -> Result<()> {
        let chunks: Vec<(usize, usize)> =
            (0..dst.len()).step_by(HALF).map(|at| (at, HALF.min(dst.len() - at))).collect();
        let issue = |st: &mut Self, k: usize| -> Result<()> {
            let (at, n) = chunks[k];
            let i = k % 2;
            st.wait(i)?;
            let half = &mut st.half(i)[..n];
            // SAFETY: `half` is pinned; it is read only after the recorded event completes.
            unsafe { result::memcpy_dtoh_async(half, src + at as u64, stream) }
                .map_err(|e| driver(e, "cuMemcpyDtoHAsync"))?;
            st.record(i, stream)
        };
        if !chunks.is_empty() {
            issue(self, 0)?;
        }
        for k in 0..chunks.len() {
            if k + 1 < chunks.len() {
                issue(self, k + 1)?;
            }
            let i = k % 2;
            self.wait(i)?;
            let (at, n) = chunks[k];
            dst[at..at + n].copy_from_slice(&self.half(i)[..n]);
        }
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        let _ = self.wait(0);
        let _ = self.wait(1);
        // SAFETY: allocated by `malloc_host`, freed once, after its transfers completed.
        let _ = unsafe { result::free_host(self.host as *mut std::ffi::c_void) };
    }
}
