//! What every stencil implementation checks and passes: the fields' shape and storage
//! ([`check_fields`]) and the device kernels' argument list ([`kernel_args`]).

use gpubuf::{Error, Kernels, NDBuffer, Result};

/// Checks that `cur` and `next` are one C-contiguous shape `(lx + 2, ly + 2)` with
/// `lx, ly >= 1` and distinct storage; returns `(lx, ly)`.
///
/// # Errors
/// [`Error::InvalidArgument`] or [`Error::ShapeMismatch`] naming what is wrong.
pub(crate) fn check_fields<B: Kernels>(
    cur: &NDBuffer<B, f64>,
    next: &NDBuffer<B, f64>,
) -> Result<(usize, usize)> {
    let &[w, h] = cur.shape() else {
        return Err(Error::invalid(format!("the stencil takes 2-d fields, not shape {:?}", cur.shape())));
    };
    if next.shape() != cur.shape() {
        return Err(Error::ShapeMismatch { expected: cur.shape().to_vec(), got: next.shape().to_vec() });
    }
    if w < 3 || h < 3 {
        return Err(Error::invalid(format!("field {w}x{h}: the stencil needs at least 3x3 (halo 1)")));
    }
    if !cur.is_c_contiguous() || !next.is_c_contiguous() {
        return Err(Error::invalid("the stencil takes C-contiguous fields"));
    }
    if cur.buffer().overlaps(next.buffer()) {
        return Err(Error::invalid("the stencil's input and output overlap"));
    }
    Ok((w - 2, h - 2))
}

/// The eight arguments of a device stencil launch.
#[cfg(any(feature = "opencl", feature = "cuda"))]
pub(crate) type StencilArgs<'a, B> = [gpubuf::kernel::KernelArg<'a, <B as gpubuf::Allocator>::Memory>; 8];

/// The arguments of the device stencil kernels (OpenCL C and CUDA C take the same list):
/// `(cur, cur_offset, next, next_offset, lx, ly, alpha, source)`, checked by
/// [`check_fields`]; also returns `(lx, ly)`.
///
/// # Errors
/// As [`check_fields`] and `NDBuffer::kernel_parts`.
#[cfg(any(feature = "opencl", feature = "cuda"))]
pub(crate) fn kernel_args<'a, B: Kernels>(
    cur: &'a NDBuffer<B, f64>,
    next: &'a NDBuffer<B, f64>,
    alpha: f64,
    source: f64,
) -> Result<(StencilArgs<'a, B>, (usize, usize))> {
    use gpubuf::kernel::KernelArg;
    let (lx, ly) = check_fields(cur, next)?;
    let (cur_mem, cur_off) = cur.kernel_parts()?;
    let (next_mem, next_off) = next.kernel_parts()?;
    let wide = |n: usize| u64::try_from(n).map_err(|_| Error::invalid(format!("{n} cells overflow u64")));
    let args = [
        KernelArg::Memory(cur_mem),
        KernelArg::U64(cur_off),
        KernelArg::Memory(next_mem),
        KernelArg::U64(next_off),
        KernelArg::U64(wide(lx)?),
        KernelArg::U64(wide(ly)?),
        KernelArg::F64(alpha),
        KernelArg::F64(source),
    ];
    Ok((args, (lx, ly)))
}
