//! [`CudaBackend`]: the backend traits over one CUDA device.

use crate::device::{attribute, device_info, driver_available, selected_ordinal};
use crate::error::{alloc_error, check_request, driver, maybe_oom};
use crate::kernels::ModuleCache;
use crate::memory::{CudaEvent, CudaMemory, CudaStream, OwnedStream, Owner};
use crate::order::{Ready, StreamSet};
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
/// staging memory and the plan kernels (embedded images, see [`crate::aot`]). Clones share all of it.
#[derive(Clone)]
pub struct CudaBackend {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) ctx: Arc<CudaContext>,
    /// The device's description; `total_memory` (`cuDeviceTotalMem`, queried once) bounds
    /// every allocation request.
    pub(crate) info: DeviceInfo,
    pub(crate) stream_ordered: bool,
    /// The context's gpubuf streams (shared with every backend handle of the context).
    pub(crate) streams: Arc<StreamSet>,
    pub(crate) modules: ModuleCache,
    pub(crate) user_programs: UserPrograms,
    staging: Mutex<Option<Staging>>,
    default_stream: CudaStream,
    /// The fork generation the device was opened in (`gpubuf_core::process`): a forked
    /// child is refused before it calls the driver.
    forks: u64,
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

    /// Opens device `ordinal` (retains its primary context). The device's description,
    /// total memory included, is read once here.
    ///
    /// # Errors
    /// As [`CudaBackend::new`]; [`Error::InvalidArgument`] for an ordinal past the devices.
    pub fn with_ordinal(ordinal: usize) -> Result<Self> {
        let forks = gpubuf_core::process::generation();
        driver_available()?;
        let n = CudaContext::device_count().map_err(|e| driver(e, "cuDeviceGetCount"))?;
        if ordinal >= n.max(0) as usize {
            return Err(Error::invalid(format!(
                "CUDA device ordinal {ordinal}: the driver has {n} device(s)"
            )));
        }
        let info = device_info(ordinal)?;
        let ctx = CudaContext::new(ordinal).map_err(|e| driver(e, "cuDevicePrimaryCtxRetain"))?;
        let pools = attribute(
            ctx.cu_device(),
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
            "memory pools supported",
        )
        .unwrap_or(0);
        if pools != 0 {
            keep_pool_memory(ctx.cu_device());
        }
        let streams = StreamSet::of(&ctx);
        let default_stream = new_stream(&ctx, &streams)?;
        Ok(CudaBackend {
            inner: Arc::new(Inner {
                ctx,
                info,
                stream_ordered: pools != 0,
                streams,
                modules: ModuleCache::default(),
                user_programs: UserPrograms::default(),
                staging: Mutex::new(None),
                default_stream,
                forks,
            }),
        })
    }

    /// Binds the context to the calling thread (every driver call needs it current);
    /// refused in a child forked after the device was opened (the driver's state did not
    /// survive the fork: [`gpubuf_core::process`]).
    pub(crate) fn bind(&self) -> Result<()> {
        gpubuf_core::process::check_same_process(BackendKind::Cuda, self.inner.forks)?;
        self.inner.ctx.bind_to_thread().map_err(|e| driver(e, "cuCtxSetCurrent"))
    }

    /// The cudarc context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.inner.ctx
    }

    /// Allocates `bytes` bytes for work on `stream`: stream-ordered there where the device
    /// supports memory pools, so the allocation waits for no other stream; gpubuf's
    /// operations on other streams wait for it by themselves. Requests larger than the
    /// device's total memory are refused before the driver is asked.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] (naming the request, with the device's total as `available`)
    /// for a request past the device's total memory or one the driver cannot meet (out of
    /// memory, or a size it refuses as invalid); [`Error::DeviceMismatch`] for a stream of
    /// another context; driver errors.
    pub fn allocate_on(&self, stream: &CudaStream, bytes: usize) -> Result<CudaMemory> {
        let inner = &*self.inner;
        self.own_stream(stream)?;
        let new = |ptr, owner, ready| {
            CudaMemory::new(ptr, bytes, owner, inner.ctx.clone(), inner.streams.clone(), ready)
        };
        if bytes == 0 {
            return Ok(new(0, Owner::Nothing, None));
        }
        let total = inner.info.total_memory;
        check_request(bytes, total)?;
        self.bind()?;
        if !inner.stream_ordered {
            // SAFETY: a non-zero size; the context is current.
            let ptr = unsafe { result::malloc_sync(bytes) }
                .map_err(|e| alloc_error(e, "cuMemAlloc", bytes, total))?;
            return Ok(new(ptr, Owner::Gpubuf { home: None }, None));
        }
        // SAFETY: a non-zero size; a live stream of the current context.
        let ptr = unsafe { result::malloc_async(stream.raw, bytes) }
            .map_err(|e| alloc_error(e, "cuMemAllocAsync", bytes, total))?;
        let home = Owner::Gpubuf { home: Some(stream.clone()) };
        match Ready::record(&inner.ctx, stream.id, stream.raw) {
            Ok(r) => Ok(new(ptr, home, Some(r))),
            Err(e) => {
                // Freed on `stream` again, after its allocation there.
                drop(new(ptr, home, None));
                Err(driver(e, "cuEventRecord"))
            }
        }
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

fn new_stream(ctx: &Arc<CudaContext>, streams: &Arc<StreamSet>) -> Result<CudaStream> {
    ctx.bind_to_thread().map_err(|e| driver(e, "cuCtxSetCurrent"))?;
    let raw = result::stream::create(result::stream::StreamKind::Default)
        .map_err(|e| driver(e, "cuStreamCreate"))?;
    let id = next_stream_id();
    // The owner destroys the stream (and takes it out of the set) on every path below.
    crate::owned::claim_stream(raw);
    let owner = Arc::new(OwnedStream { raw, id, ctx: ctx.clone(), streams: streams.clone(), cudarc: None });
    streams.register(id, raw)?;
    Ok(CudaStream { raw, id, owner })
}

/// Identities of streams: process-wide and never reused.
static NEXT_STREAM_ID: AtomicU64 = AtomicU64::new(1);

/// A new stream identity (a u64 counter does not wrap in any process's lifetime).
/// Sets the release threshold of the device's current memory pool (the one
/// `cuMemAllocAsync` draws from) to its maximum: with the driver's default of 0 every
/// synchronisation hands freed memory back to the system and the next stream-ordered
/// allocation maps it again. Memory freed by gpubuf then stays with the pool for the next
/// allocation of this process (`cuMemPoolTrimTo` gives it back). A driver that refuses
/// leaves the default, with a warning: allocations still work, only slower.
fn keep_pool_memory(device: cudarc::driver::sys::CUdevice) {
    use cudarc::driver::sys::{cuDeviceGetMemPool, cuMemPoolSetAttribute, CUmemPool_attribute, CUresult};
    let mut pool = std::mem::MaybeUninit::uninit();
    let mut threshold: u64 = u64::MAX;
    // SAFETY: `pool` is written by the driver before it is read (only on success);
    // `threshold` is the u64 (`cuuint64_t`) this attribute takes, alive for the call.
    let r = unsafe {
        match cuDeviceGetMemPool(pool.as_mut_ptr(), device) {
            CUresult::CUDA_SUCCESS => cuMemPoolSetAttribute(
                pool.assume_init(),
                CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut threshold as *mut u64).cast(),
            ),
            e => e,
        }
    };
    if r != CUresult::CUDA_SUCCESS {
        tracing::warn!(?r, "the CUDA memory pool keeps its release threshold");
    }
}

