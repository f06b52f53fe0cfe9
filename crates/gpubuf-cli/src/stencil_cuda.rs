//! The demo's 5-point heat stencil as a CUDA C kernel compiled by NVRTC (see `stencil.rs`
//! for the arithmetic every backend shares).

use crate::stencil_fields::kernel_args;
use gpubuf::cuda::{CudaBackend, UserKernel};
use gpubuf::kernel::Launch;
use gpubuf::{Backend, NDBuffer, Result};

/// One thread per interior cell: `x` (launch dimension 0) runs along a row (`c`), `y` over
/// rows (`a`). Compiled with `--fmad=false`, so nothing is fused and the results match the
/// other backends bit for bit.
const SOURCE: &str = r#"
extern "C" __global__ void heat_step(const double* cur, unsigned long long cur_off,
                                     double* next, unsigned long long next_off,
                                     unsigned long long lx, unsigned long long ly,
                                     double alpha, double source) {
    unsigned long long c = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x + 1;
    unsigned long long a = (unsigned long long)blockIdx.y * blockDim.y + threadIdx.y + 1;
    if (c > ly || a > lx) return;
    unsigned long long w = ly + 2;
    const double* u = cur + cur_off;
    unsigned long long i = a * w + c;
    double centre = u[i];
    double lap = (((u[i - w] + u[i + w]) + u[i - 1]) + u[i + 1]) - 4.0 * centre;
    next[next_off + i] = (centre + alpha * lap) + source;
}
"#;

/// The NVRTC options: no fused multiply-add (also the backend's default, stated here).
const OPTIONS: &str = "--fmad=false";

/// The demo's stencil compiled for one CUDA context.
pub(crate) struct CudaStencil {
    kernel: UserKernel,
}

impl CudaStencil {
    /// Compiles the stencil for `b`'s context (cached per context by the backend).
    ///
    /// # Errors
    /// [`gpubuf::Error::BackendUnavailable`] without NVRTC; [`gpubuf::Error::Build`] with NVRTC's log.
    pub(crate) fn new(b: &CudaBackend) -> Result<Self> {
        Ok(CudaStencil { kernel: b.user_kernel(SOURCE, OPTIONS, "heat_step")? })
    }

    /// Queues `next[1..=lx, 1..=ly] = stencil(cur)` on `b`'s default stream (no wait); both
    /// arrays (lx+2, ly+2) f64, C order, halo 1.
    ///
    /// # Errors
    /// As [`check_fields`]; launch errors.
    pub(crate) fn step(
        &self,
        b: &CudaBackend,
        cur: &NDBuffer<CudaBackend, f64>,
        next: &NDBuffer<CudaBackend, f64>,
        alpha: f64,
        source: f64,
    ) -> Result<()> {
        let (args, (lx, ly)) = kernel_args(cur, next, alpha, source)?;
        self.kernel.launch(b.default_stream(), &Launch::new(&[ly, lx])?, &args)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpubuf::cuda::ptx::{ParamKind, Signature};

    /// The kernel compiles with NVRTC (no GPU needed) and takes the arguments `step` gives.
    #[test]
    fn the_kernel_compiles_and_takes_the_step_arguments() {
        if let Err(e) = gpubuf::cuda::nvrtc_available() {
            let required = std::env::var("GPUBUF_REQUIRE").map(|v| v.contains("nvrtc")).unwrap_or(false);
            assert!(!required, "NVRTC required but unavailable: {e}");
            eprintln!("nvrtc skipped: {e}");
            return;
        }
        let ptx = gpubuf::cuda::compile_user_ptx(SOURCE, OPTIONS).expect("the stencil compiles");
        let sig = Signature::find(&ptx, "heat_step").expect("an extern \"C\" entry");
        let pointers =
            gpubuf::cuda::nvrtc::declared_pointers(SOURCE, OPTIONS, &ptx).expect("declarations read");
        let sig = sig.with_pointers(&pointers["heat_step"]).expect("one flag per parameter");
        let (ptr, int) = (ParamKind::Pointer, ParamKind::Int64);
        let kinds: Vec<ParamKind> = sig.params.iter().map(|p| p.kind.clone()).collect();
        assert_eq!(
            kinds,
            [ptr.clone(), int.clone(), ptr, int.clone(), int.clone(), int, ParamKind::F64, ParamKind::F64]
        );
        let body = &ptx[ptx.find(".entry heat_step").unwrap_or(0)..];
        assert!(!body.contains("fma.rn"), "no fused multiply-add");
    }
}
