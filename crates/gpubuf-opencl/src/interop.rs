//! Native bridges of the OpenCL backend: the context, device, queues, buffers and events
//! as opencl3 types (the crate is re-exported as [`crate::opencl3`], so the versions match),
//! and foreign buffers, queues and events adopted by gpubuf.
//!
//! # Ownership
//! Every handle is reference counted by OpenCL. Borrowing accessors (`context`, `queue`,
//! `native`, [`ClMemory::raw`]) hand out gpubuf's own reference: valid while the gpubuf
//! value lives, never to be released by the caller (an opencl3 wrapper made over it with
//! `Buffer::new`, `CommandQueue::new` or `Event::new` releases it when dropped: use the
//! `retained_*` accessors instead). `retained_*` accessors add a reference (`clRetain*`)
//! and return an owned opencl3 wrapper that releases exactly that reference when dropped.
//!
//! Adopting functions ([`OpenClBackend::adopt_buffer`], [`OpenClBackend::stream_from_queue`],
//! [`ClEvent::from_native`]) take an opencl3 wrapper by value: its reference becomes
//! gpubuf's and is released when the last gpubuf view drops. opencl3 builds such wrappers
//! from any raw handle in safe code, so a wrapper does not prove that its reference is the
//! caller's: these functions are `unsafe`, with that as their contract. In addition, a
//! handle a live gpubuf object holds (memory, a stream's queue, an event) is refused with
//! [`Error::InvalidArgument`], and the wrapper is forgotten rather than released, since its
//! reference may be gpubuf's own. [`OpenClBackend::share_raw`] retains a raw handle
//! instead, so the caller's own reference is untouched; it refuses a `cl_mem` a live
//! [`ClMemory`] holds too (a `cl_mem` is the memory of one `ClMemory` at most).
//!
//! ```compile_fail,E0133
//! # use gpubuf_opencl::{opencl3::memory::Buffer, OpenClBackend};
//! # fn f(cl: &OpenClBackend, buffer: Buffer<u8>) -> gpubuf_core::Result<()> {
//! let memory = cl.adopt_buffer(buffer)?; // unsafe: the caller vouches for the reference
//! # Ok(()) }
//! ```
//! ```compile_fail,E0133
//! # use gpubuf_opencl::{opencl3::command_queue::CommandQueue, OpenClBackend};
//! # fn f(cl: &OpenClBackend, queue: CommandQueue) -> gpubuf_core::Result<()> {
//! let stream = cl.stream_from_queue(queue)?; // unsafe, as above
//! # Ok(()) }
//! ```
//! ```compile_fail,E0133
//! # use gpubuf_opencl::{opencl3::event::Event, ClEvent};
//! # fn f(event: Event) -> gpubuf_core::Result<()> {
//! let event = ClEvent::from_native(event)?; // unsafe, as above
//! # Ok(()) }
//! ```
//!
//! A buffer, queue or event the caller made itself is handed over in an `unsafe` block
//! that states where the reference came from:
//!
//! ```
//! use gpubuf_opencl::opencl3::memory::{Buffer, CL_MEM_READ_WRITE};
//! use gpubuf_opencl::OpenClBackend;
//! use gpubuf_core::{Allocator, Backend, DeviceMemory};
//!
//! let Ok(cl) = OpenClBackend::new() else { return Ok(()) }; // no OpenCL here
//! // SAFETY: a live context, no host pointer, a non-zero size.
//! let mine = unsafe { Buffer::<u8>::create(cl.context(), CL_MEM_READ_WRITE, 16, std::ptr::null_mut()) }
//!     .map_err(|e| gpubuf_core::Error::invalid(format!("{e}")))?;
//! // SAFETY: `mine` holds the reference clCreateBuffer returned, handed over here.
//! let memory = unsafe { cl.adopt_buffer(mine) }?;
//! assert_eq!(memory.len(), 16);
//! cl.write(cl.default_stream(), &memory, 0, &[1; 16])?;
//! # Ok::<(), gpubuf_core::Error>(())
//! ```
//!
//! # Ordering
//! gpubuf streams are in-order queues; work on another queue is ordered with events: wrap
//! the user's `Event` with [`ClEvent::from_native`] and join it with
//! [`gpubuf_core::Backend::stream_wait`], or give a gpubuf event's [`ClEvent::native`] to
//! the user's enqueue call as a wait-list entry. Adopted memory brings no ordering of its
//! own: join the queue that last wrote it before gpubuf touches it.

