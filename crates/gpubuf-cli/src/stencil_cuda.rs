//! The demo's 5-point heat stencil on the CUDA backend.
//!
//! CUDA user kernels are not wired into the demo yet: [`CudaStencil::new`] refuses with
//! [`gpubuf::Error::BackendUnavailable`], so `gpubuf demo --backend cuda` reports that
//! instead of computing on the host.

use gpubuf::cuda::CudaBackend;
use gpubuf::{BackendKind, Error, NDBuffer, Result};

/// The demo's stencil compiled for one CUDA context.
pub(crate) struct CudaStencil {
    _private: (),
}

impl CudaStencil {
    /// Compiles the stencil for `b`'s context.
    ///
    /// # Errors
    /// [`Error::BackendUnavailable`]: the CUDA stencil is not wired yet.
    pub(crate) fn new(b: &CudaBackend) -> Result<Self> {
        let _ = b;
        Err(Error::BackendUnavailable {
            backend: BackendKind::Cuda,
            reason: "the demo's CUDA stencil (a CUDA user kernel) is not wired yet".into(),
        })
    }

    /// next[1..=lx, 1..=ly] = stencil(cur); both arrays (lx+2, ly+2) f64, C order, halo 1.
    ///
    /// # Errors
    /// [`Error::BackendUnavailable`]: the CUDA stencil is not wired yet.
    pub(crate) fn step(
        &self,
        b: &CudaBackend,
        cur: &NDBuffer<CudaBackend, f64>,
        next: &NDBuffer<CudaBackend, f64>,
        alpha: f64,
        source: f64,
    ) -> Result<()> {
        let _ = (b, cur, next, alpha, source);
        Err(Error::BackendUnavailable {
            backend: BackendKind::Cuda,
            reason: "the demo's CUDA stencil (a CUDA user kernel) is not wired yet".into(),
        })
    }
}
