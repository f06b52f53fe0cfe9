//! [`OpenClBackend`]: the backend traits over one OpenCL device.

use crate::device::{select, ClDeviceEntry};
use crate::error::{cl, driver, maybe_oom};
use crate::kernels::ProgramCache;
use crate::memory::ClMemory;
use crate::shape::PlanKernel;
use crate::stream::{new_queue, ClEvent, ClStream, OwnedQueue};
use gpubuf_core::{
    check_copy, check_fill, Allocator, Backend, BackendKind, DeviceInfo, DeviceMemory, MemRef, MemoryInfo,
    Result,
};
use opencl3::command_queue::{
    enqueue_barrier_with_wait_list, enqueue_copy_buffer, enqueue_fill_buffer, enqueue_marker_with_wait_list,
    enqueue_migrate_mem_object, enqueue_read_buffer, enqueue_write_buffer,
};
use opencl3::context::Context;
use opencl3::event::{Event, CL_COMPLETE};
use opencl3::memory::CL_MIGRATE_MEM_OBJECT_CONTENT_UNDEFINED;
use opencl3::types::{cl_event, CL_BLOCKING};
use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

/// A handle to one OpenCL device: its context, a default in-order queue and the cached
/// copy-plan programs. Clones share all of it; [`OpenClBackend::with_plan_kernel`] gives a
/// handle on the same context whose plans use another kernel shape.
#[derive(Clone)]
pub struct OpenClBackend {
    pub(crate) inner: Arc<Inner>,
    /// The plan kernel shape given to [`OpenClBackend::with_plan_kernel`], if any.
    pub(crate) plan_kernel: Option<PlanKernel>,
}

pub(crate) struct Inner {
    pub(crate) entry: ClDeviceEntry,
    pub(crate) context: Context,
    pub(crate) max_alloc: u64,
    pub(crate) max_param: usize,
    /// `CL_DEVICE_MAX_WORK_GROUP_SIZE`.
    pub(crate) max_group: usize,
    /// A GPU or accelerator (`CL_DEVICE_TYPE`): the device the block plan kernel is for.
    pub(crate) is_gpu: bool,
    pub(crate) programs: ProgramCache,
    pub(crate) user_programs: crate::program::UserPrograms,
    default_stream: ClStream,
    /// The fork generation the context was made in (`gpubuf_core::process`).
    forks: u64,
}

impl std::fmt::Debug for OpenClBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenClBackend")
            .field("device", &self.inner.entry.info.name)
            .field("plan_kernel", &self.plan_kernel)
            .finish()
    }
}

/// Releases an event returned by an enqueue call we do not track.
fn release(event: cl_event) {
    drop(Event::new(event));
}

impl OpenClBackend {
    /// Opens the device chosen by [`crate::DEVICE_ENV`], or the first device found.
    ///
    /// # Errors
    /// [`gpubuf_core::Error::BackendUnavailable`] without a runtime or device; driver errors.
    pub fn new() -> Result<Self> {
        Self::from_entry(select()?)
    }

    /// Opens a device from [`crate::devices`].
    ///
    /// # Errors
    /// Driver errors creating the context or queue.
    pub fn from_entry(entry: ClDeviceEntry) -> Result<Self> {
        let context = Context::from_device(&entry.device).map_err(|e| cl(e, "clCreateContext"))?;
        let default_stream = new_queue(&context)?;
        Self::from_parts(entry, context, default_stream)
    }

    /// A backend over `context` (holding its own reference to it) whose default stream is
    /// `default_stream`, a queue of that context on `entry`'s device.
    pub(crate) fn from_parts(
        entry: ClDeviceEntry,
        context: Context,
        default_stream: ClStream,
    ) -> Result<Self> {
        let forks = gpubuf_core::process::generation();
        let max_alloc =
            entry.device.max_mem_alloc_size().map_err(|e| cl(e, "CL_DEVICE_MAX_MEM_ALLOC_SIZE"))?;
        let max_param = entry.device.max_parameter_size().unwrap_or(256);
        let gpu_types = opencl3::device::CL_DEVICE_TYPE_GPU | opencl3::device::CL_DEVICE_TYPE_ACCELERATOR;
        let is_gpu = entry.device.dev_type().map(|t| t & gpu_types != 0).unwrap_or(false);
        let max_group = entry.device.max_work_group_size().unwrap_or(1);
        Ok(OpenClBackend {
            inner: Arc::new(Inner {
                entry,
                context,
                max_alloc,
                max_param,
                max_group,
                is_gpu,
                programs: ProgramCache::default(),
                user_programs: Default::default(),
                default_stream,
                forks,
            }),
            plan_kernel: None,
        })
    }

    /// A handle on the same device, context and queues whose plans run the `kernel` shape,
    /// whatever the device type and [`crate::KERNEL_ENV`] say. Memory, streams and plans
    /// are shared with `self` (a plan keeps the shape of the handle that prepared it).
    pub fn with_plan_kernel(&self, kernel: PlanKernel) -> Self {
        OpenClBackend { inner: self.inner.clone(), plan_kernel: Some(kernel) }
    }

