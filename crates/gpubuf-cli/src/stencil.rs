//! The demo's 5-point heat stencil on the device, one implementation per backend, chosen
//! by the concrete backend type behind the generic `B: Kernels`.
//!
//! Every implementation evaluates, for each interior cell `[a, c]` of a field of shape
//! `(lx + 2, ly + 2)` (C order, halo 1), the same operations in the same order, with no
//! fused multiply-add:
//!
//! ```text
//! lap  = (((u[a-1,c] + u[a+1,c]) + u[a,c-1]) + u[a,c+1]) - 4.0 * u[a,c]
//! next = (u[a,c] + alpha * lap) + source
//! ```
//!
//! so the field is bit-for-bit the same on every backend.

use gpubuf::cpu::{interop, CpuBackend};
use gpubuf::{Error, Kernels, NDBuffer, Result};
use ndarray::Ix2;
use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};

#[cfg(feature = "cuda")]
use crate::stencil_cuda::CudaStencil;
#[cfg(feature = "opencl")]
use crate::stencil_opencl::OpenClStencil;

/// The stencil for one backend, made once and stepped many times.
pub(crate) enum Stencil {
    /// Rayon over ndarray views of the CPU backend's memory.
    Cpu(CpuStencil),
    /// An OpenCL C kernel.
    #[cfg(feature = "opencl")]
    OpenCl(OpenClStencil),
    /// A CUDA kernel.
    #[cfg(feature = "cuda")]
    Cuda(CudaStencil),
}

/// `x` as the concrete type `U`, or an error naming the mismatch.
fn concrete<T: Any, U: Any>(x: &T) -> Result<&U> {
    (x as &dyn Any).downcast_ref::<U>().ok_or_else(|| {
        Error::invalid(format!(
            "the demo stencil was made for {}, not for {}",
            std::any::type_name::<U>(),
            std::any::type_name::<T>()
        ))
    })
}

impl Stencil {
    /// The stencil for `b`'s backend (kernels compiled here, not in the step loop).
    ///
    /// # Errors
    /// [`Error::BackendUnavailable`] for a backend without a stencil; kernel build errors.
    pub(crate) fn new<B: Kernels>(b: &B) -> Result<Self> {
        let any = b as &dyn Any;
        if any.is::<CpuBackend>() {
            return Ok(Stencil::Cpu(CpuStencil));
        }
        #[cfg(feature = "opencl")]
        if let Some(cl) = any.downcast_ref::<gpubuf::opencl::OpenClBackend>() {
            return Ok(Stencil::OpenCl(OpenClStencil::new(cl)?));
        }
        #[cfg(feature = "cuda")]
        if let Some(cu) = any.downcast_ref::<gpubuf::cuda::CudaBackend>() {
            return Ok(Stencil::Cuda(CudaStencil::new(cu)?));
        }
        Err(Error::BackendUnavailable {
            backend: B::KIND,
            reason: "the demo has no stencil for this backend".into(),
        })
    }

    /// Queues `next[1..=lx, 1..=ly] = stencil(cur)` on `b`'s default stream; the halo of
    /// `next` is left alone.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for arrays of another backend than the stencil's, or not
    /// both of one shape `(lx + 2, ly + 2)` (lx, ly >= 1) and C-contiguous; launch errors.
    pub(crate) fn step<B: Kernels>(
        &self,
        b: &B,
        cur: &NDBuffer<B, f64>,
        next: &NDBuffer<B, f64>,
        alpha: f64,
        source: f64,
    ) -> Result<()> {
        let _ = b;
        match self {
            Stencil::Cpu(s) => s.step(concrete(cur)?, concrete(next)?, alpha, source),
            #[cfg(feature = "opencl")]
            Stencil::OpenCl(s) => s.step(concrete(b)?, concrete(cur)?, concrete(next)?, alpha, source),
            #[cfg(feature = "cuda")]
            Stencil::Cuda(s) => s.step(concrete(b)?, concrete(cur)?, concrete(next)?, alpha, source),
        }
    }
}

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

/// The stencil on the CPU backend: rows of the output split over rayon, each row a loop
/// over three input rows.
pub(crate) struct CpuStencil;

impl CpuStencil {
    /// `next[1..=lx, 1..=ly] = stencil(cur)`, done when it returns (the CPU backend runs
    /// work at submission).
    ///
    /// # Errors
    /// As [`check_fields`]; [`Error::InvalidArgument`] when a view cannot be taken.
    pub(crate) fn step(
        &self,
        cur: &NDBuffer<CpuBackend, f64>,
        next: &NDBuffer<CpuBackend, f64>,
        alpha: f64,
        source: f64,
    ) -> Result<()> {
        let (lx, ly) = check_fields(cur, next)?;
        let h = ly + 2;
        let inner = next.slice(&[1..lx + 1, 1..ly + 1])?;
        let chunk = lx.div_ceil(4 * rayon_threads()).max(1);
        let failed = AtomicBool::new(false);
        interop::view(cur, |u| {
            let Some(u) = u.as_slice() else {
                return Err(Error::invalid("the stencil input is not C-contiguous"));
            };
            interop::view_mut(&inner, |out| {
                interop::par_chunks_mut(out, 0, chunk, |a0, rows| {
                    let Ok(mut rows) = rows.into_dimensionality::<Ix2>() else {
                        failed.store(true, Ordering::Relaxed);
                        return;
                    };
                    for (k, mut row) in rows.outer_iter_mut().enumerate() {
                        // Output row k of the chunk is field row a = a0 + k + 1.
                        let a = a0 + k + 1;
                        let (Some(dst), Some(up), Some(mid), Some(down)) = (
                            row.as_slice_mut(),
                            u.get((a - 1) * h..a * h),
                            u.get(a * h..(a + 1) * h),
                            u.get((a + 1) * h..(a + 2) * h),
                        ) else {
                            failed.store(true, Ordering::Relaxed);
                            return;
                        };
                        row_step(dst, up, mid, down, alpha, source);
                    }
                })
            })?
        })??;
        if failed.load(Ordering::Relaxed) {
            return Err(Error::invalid("the stencil output rows are not contiguous"));
        }
        Ok(())
    }
}

/// One output row: `dst[c] = stencil at column c + 1` of the rows `up`, `mid`, `down`
/// (each `dst.len() + 2` long). Written without `mul_add`: Rust never contracts.
fn row_step(dst: &mut [f64], up: &[f64], mid: &[f64], down: &[f64], alpha: f64, source: f64) {
    let sides = up.iter().skip(1).zip(down.iter().skip(1));
    for ((d, m), (n, s)) in dst.iter_mut().zip(mid.windows(3)).zip(sides) {
        let centre = m[1];
        let lap = (((n + s) + m[0]) + m[2]) - 4.0 * centre;
        *d = (centre + alpha * lap) + source;
    }
}

/// Worker threads of rayon's global pool.
fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
