//! The demo's 5-point heat stencil on CUDA: `kernels/shared/stencil.h` (the OpenCL
//! stencil's text) compiled ahead of time with the plan kernels (`gpubuf::cuda::aot::STENCIL`),
//! so the demo needs the driver only (see `stencil.rs` for the arithmetic every backend
//! shares).

use crate::stencil_fields::kernel_args;
use gpubuf::cuda::{aot, CudaBackend, UserKernel};
use gpubuf::kernel::Launch;
use gpubuf::{Backend, NDBuffer, Result};

/// One thread per interior cell: `x` (launch dimension 0) runs along a row (`c`), `y` over
/// rows (`a`). Built with `--fmad=false`, so nothing is fused and the results match the
/// other backends bit for bit.
const KERNEL: &str = "heat_cells";

/// The demo's stencil compiled for one CUDA context.
pub(crate) struct CudaStencil {
    kernel: UserKernel,
}

impl CudaStencil {
    /// Loads the embedded stencil into `b`'s context (cached per context by the backend).
    ///
    /// # Errors
    /// [`gpubuf::Error::BackendUnavailable`] when no embedded image runs on the device and
    /// NVRTC is missing; driver errors loading it.
    pub(crate) fn new(b: &CudaBackend) -> Result<Self> {
        Ok(CudaStencil { kernel: b.embedded_program(aot::STENCIL)?.kernel(b, KERNEL)? })
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

    /// The embedded stencil is the shared source, built without fused multiply-add, and its
    /// kernel takes the arguments `step` gives (pointer parameters read from the image's
    /// probe, as `embedded_program` reads them): no GPU and no NVRTC needed.
    #[test]
    fn the_embedded_kernel_takes_the_step_arguments() {
        assert!(aot::STENCIL.text.ends_with(include_str!("../../../kernels/shared/stencil.h")));
        assert_eq!(aot::STENCIL.options, ["--fmad=false"]);
        let ptx = aot::inflate(aot::STENCIL.ptx.1).expect("the PTX inflates");
        let ptx = String::from_utf8(ptx).expect("PTX is text");
        let body = &ptx[ptx.find(".entry heat_cells").expect("heat_cells")..];
        let body = &body[..body.find("\n}").unwrap_or(body.len())];
        assert!(!body.contains("fma.rn"), "no fused multiply-add");
        let pointers = gpubuf::cuda::nvrtc::embedded_pointers(&ptx).expect("entries read");
        let sig = Signature::find(&ptx, KERNEL).expect("an extern \"C\" entry");
        let sig = sig.with_pointers(&pointers[KERNEL]).expect("one flag per parameter");
        let kinds: Vec<ParamKind> = sig.params.iter().map(|p| p.kind.clone()).collect();
        let (ptr, int) = (ParamKind::Pointer, ParamKind::Int64);
        assert_eq!(
            kinds,
            [ptr.clone(), int.clone(), ptr, int.clone(), int.clone(), int, ParamKind::F64, ParamKind::F64]
        );
        assert_eq!(pointers[KERNEL], [true, false, true, false, false, false, false, false]);
        assert_eq!(pointers["heat_rows"], pointers[KERNEL]);
    }
}