    /// Whether `CL_DEVICE_TYPE` says GPU or accelerator (the device types whose default
    /// plan kernel shape is [`PlanKernel::Blocks`]; CPU devices get [`PlanKernel::Rows`]).
    pub fn is_gpu(&self) -> bool {
        self.inner.is_gpu
    }

    /// The platform and device this handle uses.
    pub fn entry(&self) -> &ClDeviceEntry {
        &self.inner.entry
    }

    /// The raw handle of this backend's context, as recorded in its memory and streams.
    pub(crate) fn context_id(&self) -> usize {
        self.inner.context.get() as usize
    }

    /// Refuses memory of another context (another `OpenClBackend`): OpenCL would reject
    /// some calls with it and run kernels over it unchecked.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`].
    pub(crate) fn own_memory(&self, memory: &ClMemory) -> Result<()> {
        self.same_process()?;
        if memory.context == self.context_id() {
            Ok(())
        } else {
            Err(gpubuf_core::Error::DeviceMismatch(
                "an OpenCL buffer of another context (another OpenClBackend)".into(),
            ))
        }
    }

    /// Refuses the use of this context in a process forked after it was made, where the
    /// driver's first call could hang ([`gpubuf_core::process`]).
    ///
    /// # Errors
    /// [`gpubuf_core::Error::BackendUnavailable`] in such a child.
    pub(crate) fn same_process(&self) -> Result<()> {
        gpubuf_core::process::check_same_process(BackendKind::OpenCl, self.inner.forks)
    }

    /// Refuses a stream of another context.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`].
    pub(crate) fn own_stream(&self, stream: &ClStream) -> Result<()> {
        self.same_process()?;
        if stream.context == self.context_id() {
            Ok(())
        } else {
            Err(gpubuf_core::Error::DeviceMismatch(
                "an OpenCL queue of another context (another OpenClBackend)".into(),
            ))
        }
    }

    /// The default queue (for SVM copies).
    pub(crate) fn inner_default_queue(&self) -> Arc<OwnedQueue> {
        self.inner.default_stream.queue.clone()
    }

    /// Largest single allocation the device allows (`CL_DEVICE_MAX_MEM_ALLOC_SIZE`).
    pub fn max_alloc(&self) -> u64 {
        self.inner.max_alloc
    }
}

impl Allocator for OpenClBackend {
    type Memory = ClMemory;

    fn allocate(&self, bytes: usize) -> Result<ClMemory> {
        self.same_process()?;
        ClMemory::new(&self.inner.context, bytes, self.inner.max_alloc)
    }

    fn allocate_immediate(&self, bytes: usize) -> Result<ClMemory> {
        let mem = self.allocate(bytes)?;
        let q = &self.inner.default_stream.queue;
        let handle = mem.raw();
        // SAFETY: one valid mem object of this context; the migration only allocates
        // (content undefined), it moves no data.
        let ev = unsafe {
            enqueue_migrate_mem_object(
                q.get(),
                1,
                &handle,
                CL_MIGRATE_MEM_OBJECT_CONTENT_UNDEFINED,
                0,
                ptr::null(),
            )
        }
        .map_err(|c| maybe_oom(c, "clEnqueueMigrateMemObjects", bytes))?;
        release(ev);
        q.finish().map_err(|e| maybe_oom(e.0, "clFinish after migrate", bytes))?;
        Ok(mem)
    }

    fn memory_info(&self) -> Option<MemoryInfo> {
        // Core OpenCL cannot report free memory; report the total for both.
        let total = self.inner.entry.info.total_memory;
        Some(MemoryInfo { free: total, total })
    }
}

impl Backend for OpenClBackend {
    type Stream = ClStream;
    type Event = ClEvent;
    const KIND: BackendKind = BackendKind::OpenCl;

    fn info(&self) -> DeviceInfo {
        self.inner.entry.info.clone()
    }

