//! Native handles of the CUDA backend for the caller's own kernels and libraries: device
//! pointers of memory and of array views, raw stream and event handles.
//!
//! # Ownership
//! Every handle here is borrowed: it stays valid while the gpubuf value it came from (and,
//! for a view, the allocation behind it) lives, and must not be freed or destroyed by the
//! caller. The context is [`crate::CudaBackend::context`].
//!
//! # Ordering
//! gpubuf's streams are created blocking with respect to the legacy default stream. Work
//! the caller queues on [`CudaStream::raw`] is ordered with gpubuf's work on that stream;
//! work on the caller's own streams is joined with events (`cuStreamWaitEvent` on
//! [`CudaEvent::raw`] after `record_event`, or a gpubuf `stream_wait` on an event the
//! caller recorded and wraps later).

use crate::{CudaBackend, CudaEvent, CudaMemory, CudaStream};
use cudarc::driver::sys::{CUdeviceptr, CUevent, CUstream};
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{Element, Error, Result};

impl CudaMemory {
    /// The allocation's device address (borrowed: gpubuf frees it).
    pub fn device_ptr(&self) -> CUdeviceptr {
        self.ptr
    }
}

impl CudaStream {
    /// The raw stream (borrowed: gpubuf destroys it with its last clone).
    pub fn raw(&self) -> CUstream {
        self.raw
    }
}

impl CudaEvent {
    /// The raw event (borrowed: gpubuf destroys it with this value).
    pub fn raw(&self) -> CUevent {
        self.raw
    }
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
