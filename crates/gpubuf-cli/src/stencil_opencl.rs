//! The demo's 5-point heat stencil as an OpenCL C kernel (see `stencil.rs` for the
//! arithmetic every backend shares).

use crate::stencil::check_fields;
use gpubuf::kernel::{KernelArg, Launch};
use gpubuf::opencl::interop::view_parts;
use gpubuf::opencl::{OpenClBackend, UserKernel};
use gpubuf::{Backend, Error, NDBuffer, Result};

/// One work-item per interior cell: dimension 0 runs along a row (`c`), dimension 1 over
/// rows (`a`). Programs are built with `FP_CONTRACT OFF`, so nothing is fused.
const SOURCE: &str = r"
__kernel void heat_step(__global const double* cur, ulong cur_off,
                        __global double* next, ulong next_off,
                        ulong lx, ulong ly, double alpha, double source) {
    ulong c = get_global_id(0) + 1;
    ulong a = get_global_id(1) + 1;
    if (c > ly || a > lx) return;
    ulong w = ly + 2;
    const __global double* u = cur + cur_off;
    ulong i = a * w + c;
    double centre = u[i];
    double lap = (((u[i - w] + u[i + w]) + u[i - 1]) + u[i + 1]) - 4.0 * centre;
    next[next_off + i] = (centre + alpha * lap) + source;
}
";

/// The stencil compiled for one OpenCL context.
pub(crate) struct OpenClStencil {
    kernel: UserKernel,
}

impl OpenClStencil {
    /// Compiles the stencil for `b`'s context (cached per context by the backend).
    ///
    /// # Errors
    /// [`Error::Build`] with the compiler's log (a device without `double`, say).
    pub(crate) fn new(b: &OpenClBackend) -> Result<Self> {
        Ok(OpenClStencil { kernel: b.user_kernel(SOURCE, "", "heat_step")? })
    }

    /// Queues `next[1..=lx, 1..=ly] = stencil(cur)` on `b`'s default stream (no wait).
    ///
    /// # Errors
    /// As [`check_fields`]; launch errors.
    pub(crate) fn step(
        &self,
        b: &OpenClBackend,
        cur: &NDBuffer<OpenClBackend, f64>,
        next: &NDBuffer<OpenClBackend, f64>,
        alpha: f64,
        source: f64,
    ) -> Result<()> {
        let (lx, ly) = check_fields(cur, next)?;
        let (cur_mem, cur_off) = view_parts(cur)?;
        let (next_mem, next_off) = view_parts(next)?;
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
        self.kernel.launch(b.default_stream(), &Launch::new(&[ly, lx])?, &args)?;
        Ok(())
    }
}