    fn same_device(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn default_stream(&self) -> &ClStream {
        &self.inner.default_stream
    }

    fn stream_id(&self, stream: &ClStream) -> u64 {
        stream.id
    }

    fn new_stream(&self) -> Result<ClStream> {
        self.same_process()?;
        new_queue(&self.inner.context)
    }

    fn write(&self, stream: &ClStream, dst: &ClMemory, offset: usize, src: &[u8]) -> Result<()> {
        self.own_stream(stream)?;
        self.own_memory(dst)?;
        MemRef::new(dst, offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        let _span = tracing::trace_span!("opencl.write", bytes = src.len()).entered();
        // SAFETY: range checked inside the buffer; the write is blocking, so `src` outlives it.
        let ev = unsafe {
            enqueue_write_buffer(
                stream.queue.get(),
                dst.raw(),
                CL_BLOCKING,
                offset,
                src.len(),
                src.as_ptr() as *const c_void as *mut c_void,
                0,
                ptr::null(),
            )
        }
        .map_err(|c| maybe_oom(c, "clEnqueueWriteBuffer", dst.len()))?;
        release(ev);
        Ok(())
    }

    fn read(&self, stream: &ClStream, src: &ClMemory, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.own_stream(stream)?;
        self.own_memory(src)?;
        MemRef::new(src, offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        let _span = tracing::trace_span!("opencl.read", bytes = dst.len()).entered();
        // SAFETY: range checked; the read is blocking, so `dst` outlives it.
        let ev = unsafe {
            enqueue_read_buffer(
                stream.queue.get(),
                src.raw(),
                CL_BLOCKING,
                offset,
                dst.len(),
                dst.as_mut_ptr() as *mut c_void,
                0,
                ptr::null(),
            )
        }
        .map_err(|c| maybe_oom(c, "clEnqueueReadBuffer", src.len()))?;
        release(ev);
        Ok(())
    }

    fn copy(
        &self,
        stream: &ClStream,
        src: MemRef<'_, ClMemory>,
        dst: &ClMemory,
        dst_offset: usize,
    ) -> Result<()> {
        self.own_stream(stream)?;
        self.own_memory(src.memory)?;
        self.own_memory(dst)?;
        check_copy(&src, dst, dst_offset)?;
        if src.len == 0 {
            return Ok(());
        }
        let _span = tracing::trace_span!("opencl.copy", bytes = src.len).entered();
        // SAFETY: both ranges checked inside their buffers and disjoint.
        let ev = unsafe {
            enqueue_copy_buffer(
                stream.queue.get(),
                src.memory.raw(),
                dst.raw(),
                src.offset,
                dst_offset,
                src.len,
                0,
                ptr::null(),
            )
        }
        .map_err(|c| maybe_oom(c, "clEnqueueCopyBuffer", src.len))?;
        release(ev);
        Ok(())
    }

    fn fill(&self, stream: &ClStream, dst: MemRef<'_, ClMemory>, pattern: &[u8]) -> Result<()> {
        self.own_stream(stream)?;
        self.own_memory(dst.memory)?;
        check_fill(&dst, pattern)?;
        if dst.len == 0 {
            return Ok(());
        }
        let _span = tracing::trace_span!("opencl.fill", bytes = dst.len).entered();
        // clEnqueueFillBuffer needs a power-of-two pattern and an offset that is a multiple
        // of it; other fills are written from the host.
        if !pattern.len().is_power_of_two() || dst.offset % pattern.len() != 0 {
            let host: Vec<u8> = pattern.iter().copied().cycle().take(dst.len).collect();
            return self.write(stream, dst.memory, dst.offset, &host);
        }
        // SAFETY: range checked; OpenCL copies the pattern at enqueue time.
        let ev = unsafe {
            enqueue_fill_buffer(
                stream.queue.get(),
                dst.memory.raw(),
                pattern.as_ptr() as *const c_void,
                pattern.len(),
                dst.offset,
                dst.len,
                0,
                ptr::null(),
            )
        }
        .map_err(|c| maybe_oom(c, "clEnqueueFillBuffer", dst.len))?;
        release(ev);
        Ok(())
    }

    fn record_event(&self, stream: &ClStream) -> Result<ClEvent> {
        self.own_stream(stream)?;
        // SAFETY: a valid queue and an empty wait list.
        let ev = unsafe { enqueue_marker_with_wait_list(stream.queue.get(), 0, ptr::null()) }
            .map_err(|c| driver(c, "clEnqueueMarkerWithWaitList"))?;
        stream.queue.flush().map_err(|e| cl(e, "clFlush"))?;
        Ok(ClEvent::created(Event::new(ev)))
    }

    fn event_complete(&self, event: &ClEvent) -> Result<bool> {
        let status = event.event.command_execution_status().map_err(|e| cl(e, "clGetEventInfo"))?;
        if status.0 < 0 {
            return Err(driver(status.0, "a command before the event failed"));
        }
        Ok(status.0 == CL_COMPLETE)
    }

    fn wait_event(&self, event: &ClEvent) -> Result<()> {
        event.event.wait().map_err(|e| cl(e, "clWaitForEvents"))
    }

    fn stream_wait(&self, stream: &ClStream, event: &ClEvent) -> Result<()> {
        self.own_stream(stream)?;
        if event.event.context().map_err(|e| cl(e, "CL_EVENT_CONTEXT"))? as usize != self.context_id() {
            return Err(gpubuf_core::Error::DeviceMismatch("an OpenCL event of another context".into()));
        }
        let list = [event.event.get()];
        // SAFETY: a valid queue and one valid event of the same context.
        let ev = unsafe { enqueue_barrier_with_wait_list(stream.queue.get(), 1, list.as_ptr()) }
            .map_err(|c| driver(c, "clEnqueueBarrierWithWaitList"))?;
        release(ev);
        Ok(())
    }

    fn synchronize(&self, stream: &ClStream) -> Result<()> {
        self.own_stream(stream)?;
        stream.queue.finish().map_err(|e| maybe_oom(e.0, "clFinish", 0))
    }
}
