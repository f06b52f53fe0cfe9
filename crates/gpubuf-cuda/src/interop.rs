//! Native handles of the CUDA backend for the caller's own kernels and libraries: device
//! pointers of memory and of array views, streams and events both ways, and gpubuf views
//! as arguments of cudarc's launch builder ([`KernelPtr`]). Foreign memory is adopted with
//! [`CudaBackend::adopt_slice`] and [`CudaBackend::adopt_ptr`].
//!
//! # Ownership
//! Handles handed out (`device_ptr`, `raw`, [`view_ptr`], [`view_parts`], [`KernelPtr`])
//! are borrowed: valid while the gpubuf value they came from (and, for a view, the
//! allocation behind it) lives, never to be freed or destroyed by the caller. The context
//! is [`crate::CudaBackend::context`]. Handles taken in say who releases them:
//! [`CudaBackend::stream_from_cudarc`] keeps the cudarc `Arc` (cudarc destroys its stream),
//! [`CudaEvent::from_cudarc`] takes the cudarc event over, [`CudaEvent::from_raw`] borrows or
//! takes over a raw `CUevent` as the caller states. What gpubuf owns is never taken over a
//! second time: [`CudaBackend::adopt_slice`] refuses a cudarc slice over memory gpubuf frees
//! (and leaks it rather than free it), [`CudaBackend::stream_from_cudarc`] a cudarc wrapper
//! of a stream gpubuf created.
//!
//! # Ordering
//! gpubuf allocates stream-ordered on the stream that asked for the memory (its *home*: the
//! backend's default stream for `Allocator::allocate`, the given stream for
//! [`CudaBackend::allocate_on`]) and frees it on that stream after the stream waited for
//! the work queued so far on every gpubuf stream of the context, the cudarc streams wrapped
//! by [`CudaBackend::stream_from_cudarc`] included. So a buffer dropped after work was
//! queued on a gpubuf stream, by gpubuf or by the caller on [`CudaStream::raw`], is freed
//! after that work; and gpubuf's own operations on a stream other than the home stream
//! wait for the allocation by themselves. No gpubuf allocation or free makes one stream
//! wait for another's unrelated work.
//!
//! Work on the caller's own streams (the legacy default stream included) is not seen by
//! gpubuf. Join it with events: record one on the caller's stream, wrap it
//! ([`CudaEvent::from_cudarc`], [`CudaEvent::from_raw`]) and join it with
//! [`gpubuf_core::Backend::stream_wait`]; the other way, `cuStreamWaitEvent` (cudarc's
//! `CudaStream::wait`) on [`CudaEvent::raw`] of a gpubuf `record_event`. Before the last
//! view of a buffer used on such a stream drops, join that stream into a gpubuf stream or
//! synchronise it. Before the caller's own work (cudarc's launch builder with
//! [`KernelPtr`]) on a stream other than the buffer's home stream first touches a new
//! buffer, make that stream wait for an event recorded on the home stream after the
//! buffer was made, or allocate it with `Allocator::allocate_immediate` (the allocation
//! is done when it returns).

use crate::backend::next_stream_id;
use crate::memory::OwnedStream;
use crate::{CudaBackend, CudaEvent, CudaMemory, CudaStream};
use cudarc::driver::sys::{CUdeviceptr, CUevent, CUstream};
use cudarc::driver::DeviceRepr;
use gpubuf_buffer::{Buffer, NDBuffer};
use gpubuf_core::{Element, Error, Result};
use std::marker::PhantomData;
use std::sync::Arc;

impl CudaMemory {
    /// The allocation's device address (borrowed: gpubuf frees it).
    pub fn device_ptr(&self) -> CUdeviceptr {
        self.ptr
    }
}

impl CudaStream {
    /// The raw stream (borrowed: gpubuf destroys it with its last clone, or the cudarc
    /// stream it wraps does).
    pub fn raw(&self) -> CUstream {
        self.raw
    }

    /// The cudarc stream this gpubuf stream wraps ([`CudaBackend::stream_from_cudarc`]);
    /// `None` for gpubuf's own streams (see [`CudaStream::borrow_as_cudarc`]).
    pub fn cudarc(&self) -> Option<&Arc<cudarc::driver::CudaStream>> {
        self.owner.cudarc.as_ref()
    }