use crate::error::cl;
use crate::owned::{self, Kind};
use crate::stream::claimed_stream;
use crate::{ClEvent, ClMemory, ClStream, OpenClBackend};
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{Element, Error, Result};
use opencl3::command_queue::{CommandQueue, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE};
use opencl3::context::Context;
use opencl3::device::Device;
use opencl3::event::Event;
use opencl3::memory::{
    Buffer, ClMem, CL_MEM_OBJECT_BUFFER, CL_MEM_READ_ONLY, CL_MEM_USE_HOST_PTR, CL_MEM_WRITE_ONLY,
};
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

    /// A gpubuf stream over the caller's queue, taking its reference over (released when
    /// the last clone of the stream drops).
    ///
    /// # Safety
    /// * `queue` holds a reference to a live command queue that is the caller's to give
    ///   away: the one `clCreateCommandQueue*` returned or one added by
    ///   `clRetainCommandQueue`. A wrapper made with opencl3's (safe) `CommandQueue::new`
    ///   over a handle whose reference belongs to something else (another wrapper, another
    ///   library, a gpubuf stream) does not qualify: gpubuf releases the reference when the
    ///   stream's last clone drops, and the other owner's release would then be a second
    ///   one. A queue a live gpubuf stream holds is refused (below), but a reference that is
    ///   not the caller's cannot be told from one that is in general.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when a live gpubuf stream holds the queue (use that
    /// stream, or a clone of it; the wrapper is then forgotten, not released) or for an
    /// out-of-order queue (gpubuf streams run in order); [`Error::DeviceMismatch`] when the
    /// queue belongs to another context or device; driver errors of the queries. Except
    /// when the queue is gpubuf's, it is released on an error.
    pub unsafe fn stream_from_queue(&self, queue: CommandQueue) -> Result<ClStream> {
        if owned::is_owned(Kind::Queue, queue.get()) {
            std::mem::forget(queue);
            return Err(owned::already_owned("command queue"));
        }
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
        claimed_stream(queue, self.context_id()).map_err(|queue| {
            std::mem::forget(queue); // claimed by another thread meanwhile: gpubuf's
            owned::already_owned("command queue")
        })
    }

    /// Adopts the caller's buffer without a copy: its reference becomes gpubuf's and is
    /// released once, when the returned memory drops.
    ///
    /// # Safety
    /// * `buffer` holds a reference to a live `cl_mem` that is the caller's to give away:
    ///   the one `clCreateBuffer` (opencl3's `Buffer::create`) returned or one added by
    ///   `clRetainMemObject`. A wrapper made with opencl3's (safe) `Buffer::new` over a
    ///   handle whose reference belongs to something else (another wrapper, another
    ///   library, a gpubuf [`ClMemory`]) does not qualify: gpubuf releases the reference
    ///   when the memory drops, and the other owner's release would then be a second one,
    ///   freeing the buffer under whoever still uses it. A `cl_mem` a live `ClMemory` holds
    ///   is refused (below), but a reference that is not the caller's cannot be told from
    ///   one that is in general.
    /// * While gpubuf uses the memory, nothing else writes it unless ordered with events
    ///   against gpubuf's streams (see the module docs).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when a live [`ClMemory`] holds the `cl_mem` (use that
    /// memory; the wrapper is then forgotten, not released), when it is not a buffer object
    /// (an image or pipe wrapped as an opencl3 `Buffer`), was created `READ_ONLY` or
    /// `WRITE_ONLY` (gpubuf's kernels read and write the memory they are given) or
    /// `USE_HOST_PTR` (its storage is host memory the `cl_mem` does not keep alive), or is
    /// a sub-buffer of memory a live [`ClMemory`] holds (a pool block it would outlive);
    /// [`Error::DeviceMismatch`] when the buffer belongs to another context. Except when
    /// the `cl_mem` is gpubuf's, the buffer is released on an error.
    pub unsafe fn adopt_buffer<T>(&self, buffer: Buffer<T>) -> Result<ClMemory> {
        let raw = buffer.get();
        // The wrapper's reference moves into a Buffer<u8> over the same handle; forgetting
        // the old wrapper skips its release.
        std::mem::forget(buffer);
        let memory = ClMemory::claimed(Buffer::<u8>::new(raw), self.context_id()).map_err(|twin| {
            std::mem::forget(twin); // gpubuf's own reference, or one that is not the caller's
            owned::already_owned("cl_mem")
        })?;
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
    /// [`Error::InvalidArgument`] when a live [`ClMemory`] holds `mem` already (use that
    /// memory), and as [`OpenClBackend::adopt_buffer`]; driver errors of
    /// `clRetainMemObject`. Nothing of the caller's is released on an error.
    pub unsafe fn share_raw(&self, mem: cl_mem) -> Result<ClMemory> {
        if owned::is_owned(Kind::Mem, mem) {
            return Err(owned::already_owned("cl_mem"));
        }
        // SAFETY: `mem` is a valid buffer (the caller's contract); this reference is the
        // one the returned ClMemory releases.
        unsafe { cl3::memory::retain_mem_object(mem) }
            .map_err(|c| crate::error::driver(c, "clRetainMemObject"))?;
        let memory = ClMemory::claimed(Buffer::<u8>::new(mem), self.context_id()).map_err(|ours| {
            drop(ours); // our own reference, taken above: released
            owned::already_owned("cl_mem")
        })?;
        self.checked(memory)
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
        let flags = b.flags().map_err(|e| cl(e, "CL_MEM_FLAGS"))?;
        if flags & (CL_MEM_READ_ONLY | CL_MEM_WRITE_ONLY) != 0 {
            return Err(Error::invalid("a READ_ONLY or WRITE_ONLY buffer cannot be gpubuf memory"));
        }
        // Its storage is host memory someone else owns (pyopencl's `hostbuf`), which the
        // cl_mem's reference count does not keep alive.
        if flags & CL_MEM_USE_HOST_PTR != 0 {
            return Err(Error::invalid(
                "a USE_HOST_PTR buffer's storage is host memory gpubuf cannot keep alive: copy it into \
                 a buffer the runtime allocates (or adopt the host array itself on the CPU backend)",
            ));
        }
        // A sub-buffer of gpubuf's own memory (a pool block) would outlive the block, which
        // goes back to its pool for the next user.
        let parent = b.associated_memobject().map_err(|e| cl(e, "CL_MEM_ASSOCIATED_MEMOBJECT"))?;
        if !parent.is_null() && owned::is_owned(Kind::Mem, parent) {
            return Err(Error::invalid(
                "this cl_mem is a sub-buffer of gpubuf's own memory: use the gpubuf array that holds it",
            ));
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

    /// A gpubuf event over the caller's event, taking its reference over (released when
    /// the returned value drops): join the caller's work with
    /// [`gpubuf_core::Backend::stream_wait`] or wait for it with `wait_event`.
    ///
    /// # Safety
    /// * `event` holds a reference to a live event that is the caller's to give away: the
    ///   one an enqueue call returned or one added by `clRetainEvent`. A wrapper made with
    ///   opencl3's (safe) `Event::new` over a handle whose reference belongs to something
    ///   else (another wrapper, a gpubuf [`ClEvent`]) does not qualify: gpubuf releases the
    ///   reference when the value drops. An event a live `ClEvent` holds is refused
    ///   (below), but a reference that is not the caller's cannot be told from one that is
    ///   in general.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when a live [`ClEvent`] holds the event (use that one);
    /// the wrapper is then forgotten, not released.
    pub unsafe fn from_native(event: Event) -> Result<ClEvent> {
        ClEvent::claimed(event).map_err(|twin| {
            std::mem::forget(twin); // gpubuf's own reference, or one that is not the caller's
            owned::already_owned("event")
        })
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
