//! Native bridges of the OpenCL backend: the context, device, queues, buffers and events
//! as opencl3 types (the crate is re-exported as [`crate::opencl3`], so the versions match),
//! and foreign buffers, queues and events adopted by gpubuf.
//!
//! # Ownership
//! Every handle is reference counted by OpenCL. Borrowing accessors (`context`, `queue`,
//! `native`, [`ClMemory::raw`]) hand out gpubuf's own reference: valid while the gpubuf
//! value lives, never to be released by the caller. `retained_*` accessors add a reference
//! (`clRetain*`) and return an owned opencl3 wrapper that releases exactly that reference
//! when dropped. Adopting functions take an opencl3 wrapper by value: its reference becomes
//! gpubuf's and is released when the last gpubuf view drops; [`OpenClBackend::share_raw`]
//! retains a raw handle instead, so the caller's own reference is untouched.
//!
//! # Ordering
//! gpubuf streams are in-order queues; work on another queue is ordered with events: wrap
//! the user's `Event` with [`ClEvent::from_native`] and join it with
//! [`gpubuf_core::Backend::stream_wait`], or give a gpubuf event's [`ClEvent::native`] to
//! the user's enqueue call as a wait-list entry. Adopted memory brings no ordering of its
//! own: join the queue that last wrote it before gpubuf touches it.

use crate::backend::stream_of;
use crate::error::cl;
use crate::{ClEvent, ClMemory, ClStream, OpenClBackend};
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{Element, Error, Result};
use opencl3::command_queue::{CommandQueue, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE};
use opencl3::context::Context;
use opencl3::device::Device;
use opencl3::event::Event;
use opencl3::memory::{Buffer, ClMem, CL_MEM_OBJECT_BUFFER, CL_MEM_READ_ONLY, CL_MEM_WRITE_ONLY};
use opencl3::types::cl_mem;

impl OpenClBackend {
    /// The context (gpubuf's reference: do not release it).
    pub fn context(&self) -> &Context {
        &self.inner.context
    }

    /// An owned reference to the context (retained; released when the value drops).
    ///
    /// # Errors
    /// Driver errors of `clRetainContext`.
    pub fn retained_context(&self) -> Result<Context> {
        let raw = self.inner.context.get();
        // SAFETY: `raw` is our live context; the retain adds the reference that the
        // returned wrapper releases on drop.
        unsafe { cl3::context::retain_context(raw) }
            .map_err(|c| crate::error::driver(c, "clRetainContext"))?;
        Ok(Context::new(raw, &[self.inner.entry.device.id()]))
    }

    /// The device (a root device: not reference counted).
    pub fn device(&self) -> Device {
        self.inner.entry.device
    }

    /// A gpubuf stream over the caller's queue, which it takes over (released when the last
    /// clone of the stream drops).
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] when the queue belongs to another context or device;
    /// [`Error::InvalidArgument`] for an out-of-order queue (gpubuf streams run in order);
    /// driver errors of the queries. The queue is released on an error.
    pub fn stream_from_queue(&self, queue: CommandQueue) -> Result<ClStream> {
        let ctx = queue.context().map_err(|e| cl(e, "CL_QUEUE_CONTEXT"))?;
        let dev = queue.device().map_err(|e| cl(e, "CL_QUEUE_DEVICE"))?;
        if ctx != self.inner.context.get() || dev != self.inner.entry.device.id() {
            return Err(Error::DeviceMismatch(
                "the queue belongs to another OpenCL context or device".into(),
            ));
        }
        let props = queue.properties().map_err(|e| cl(e, "CL_QUEUE_PROPERTIES"))?;
        if props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE != 0 {
            return Err(Error::invalid("an out-of-order queue cannot be a gpubuf stream"));
        }
        Ok(stream_of(queue, self.context_id()))
    }

    /// Adopts the caller's buffer without a copy: its reference becomes gpubuf's and is
    /// released once, when the returned memory drops.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] when the buffer belongs to another context;
    /// [`Error::InvalidArgument`] when it is not a buffer object (an image or pipe wrapped
    /// as an opencl3 `Buffer`) or was created `READ_ONLY` or `WRITE_ONLY` (gpubuf's kernels
    /// read and write the memory they are given). The buffer is released on an error.
    pub fn adopt_buffer<T>(&self, buffer: Buffer<T>) -> Result<ClMemory> {
        let raw = buffer.get();
        // The wrapper's reference moves into the new ClMemory (Buffer<u8> over the same
        // handle); forgetting the old wrapper skips its release.
        std::mem::forget(buffer);
        let memory = ClMemory { buffer: Buffer::<u8>::new(raw), len: 0, context: self.context_id() };
        self.checked(memory)
    }

    /// Shares a raw buffer the caller keeps owning: gpubuf retains it and releases only
    /// that reference when the returned memory drops.
    ///
    /// # Safety
    /// * `mem` is a valid buffer object (`cl_mem` of type `CL_MEM_OBJECT_BUFFER`) that
    ///   stays valid until this call returns.
    /// * While gpubuf uses the memory, nothing else writes it unless ordered with events
    ///   against gpubuf's streams (see the module docs).
    ///
    /// # Errors
    /// As [`OpenClBackend::adopt_buffer`], and driver errors of `clRetainMemObject`.
    pub unsafe fn share_raw(&self, mem: cl_mem) -> Result<ClMemory> {
        // SAFETY: `mem` is a valid buffer (the caller's contract); this reference is the
        // one the returned ClMemory releases.
        unsafe { cl3::memory::retain_mem_object(mem) }
            .map_err(|c| crate::error::driver(c, "clRetainMemObject"))?;
        self.checked(ClMemory { buffer: Buffer::<u8>::new(mem), len: 0, context: self.context_id() })
    }

    /// Checks an adopted buffer and records its size.
    fn checked(&self, mut memory: ClMemory) -> Result<ClMemory> {
        let b = &memory.buffer;
        if b.context().map_err(|e| cl(e, "CL_MEM_CONTEXT"))? != self.inner.context.get() {
            return Err(Error::DeviceMismatch("the buffer belongs to another OpenCL context".into()));
        }
        // opencl3's `Buffer::new` wraps any `cl_mem`: an image or a pipe passed to gpubuf's
        // kernels as a `__global` pointer is undefined behaviour.
        let ty = b.mem_type().map_err(|e| cl(e, "CL_MEM_TYPE"))?;
        if ty != CL_MEM_OBJECT_BUFFER {
            return Err(Error::invalid(format!(
                "only buffer objects can be gpubuf memory, this cl_mem has type {ty:#x}"
            )));
        }
        if b.flags().map_err(|e| cl(e, "CL_MEM_FLAGS"))? & (CL_MEM_READ_ONLY | CL_MEM_WRITE_ONLY) != 0 {
            return Err(Error::invalid("a READ_ONLY or WRITE_ONLY buffer cannot be gpubuf memory"));
        }
        memory.len = b.size().map_err(|e| cl(e, "CL_MEM_SIZE"))?;
        Ok(memory)
    }
}