    /// A cudarc stream over this gpubuf stream, for cudarc's launch builder and copies: a
    /// borrowed wrapper (`CudaContext::wrap_borrowed_stream`) that never destroys it. For a
    /// stream made by [`CudaBackend::stream_from_cudarc`], prefer [`CudaStream::cudarc`].
    ///
    /// # Safety
    /// The returned wrapper, its clones, and everything that keeps one (a `CudaSlice`
    /// allocated on it frees itself on it) must not be used after the last clone of this
    /// gpubuf stream has dropped: the handle is destroyed then.
    pub unsafe fn borrow_as_cudarc(&self) -> Arc<cudarc::driver::CudaStream> {
        if let Some(s) = &self.owner.cudarc {
            return s.clone();
        }
        // SAFETY: `raw` is a live stream of this context; the caller keeps the wrapper's
        // uses within this stream's lifetime (the function's contract).
        unsafe { self.owner.ctx.wrap_borrowed_stream(self.raw) }
    }
}

impl CudaBackend {
    /// A gpubuf stream over a cudarc stream of this context, keeping the cudarc `Arc`
    /// alive as long as any clone of the gpubuf stream (cudarc destroys the stream, if it
    /// owns it, when its last `Arc` drops). gpubuf work on it is ordered with the caller's
    /// cudarc work on it.
    ///
    /// While a clone lives, gpubuf's frees wait for the work queued on it (by gpubuf or the
    /// caller) before the free, and gpubuf's operations on it wait for allocations made on
    /// other streams; the caller's own work on it must wait for a new buffer's allocation
    /// as the module docs say.
    ///
    /// A cudarc wrapper over a stream gpubuf created (from
    /// [`CudaStream::borrow_as_cudarc`] or cudarc's `wrap_borrowed_stream`) is refused: the
    /// new stream would keep it past the gpubuf stream's last clone, which destroys the
    /// handle. Clone the gpubuf stream instead.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] for a stream of another context;
    /// [`Error::InvalidArgument`] for a stream gpubuf created. The caller's `Arc` is
    /// dropped on an error (a borrowed wrapper destroys nothing).
    pub fn stream_from_cudarc(&self, stream: Arc<cudarc::driver::CudaStream>) -> Result<CudaStream> {
        if stream.context().cu_ctx() != self.inner.ctx.cu_ctx() {
            return Err(Error::DeviceMismatch("the stream belongs to another CUDA context".into()));
        }
        if crate::owned::owns_stream(stream.cu_stream()) {
            return Err(crate::owned::already_owned("stream"));
        }
        let raw = stream.cu_stream();
        let id = next_stream_id();
        self.bind()?;
        let streams = self.inner.streams.clone();
        // The owner takes the stream out of the set when the last clone drops.
        let owner = Arc::new(OwnedStream {
            raw,
            id,
            ctx: self.inner.ctx.clone(),
            streams: streams.clone(),
            cudarc: Some(stream),
        });
        streams.register(id, raw)?;
        Ok(CudaStream { raw, id, owner })
    }
}

impl CudaEvent {
    /// The raw event (borrowed: valid while this value lives).
    pub fn raw(&self) -> CUevent {
        self.raw
    }

    /// A gpubuf event over a cudarc event the caller recorded, which it takes over (cudarc
    /// destroys it when this value drops): join the caller's work with
    /// [`gpubuf_core::Backend::stream_wait`], or wait for it with `wait_event`.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] for an event of another context than `backend`'s.
    pub fn from_cudarc(backend: &CudaBackend, event: cudarc::driver::CudaEvent) -> Result<CudaEvent> {
        if event.context().cu_ctx() != backend.inner.ctx.cu_ctx() {
            return Err(Error::DeviceMismatch("the event belongs to another CUDA context".into()));
        }
        Ok(CudaEvent {
            raw: event.cu_event(),
            ctx: backend.inner.ctx.clone(),
            owned: false,
            _cudarc: Some(event),
        })
    }

    /// A gpubuf event over a raw `CUevent` the caller recorded. With `owned`, gpubuf
    /// destroys it (`cuEventDestroy`) when this value drops; without, it is borrowed.
    ///
    /// # Safety
    /// * `raw` is a live event of `backend`'s context.
    /// * Borrowed (`owned == false`): it stays alive while the returned value lives.
    /// * Owned: nothing else destroys it: not the caller, not a cudarc `CudaEvent`, and not
    ///   a gpubuf [`CudaEvent`] ([`CudaEvent::raw`] of a gpubuf event is borrowed; wrap it
    ///   with `owned == false`, and only while that event lives).
    pub unsafe fn from_raw(backend: &CudaBackend, raw: CUevent, owned: bool) -> CudaEvent {
        CudaEvent { raw, ctx: backend.inner.ctx.clone(), owned, _cudarc: None }
    }
}

