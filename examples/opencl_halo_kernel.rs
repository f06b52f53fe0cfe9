//! An OpenCL user kernel on a halo-updated field: a periodic 2-d diffusion.
//!
//! Each step refreshes the field's one-point halo with a `HaloDataTransformer` exchanging
//! the field with itself (every boundary packed and unpacked into the opposite halo, the
//! pack buffer looped back on the device), then an OpenCL C kernel computes the next field
//! from a 5-point stencil. The result is compared with the same arithmetic on the host,
//! bit for bit (user programs are built without fused multiply-add).
//!
//! Run: `cargo run -p gpubuf-examples --features opencl --example opencl_halo_kernel`.
//! Without the feature or an OpenCL runtime it says so and exits successfully.

#[cfg(feature = "opencl")]
mod run {
    use gpubuf::kernel::{KernelArg, Launch};
    use gpubuf::opencl::interop::view_parts;
    use gpubuf::opencl::OpenClBackend;
    use gpubuf::{
        Backend, Boundary, DType, Dim, HaloDataTransformer, HaloExchangeSpec, NDBuffer, QuantityHaloSpec,
        Result,
    };

    const STEP: &str = r#"
    __kernel void diffuse(__global const double* u, ulong u_off, __global double* next, ulong n_off,
                       ulong n, double alpha) {
        size_t a = get_global_id(0) + 1, c = get_global_id(1) + 1, w = n + 2;
        __global const double* v = u + u_off;
        double centre = v[a * w + c];
        double lap = (((v[(a - 1) * w + c] + v[(a + 1) * w + c]) + v[a * w + c - 1]) + v[a * w + c + 1]) - 4.0 * centre;
        next[n_off + a * w + c] = centre + alpha * lap;
    }"#;

    const N: usize = 48;
    const STEPS: usize = 40;
    const ALPHA: f64 = 0.2;

    fn initial() -> Vec<f64> {
        let w = N + 2;
        (0..w * w)
            .map(|k| {
                let (a, c) = (k / w, k % w);
                let inside = (1..=N).contains(&a) && (1..=N).contains(&c);
                if inside && (a - 1) * 3 < N && (c - 1) % 7 < 3 {
                    1.0
                } else {
                    0.0
                }
            })
            .collect()
    }

    /// The same step on the host: periodic halo, then the stencil in the same order.
    fn host_step(u: &mut [f64], next: &mut [f64]) {
        let w = N + 2;
        for a in 0..w {
            for c in 0..w {
                let wrap = |i: usize| {
                    if i == 0 {
                        N
                    } else if i == N + 1 {
                        1
                    } else {
                        i
                    }
                };
                u[a * w + c] = u[wrap(a) * w + wrap(c)];
            }
        }
        for a in 1..=N {
            for c in 1..=N {
                let centre = u[a * w + c];
                let lap = (((u[(a - 1) * w + c] + u[(a + 1) * w + c]) + u[a * w + c - 1]) + u[a * w + c + 1])
                    - 4.0 * centre;
                next[a * w + c] = centre + ALPHA * lap;
            }
        }
    }

    pub fn main() -> Result<()> {
        let cl = match OpenClBackend::new() {
            Ok(cl) => cl,
            Err(e) => {
                println!("OpenCL backend unavailable: {e}");
                return Ok(());
            }
        };
        let spec = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[N, N], 1, 0, DType::F64)?;
        let specs = Boundary::ALL
            .iter()
            .map(|&b| HaloExchangeSpec::periodic(spec.clone(), b))
            .collect::<Result<Vec<_>>>()?;
        let mut halo = HaloDataTransformer::<_, f64>::new(&cl, specs, None)?;
        let start = initial();
        let mut u = NDBuffer::from_slice(&cl, &[N + 2, N + 2], &start)?;
        let mut next = u.copy()?;
        let kernel = cl.user_kernel(STEP, "", "diffuse")?;
        let launch = Launch::new(&[N, N])?;
        for _ in 0..STEPS {
            let q = [&u; 8];
            halo.async_pack(&q, None)?;
            halo.loopback()?;
            halo.async_unpack(&q, None)?;
            let ((um, uo), (nm, no)) = (view_parts(&u)?, view_parts(&next)?);
            let args = [
                KernelArg::Memory(um),
                KernelArg::U64(uo),
                KernelArg::Memory(nm),
                KernelArg::U64(no),
                KernelArg::U64(N as u64),
                KernelArg::F64(ALPHA),
            ];
            // The transformer runs on the default stream: the kernel follows its unpack.
            kernel.launch(cl.default_stream(), &launch, &args)?;
            std::mem::swap(&mut u, &mut next);
        }
        cl.synchronize(cl.default_stream())?;
        let (mut hu, mut hn) = (start.clone(), start);
        for _ in 0..STEPS {
            host_step(&mut hu, &mut hn);
            std::mem::swap(&mut hu, &mut hn);
        }
        let got = u.to_vec()?;
        let w = N + 2;
        let interior = |v: &[f64]| -> Vec<u64> {
            (1..=N).flat_map(|a| (1..=N).map(move |c| (a, c))).map(|(a, c)| v[a * w + c].to_bits()).collect()
        };
        let same = interior(&got) == interior(&hu);
        let total: f64 = interior(&got).iter().map(|&b| f64::from_bits(b)).sum();
        println!("{}: {STEPS} steps of a {N}x{N} periodic diffusion; total {total:.6}", cl.info().name);
        println!("device and host agree bit for bit: {same}");
        if !same {
            return Err(gpubuf::Error::invalid("the device result differs from the host's"));
        }
        Ok(())
    }
}

fn main() -> gpubuf::Result<()> {
    #[cfg(feature = "opencl")]
    return run::main();
    #[cfg(not(feature = "opencl"))]
    {
        println!("OpenCL backend unavailable: built without the `opencl` feature");
        Ok(())
    }
}