impl ClStream {
    /// The queue (gpubuf's reference: do not release it).
    pub fn queue(&self) -> &CommandQueue {
        &self.queue
    }

    /// An owned reference to the queue (retained; released when the value drops).
    ///
    /// # Errors
    /// Driver errors of `clRetainCommandQueue`.
    pub fn retained_queue(&self) -> Result<CommandQueue> {
        let raw = self.queue.get();
        // SAFETY: `raw` is our live queue; the retain adds the reference that the returned
        // wrapper releases on drop.
        unsafe { cl3::command_queue::retain_command_queue(raw) }
            .map_err(|c| crate::error::driver(c, "clRetainCommandQueue"))?;
        Ok(CommandQueue::new(raw, self.queue.max_work_item_dimensions()))
    }
}

impl ClMemory {
    /// The buffer as an opencl3 `Buffer` (gpubuf's reference: do not release it).
    pub fn native(&self) -> &Buffer<u8> {
        &self.buffer
    }

    /// An owned reference to the buffer (retained; released when the value drops).
    ///
    /// # Errors
    /// Driver errors of `clRetainMemObject`.
    pub fn retained(&self) -> Result<Buffer<u8>> {
        let raw = self.raw();
        // SAFETY: `raw` is our live buffer; the retain adds the reference that the returned
        // wrapper releases on drop.
        unsafe { cl3::memory::retain_mem_object(raw) }
            .map_err(|c| crate::error::driver(c, "clRetainMemObject"))?;
        Ok(Buffer::new(raw))
    }
}

impl ClEvent {
    /// The event (gpubuf's reference: do not release it); usable in a wait list of the
    /// caller's own enqueue calls.
    pub fn native(&self) -> &Event {
        &self.event
    }

    /// A gpubuf event over the caller's event, which it takes over: join the caller's work
    /// with [`gpubuf_core::Backend::stream_wait`] or wait for it with `wait_event`.
    pub fn from_native(event: Event) -> ClEvent {
        ClEvent { event }
    }
}

/// A C-contiguous view's storage as kernel arguments: its allocation and the element offset
/// of its first element (the buffer's byte offset turned into elements plus the layout's
/// own offset), for a kernel that takes `(__global T* base, ulong offset)` and reads or
/// writes `base[offset + i]` for `i` below the view's [`NDBuffer::size`].
///
/// * The kernel gets the **whole** `cl_mem`: a pool segment or a sliced buffer may hold
///   other arrays before and after the view, and a kernel that writes past the view
///   corrupts them. Staying within `offset .. offset + size` is the kernel's
///   responsibility; nothing checks it.
/// * Only C-contiguous views are taken: for a flipped, transposed, strided or broadcast
///   view, `base[offset + i]` would walk out of the view (the kernel gets no strides).
///   Make a dense copy with [`NDBuffer::copy`] first.
/// * An empty view (size 0) is always accepted, at any offset, and gives offset `0`: its
///   kernel must touch no element. The memory of an empty array may be a 1-byte
///   placeholder allocation, never a buffer of `size * size_of::<T>()` bytes to rely on.
///
/// # Errors
/// [`Error::InvalidArgument`] for a view that is not C-contiguous, when the buffer's offset
/// is not whole elements, or when the offset overflows.
pub fn view_parts<T: Element>(nd: &NDBuffer<OpenClBackend, T>) -> Result<(&ClMemory, u64)> {
    nd.kernel_parts()
}