/// A gpubuf buffer or view as an argument of cudarc's launch builder
/// (`stream.launch_builder(&f).arg(&ptr)`): the device address of its first element with
/// the buffer's and the view's offsets applied. It borrows the gpubuf value, so the memory
/// cannot be dropped while the builder holds the argument. After the launch, the ordering
/// contract of the module docs applies (a launch on a non-blocking stream must be joined
/// before the last view drops).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelPtr<'a> {
    address: CUdeviceptr,
    _borrow: PhantomData<&'a CudaMemory>,
}

// SAFETY: a transparent wrapper of a `CUdeviceptr` (u64): passed to a kernel as the 8-byte
// pointer parameter it stands for.
unsafe impl DeviceRepr for KernelPtr<'_> {}

impl<'a> KernelPtr<'a> {
    /// The address of a view's first stored element ([`view_ptr`]).
    ///
    /// # Errors
    /// As [`view_ptr`].
    pub fn of_view<T: Element>(nd: &'a NDBuffer<CudaBackend, T>) -> Result<Self> {
        Ok(KernelPtr { address: view_ptr(nd)?, _borrow: PhantomData })
    }

    /// The address of a buffer's first byte (its allocation's base plus its offset).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the address overflows.
    pub fn of_buffer(buffer: &'a Buffer<CudaBackend>) -> Result<Self> {
        let address = u64::try_from(buffer.offset())
            .ok()
            .and_then(|o| buffer.memory().device_ptr().checked_add(o))
            .ok_or_else(|| Error::invalid("buffer address overflows"))?;
        Ok(KernelPtr { address, _borrow: PhantomData })
    }

    /// The device address.
    pub fn address(&self) -> CUdeviceptr {
        self.address
    }
}

/// A C-contiguous view's storage as [`gpubuf_core::kernel::KernelArg`]s of a user kernel:
/// its allocation and the element offset of its first element (the buffer's byte offset
/// in elements plus the layout's offset), for a kernel that takes `(T* base, unsigned long
/// long offset)` and touches `base[offset + i]` for `i` below [`NDBuffer::size`]. The same
/// contract as the OpenCL backend's `view_parts`:
///
/// * The kernel gets the **whole** allocation: a pool segment may hold other arrays before
///   and after the view; keeping to the view is the kernel's responsibility.
/// * Only C-contiguous views (the kernel gets no strides): make a dense copy with
///   [`NDBuffer::copy`] first.
/// * An empty view is accepted at any offset and gives offset `0`; its kernel must touch
///   no element.
///
/// # Errors
/// [`Error::InvalidArgument`] for a view that is not C-contiguous, when the buffer's offset
/// is not whole elements, or when the offset overflows.
pub fn view_parts<T: Element>(nd: &NDBuffer<CudaBackend, T>) -> Result<(&CudaMemory, u64)> {
    nd.kernel_parts()
}

/// The device address of a view's first stored element (element `0` of its layout's
/// offsets): the allocation's base plus the buffer's byte offset plus the layout's element
/// offset. With the view's shape and strides (in elements) it addresses every element;
/// negative strides reach below it, never below the buffer.
///
/// # Errors
/// [`Error::InvalidArgument`] when the buffer's offset is not whole elements or the address
/// overflows.
pub fn view_ptr<T: Element>(nd: &NDBuffer<CudaBackend, T>) -> Result<CUdeviceptr> {
    let size = std::mem::size_of::<T>();
    let buffer = nd.buffer();
    if buffer.offset() % size != 0 {
        return Err(Error::invalid(format!(
            "buffer offset {} is not a multiple of the {size}-byte element",
            buffer.offset()
        )));
    }
    let bytes = nd
        .layout()
        .offset()
        .checked_mul(size)
        .and_then(|b| b.checked_add(buffer.offset()))
        .and_then(|b| CUdeviceptr::try_from(b).ok())
        .ok_or_else(|| Error::invalid("view address overflows"))?;
    buffer.memory().device_ptr().checked_add(bytes).ok_or_else(|| Error::invalid("view address overflows"))
}
