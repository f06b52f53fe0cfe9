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

use crate::stencil_cpu::CpuStencil;
use gpubuf::cpu::CpuBackend;
use gpubuf::{Error, Kernels, NDBuffer, Result};
use std::any::Any;

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
