//! Buffers MPI can read and write in place: host memory of the CPU backend.

use gpubuf_buffer::Buffer;
use gpubuf_core::{Element, Error, Kernels, Result};
use gpubuf_cpu::CpuMemory;
use gpubuf_halo::HaloDataTransformer;
use std::any::Any;

/// The first byte of `buf` when it lies in CPU-backend memory.
fn host_pointer<B: Kernels>(buf: &Buffer<B>) -> Option<*mut u8> {
    let memory: &dyn Any = &**buf.memory();
    let cpu = memory.downcast_ref::<CpuMemory>()?;
    // In bounds: a buffer's range lies inside its allocation (checked when it was made).
    Some(cpu.as_ptr().wrapping_add(buf.offset()))
}

/// Whether both buffers of `t` are host memory of allocations of their own (so nothing
/// but the transformer reaches their bytes).
pub(crate) fn host_resident<B: Kernels, T: Element>(t: &HaloDataTransformer<B, T>) -> Result<bool> {
    let (pack, unpack) = (t.pack_buffer()?, t.unpack_buffer()?);
    let whole = |b: &Buffer<B>| b.offset() == 0 && b.len() == gpubuf_core::DeviceMemory::len(&**b.memory());
    Ok(host_pointer(pack).is_some() && host_pointer(unpack).is_some() && whole(pack) && whole(unpack))
}

/// The (pack, unpack) buffers' first bytes of a host-resident transformer.
///
/// # Errors
/// [`Error::InvalidArgument`] when a buffer is not host memory (not reached: checked by
/// [`host_resident`] when the link was made).
pub(crate) fn host_pointers<B: Kernels, T: Element>(
    t: &HaloDataTransformer<B, T>,
) -> Result<(*mut u8, *mut u8)> {
    match (host_pointer(t.pack_buffer()?), host_pointer(t.unpack_buffer()?)) {
        (Some(p), Some(u)) => Ok((p, u)),
        _ => Err(Error::invalid("a halo buffer is not host memory")),
    }
}
