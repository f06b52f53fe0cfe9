//! Buffers MPI can read and write in place: host memory of the CPU backend, and CUDA
//! device memory when MPI is CUDA-aware (feature `cuda`, see [`crate::cuda_aware`]).

use gpubuf_buffer::Buffer;
use gpubuf_core::{DeviceMemory, Element, Error, Kernels, Result};
use gpubuf_cpu::CpuMemory;
use gpubuf_halo::HaloDataTransformer;
use std::any::Any;

/// The address MPI is given for the first byte of `buf`, when MPI can use it in place.
fn place<B: Kernels>(buf: &Buffer<B>, cuda_aware: bool) -> Option<*mut u8> {
    let memory: &dyn Any = &**buf.memory();
    if let Some(cpu) = memory.downcast_ref::<CpuMemory>() {
        // In bounds: a buffer's range lies inside its allocation (checked when made).
        return Some(cpu.as_ptr().wrapping_add(buf.offset()));
    }
    device_place(memory, buf.offset(), cuda_aware)
}

#[cfg(feature = "cuda")]
fn device_place(memory: &dyn Any, offset: usize, cuda_aware: bool) -> Option<*mut u8> {
    let cuda = memory.downcast_ref::<gpubuf_cuda::CudaMemory>().filter(|_| cuda_aware)?;
    // A device address, only ever handed to MPI (which knows it as one), never dereferenced.
    let address = usize::try_from(cuda.device_ptr()).ok()?.checked_add(offset)?;
    Some(address as *mut u8)
}

#[cfg(not(feature = "cuda"))]
fn device_place(_memory: &dyn Any, _offset: usize, _cuda_aware: bool) -> Option<*mut u8> {
    None
}

/// Whether MPI can use both buffers of `t` in place: each is a whole allocation of its own
/// (so nothing but the transformer reaches its bytes) that MPI can address.
pub(crate) fn in_place<B: Kernels, T: Element>(
    t: &HaloDataTransformer<B, T>,
    cuda_aware: bool,
) -> Result<bool> {
    let (pack, unpack) = (t.pack_buffer()?, t.unpack_buffer()?);
    let whole = |b: &Buffer<B>| b.offset() == 0 && b.len() == b.memory().len();
    let placed = |b: &Buffer<B>| place(b, cuda_aware).is_some();
    Ok(whole(pack) && whole(unpack) && placed(pack) && placed(unpack))
}

/// The (pack, unpack) buffers' addresses of a transformer used in place.
///
/// # Errors
/// [`Error::InvalidArgument`] when a buffer cannot be used in place (not reached: checked
/// by [`in_place`] when the link was made).
pub(crate) fn places<B: Kernels, T: Element>(
    t: &HaloDataTransformer<B, T>,
    cuda_aware: bool,
) -> Result<(*mut u8, *mut u8)> {
    match (place(t.pack_buffer()?, cuda_aware), place(t.unpack_buffer()?, cuda_aware)) {
        (Some(p), Some(u)) => Ok((p, u)),
        _ => Err(Error::invalid("a halo buffer cannot be handed to MPI in place")),
    }
}

/// Whether both buffers of `t` are host memory of the CPU backend (the quantities are then
/// host memory too: a transformer's quantities live on its backend).
///
/// # Errors
/// [`Error::InvalidArgument`] after the transformer was finalized (not reached: the updater
/// never finalizes its transformers).
pub(crate) fn host<B: Kernels, T: Element>(t: &HaloDataTransformer<B, T>) -> Result<bool> {
    let cpu = |b: &Buffer<B>| (&**b.memory() as &dyn Any).downcast_ref::<CpuMemory>().is_some();
    Ok(cpu(t.pack_buffer()?) && cpu(t.unpack_buffer()?))
}