pub(crate) fn next_stream_id() -> u64 {
    NEXT_STREAM_ID.fetch_add(1, Ordering::Relaxed)
}

impl Allocator for CudaBackend {
    type Memory = CudaMemory;

    fn allocate(&self, bytes: usize) -> Result<CudaMemory> {
        self.allocate_on(&self.inner.default_stream, bytes)
    }

    fn allocate_immediate(&self, bytes: usize) -> Result<CudaMemory> {
        // CUDA backs allocations when they are made; wait for a stream-ordered one.
        let m = self.allocate(bytes)?;
        if let Some(r) = &m.ready {
            self.bind()?;
            r.wait().map_err(|e| maybe_oom(e, "cuEventSynchronize", bytes))?;
        }
        Ok(m)
    }

    fn memory_info(&self) -> Option<MemoryInfo> {
        self.bind().ok()?;
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
        self.bind()?;
        new_stream(&self.inner.ctx, &self.inner.streams)
    }

    fn write(&self, stream: &CudaStream, dst: &CudaMemory, offset: usize, src: &[u8]) -> Result<()> {
        self.own_stream(stream)?;
        self.own_memory(dst)?;
        MemRef::new(dst, offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        let _span = tracing::trace_span!("cuda.write", bytes = src.len()).entered();
        self.bind()?;
        self.use_on(stream, dst)?;
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
        self.own_stream(stream)?;
        self.own_memory(src)?;
        MemRef::new(src, offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        let _span = tracing::trace_span!("cuda.read", bytes = dst.len()).entered();
        self.bind()?;
        self.use_on(stream, src)?;
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
        self.own_stream(stream)?;
        self.own_memory(src.memory)?;
        self.own_memory(dst)?;
        check_copy(&src, dst, dst_offset)?;
        if src.len == 0 {
            return Ok(());
        }
        let _span = tracing::trace_span!("cuda.copy", bytes = src.len).entered();
        self.bind()?;
        self.use_on(stream, src.memory)?;
        self.use_on(stream, dst)?;
        // SAFETY: both ranges checked inside live allocations of this context, disjoint,
        // and allocated before this point of `stream`.
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
        self.own_stream(stream)?;
        self.own_memory(dst.memory)?;
        check_fill(&dst, pattern)?;
        if dst.len == 0 {
            return Ok(());
        }
        let _span = tracing::trace_span!("cuda.fill", bytes = dst.len).entered();
        self.bind()?;
        self.use_on(stream, dst.memory)?;
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
        self.own_stream(stream)?;
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
        self.own_stream(stream)?;
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
        self.own_stream(stream)?;
        self.bind()?;
        // SAFETY: a live stream of this context.
        unsafe { result::stream::synchronize(stream.raw) }.map_err(|e| maybe_oom(e, "cuStreamSynchronize", 0))
    }
}
