//! [`CudaBackend`]: the backend traits over one CUDA device.

use crate::device::{driver_available, info_of, selected_ordinal};
use crate::error::{driver, maybe_oom};
use crate::kernels::ModuleCache;
use crate::memory::{CudaEvent, CudaMemory, CudaStream, OwnedStream};
use crate::program::UserPrograms;
use crate::staging::{Staging, DIRECT_BELOW};
use cudarc::driver::sys::{CUdevice_attribute, CUevent_flags, CUresult};
use cudarc::driver::{result, CudaContext};
use gpubuf_core::{
    check_copy, check_fill, Allocator, Backend, BackendKind, DeviceInfo, Error, MemRef, MemoryInfo, Result,
};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A handle to one CUDA device (its primary context), with a default stream, pinned
/// staging memory and the NVRTC-built plan kernels. Clones share all of it.
#[derive(Clone)]
pub struct CudaBackend {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) info: DeviceInfo,
    pub(crate) stream_ordered: bool,
    pub(crate) modules: ModuleCache,
    pub(crate) user_programs: UserPrograms,
    staging: Mutex<Option<Staging>>,
    default_stream: CudaStream,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend").field("device", &self.inner.info.name).finish()
    }
}

impl CudaBackend {
    /// Opens the device named by [`crate::DEVICE_ENV`] (default 0).
    ///
    /// # Errors
    /// [`Error::BackendUnavailable`] when libcuda is missing or there is no device —
    /// checked before any call that could make cudarc panic; driver errors.
    pub fn new() -> Result<Self> {
        driver_available()?;
        let n = CudaContext::device_count().map_err(|e| driver(e, "cuDeviceGetCount"))?;
        Self::with_ordinal(selected_ordinal(n.max(0) as usize)?)
    }

    /// Opens device `ordinal`.
    ///
    /// # Errors
    /// As [`CudaBackend::new`].
    pub fn with_ordinal(ordinal: usize) -> Result<Self> {
        driver_available()?;
        let ctx = CudaContext::new(ordinal).map_err(|e| driver(e, "cuDevicePrimaryCtxRetain"))?;
        let info = info_of(&ctx)?;
        let pools =
            ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED).unwrap_or(0);
        let default_stream = new_stream(&ctx)?;
        Ok(CudaBackend {
            inner: Arc::new(Inner {
                ctx,
                info,
                stream_ordered: pools != 0,
                modules: ModuleCache::default(),
                user_programs: UserPrograms::default(),
                staging: Mutex::new(None),
                default_stream,
            }),
        })
    }

    /// Binds the context to the calling thread (every driver call needs it current).
    pub(crate) fn bind(&self) -> Result<()> {
        self.inner.ctx.bind_to_thread().map_err(|e| driver(e, "cuCtxSetCurrent"))
    }

    /// The cudarc context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.inner.ctx
    }

    fn with_staging<R>(&self, f: impl FnOnce(&mut Staging) -> Result<R>) -> Result<R> {
        let mut s = self.inner.staging.lock();
        if s.is_none() {
            *s = Some(Staging::new(self.inner.ctx.clone())?);
        }
        match s.as_mut() {
            Some(st) => f(st),
            None => Err(Error::invalid("staging memory missing")),
        }
    }
}

fn new_stream(ctx: &Arc<CudaContext>) -> Result<CudaStream> {
    ctx.bind_to_thread().map_err(|e| driver(e, "cuCtxSetCurrent"))?;
    let raw = result::stream::create(result::stream::StreamKind::Default)
        .map_err(|e| driver(e, "cuStreamCreate"))?;
    Ok(CudaStream {
        raw,
        id: next_stream_id(),
        owner: Arc::new(OwnedStream { raw, ctx: ctx.clone(), cudarc: None }),
    })
}

/// Identities of streams: process-wide and never reused.
static NEXT_STREAM_ID: AtomicU64 = AtomicU64::new(1);

