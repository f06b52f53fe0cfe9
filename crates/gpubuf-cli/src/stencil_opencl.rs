//! The demo's 5-point heat stencil as an OpenCL C kernel (see `stencil.rs` for the
//! arithmetic every backend shares).

use crate::stencil_fields::kernel_args;
use gpubuf::kernel::Launch;
use gpubuf::opencl::opencl3::device::CL_DEVICE_TYPE_GPU;
use gpubuf::opencl::{OpenClBackend, UserKernel};
use gpubuf::{Backend, Error, NDBuffer, Result};

/// Two kernels of the same arithmetic, `kernels/shared/stencil.h` (the text the CUDA build
/// compiles) after the OpenCL prelude. `heat_cells`: one work-item per interior cell,
/// dimension 0 along a row (`c`), dimension 1 over rows (`a`), for GPUs (neighbouring
/// work-items read neighbouring elements). `heat_rows`: one work-item per row, a loop along
/// it, for CPU devices (PoCL vectorises the loop; 1.2-1.6x the per-cell kernel there).
/// Programs are built with `FP_CONTRACT OFF`, so nothing is fused.
const SOURCE: &str = concat!(
    include_str!("../../../kernels/opencl/prelude.cl"),
    include_str!("../../../kernels/shared/stencil.h")
);

/// Work-items per work-group along a row for `heat_cells`.
const GROUP: usize = 64;

/// The stencil compiled for one OpenCL context.
pub(crate) struct OpenClStencil {
    kernel: UserKernel,
    /// Whether `kernel` is `heat_rows` (a CPU device) rather than `heat_cells`.
    per_row: bool,
}

impl OpenClStencil {
    /// Compiles the stencil for `b`'s context (cached per context by the backend): the
    /// per-cell kernel on a GPU, the per-row one on other devices.
    ///
    /// # Errors
    /// [`Error::Build`] with the compiler's log (a device without `double`, say).
    pub(crate) fn new(b: &OpenClBackend) -> Result<Self> {
        let gpu = b.device().dev_type().is_ok_and(|t| t & CL_DEVICE_TYPE_GPU != 0);
        let name = if gpu { "heat_cells" } else { "heat_rows" };
        Ok(OpenClStencil { kernel: b.user_kernel(SOURCE, "", name)?, per_row: !gpu })
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
        let (args, (lx, ly)) = kernel_args(cur, next, alpha, source)?;
        let launch = if self.per_row {
            Launch::new(&[lx])?
        } else {
            // The row padded up to whole work-groups; the kernel skips the padding.
            let padded =
                ly.div_ceil(GROUP).checked_mul(GROUP).ok_or_else(|| Error::invalid("row overflows"))?;
            Launch::new(&[padded, lx])?.with_local(&[GROUP, 1])?
        };
        self.kernel.launch(b.default_stream(), &launch, &args)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stencil_cpu::CpuStencil;
    use gpubuf::cpu::CpuBackend;
    use gpubuf::{Buffer, Order};

    impl OpenClStencil {
        /// The stencil with the per-row (`true`) or the per-cell kernel, whatever the device.
        fn with_kernel(b: &OpenClBackend, per_row: bool) -> Result<Self> {
            let name = if per_row { "heat_rows" } else { "heat_cells" };
            Ok(OpenClStencil { kernel: b.user_kernel(SOURCE, "", name)?, per_row })
        }
    }

    /// A field of `shape` whose values differ in their low bits, so any change in the
    /// order of operations shows.
    fn values(shape: [usize; 2], seed: u64) -> Vec<f64> {
        let mut x = seed;
        (0..shape[0] * shape[1])
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 11) as f64 / (1u64 << 53) as f64
            })
            .collect()
    }

    /// An array of `shape` starting `skip` elements into its buffer (as a pool block may).
    fn offset_array(
        cl: &OpenClBackend,
        shape: [usize; 2],
        skip: usize,
        data: &[f64],
    ) -> NDBuffer<OpenClBackend, f64> {
        let bytes = (skip + data.len()) * 8;
        let buf = Buffer::zeros(cl, bytes).unwrap().slice(skip * 8..bytes).unwrap();
        let a = NDBuffer::from_buffer(buf, &shape, Order::C).unwrap();
        a.copy_from(&NDBuffer::from_slice(cl, &shape, data).unwrap()).unwrap();
        a
    }

    #[test]
    fn both_kernels_match_the_cpu_stencil_bit_for_bit() {
        let Ok(cl) = OpenClBackend::new() else { return }; // no OpenCL here
        let cpu = CpuBackend::new();
        for shape in [[3, 3], [7, 72], [66, 5], [130, 131]] {
            let (u, n) = (values(shape, 7 + shape[1] as u64), values(shape, 99));
            let (alpha, source) = (0.18, 0.001);
            let (cur, next) = (
                NDBuffer::from_slice(&cpu, &shape, &u).unwrap(),
                NDBuffer::from_slice(&cpu, &shape, &n).unwrap(),
            );
            CpuStencil.step(&cur, &next, alpha, source).unwrap();
            let want = next.to_vec().unwrap();
            // The halo of the output is left alone, the interior all written.
            let (w, h) = (shape[0], shape[1]);
            for (k, (&got, &old)) in want.iter().zip(&n).enumerate() {
                let (a, c) = (k / h, k % h);
                let halo = a == 0 || c == 0 || a == w - 1 || c == h - 1;
                assert_eq!(halo, got.to_bits() == old.to_bits(), "{shape:?} [{a}, {c}]");
            }
            for per_row in [true, false] {
                let s = OpenClStencil::with_kernel(&cl, per_row).unwrap();
                let cur = offset_array(&cl, shape, 3, &u);
                let next = offset_array(&cl, shape, 5, &n);
                s.step(&cl, &cur, &next, alpha, source).unwrap();
                let got = next.to_vec().unwrap();
                let same = got.iter().zip(&want).all(|(g, w)| g.to_bits() == w.to_bits());
                assert!(same, "{shape:?}, per_row {per_row}: OpenCL differs from the CPU stencil");
            }
        }
    }
}