/// A new stream identity (a u64 counter does not wrap in any process's lifetime).
pub(crate) fn next_stream_id() -> u64 {
    NEXT_STREAM_ID.fetch_add(1, Ordering::Relaxed)
}

impl Allocator for CudaBackend {
    type Memory = CudaMemory;

    fn allocate(&self, bytes: usize) -> Result<CudaMemory> {
        let ctx = self.inner.ctx.clone();
        if bytes == 0 {
            return Ok(CudaMemory::allocated(0, 0, false, ctx));
        }
        self.bind()?;
        let ordered = self.inner.stream_ordered;
        // SAFETY: a non-zero size; the context is current.
        let ptr = unsafe {
            if ordered {
                result::malloc_async(result::stream::null(), bytes)
            } else {
                result::malloc_sync(bytes)
            }
        }
        .map_err(|e| maybe_oom(e, "cuMemAlloc", bytes))?;
        Ok(CudaMemory::allocated(ptr, bytes, ordered, ctx))
    }

    fn allocate_immediate(&self, bytes: usize) -> Result<CudaMemory> {
        // CUDA backs allocations when they are made; wait for a stream-ordered one.
        let m = self.allocate(bytes)?;
        if m.stream_ordered() {
            // SAFETY: the legacy default stream of the current context.
            unsafe { result::stream::synchronize(result::stream::null()) }
                .map_err(|e| maybe_oom(e, "cuStreamSynchronize", bytes))?;
        }
        Ok(m)
    }

    fn memory_info(&self) -> Option<MemoryInfo> {
        let (free, total) = self.inner.ctx.mem_get_info().ok()?;
        Some(MemoryInfo { free: free as u64, total: total as u64 })
    }
}

impl Backend for CudaBackend {
    type Stream = CudaStream;
    type Event = CudaEvent;
    const KIND: BackendKind = BackendKind::Cuda;

    fn info(&self) -> DeviceInfo {
        self.inner.info.clone()
    }

    fn same_device(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner.ctx, &other.inner.ctx)
            || self.inner.ctx.ordinal() == other.inner.ctx.ordinal()
    }

    fn default_stream(&self) -> &CudaStream {
        &self.inner.default_stream
    }

    fn stream_id(&self, stream: &CudaStream) -> u64 {
        stream.id
    }

    fn new_stream(&self) -> Result<CudaStream> {
        new_stream(&self.inner.ctx)
    }

    fn write(&self, stream: &CudaStream, dst: &CudaMemory, offset: usize, src: &[u8]) -> Result<()> {
        MemRef::new(dst, offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        let _span = tracing::trace_span!("cuda.write", bytes = src.len()).entered();
        self.bind()?;
        let at = dst.ptr + offset as u64;
        if src.len() < DIRECT_BELOW {
            // SAFETY: range checked; from pageable memory the driver stages the bytes
            // before returning, so `src` may be reused at once.
            return unsafe { result::memcpy_htod_async(at, src, stream.raw) }
                .map_err(|e| driver(e, "cuMemcpyHtoDAsync"));
        }
        self.with_staging(|s| s.write(stream.raw, at, src))
    }

    fn read(&self, stream: &CudaStream, src: &CudaMemory, offset: usize, dst: &mut [u8]) -> Result<()> {
        MemRef::new(src, offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        let _span = tracing::trace_span!("cuda.read", bytes = dst.len()).entered();
        self.bind()?;
        let at = src.ptr + offset as u64;
        if dst.len() < DIRECT_BELOW {
            // SAFETY: range checked; the stream is synchronised before `dst` is released.
            unsafe {
                result::memcpy_dtoh_async(dst, at, stream.raw).map_err(|e| driver(e, "cuMemcpyDtoHAsync"))?;
                return result::stream::synchronize(stream.raw).map_err(|e| driver(e, "cuStreamSynchronize"));
            }
        }
        self.with_staging(|s| s.read(stream.raw, at, dst))
    }

    fn copy(
        &self,
        stream: &CudaStream,
        src: MemRef<'_, CudaMemory>,
        dst: &CudaMemory,
        dst_offset: usize,
    ) -> Result<()> {
        check_copy(&src, dst, dst_offset)?;
        if src.len == 0 {
            return Ok(());
        }
        let _span = tracing::trace_span!("cuda.copy", bytes = src.len).entered();
        self.bind()?;
        // SAFETY: both ranges checked inside live allocations and disjoint.
        unsafe {
            result::memcpy_dtod_async(
                dst.ptr + dst_offset as u64,
                src.memory.ptr + src.offset as u64,
                src.len,
                stream.raw,
            )
        }
        .map_err(|e| driver(e, "cuMemcpyDtoDAsync"))
    }

    fn fill(&self, stream: &CudaStream, dst: MemRef<'_, CudaMemory>, pattern: &[u8]) -> Result<()> {
        check_fill(&dst, pattern)?;
        if dst.len == 0 {
            return Ok(());
        }
        let _span = tracing::trace_span!("cuda.fill", bytes = dst.len).entered();
        self.bind()?;
        let at = dst.memory.ptr + dst.offset as u64;
        if pattern.iter().all(|&b| b == pattern[0]) {
            // SAFETY: range checked inside a live allocation.
            return unsafe { result::memset_d8_async(at, pattern[0], dst.len, stream.raw) }
                .map_err(|e| driver(e, "cuMemsetD8Async"));
        }
        // Multi-byte patterns: write one copy, then double it device-to-device.
        let p = pattern.len();
        self.write(stream, dst.memory, dst.offset, pattern)?;
        let mut done = p;
        while done < dst.len {
            let n = done.min(dst.len - done);
            // SAFETY: source [0, n) and destination [done, done + n) lie inside the range
            // and do not overlap (n <= done).
            unsafe { result::memcpy_dtod_async(at + done as u64, at, n, stream.raw) }
                .map_err(|e| driver(e, "cuMemcpyDtoDAsync"))?;
            done += n;
        }
        Ok(())
    }

    fn record_event(&self, stream: &CudaStream) -> Result<CudaEvent> {
        self.bind()?;
        let raw = result::event::create(CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map_err(|e| driver(e, "cuEventCreate"))?;
        let ev = CudaEvent::created(raw, self.inner.ctx.clone());
        // SAFETY: a live event and stream of this context.
        unsafe { result::event::record(ev.raw, stream.raw) }.map_err(|e| driver(e, "cuEventRecord"))?;
        Ok(ev)
    }

    fn event_complete(&self, event: &CudaEvent) -> Result<bool> {
        self.bind()?;
        // SAFETY: a live event of this context.
        match unsafe { result::event::query(event.raw) } {
            Ok(()) => Ok(true),
            Err(e) if e.0 == CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            Err(e) => Err(driver(e, "cuEventQuery")),
        }
    }

    fn wait_event(&self, event: &CudaEvent) -> Result<()> {
        self.bind()?;
        // SAFETY: a live event of this context.
        unsafe { result::event::synchronize(event.raw) }.map_err(|e| driver(e, "cuEventSynchronize"))
    }

    fn stream_wait(&self, stream: &CudaStream, event: &CudaEvent) -> Result<()> {
        self.bind()?;
        // SAFETY: a live stream and event of this context.
        unsafe {
            result::stream::wait_event(
                stream.raw,
                event.raw,
                cudarc::driver::sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
        .map_err(|e| driver(e, "cuStreamWaitEvent"))
    }

    fn synchronize(&self, stream: &CudaStream) -> Result<()> {
        self.bind()?;
        // SAFETY: a live stream of this context.
        unsafe { result::stream::synchronize(stream.raw) }.map_err(|e| maybe_oom(e, "cuStreamSynchronize", 0))
    }
}
