//! A CUDA C kernel, compiled by NVRTC, on a pooled gpubuf buffer: once through cudarc's
//! launch builder (a gpubuf view passed as a `KernelPtr`), once through gpubuf's checked
//! launch; gpubuf reads both results back.
//!
//! Run: `cargo run -p gpubuf-examples --features cuda --example cuda_kernel`. Without the
//! feature, a GPU or NVRTC it says so and exits successfully.

#[cfg(feature = "cuda")]
mod run {
    use gpubuf::cuda::cudarc::driver::{LaunchConfig, PushKernelArg};
    use gpubuf::cuda::interop::{view_parts, KernelPtr};
    use gpubuf::cuda::CudaBackend;
    use gpubuf::kernel::{KernelArg, Launch};
    use gpubuf::{Backend, Error, MemoryPool, NDBuffer, Order, Result};

    const SRC: &str = r#"
    extern "C" __global__ void saxpy(float* y, unsigned long long y_off, const float* x,
                                     unsigned long long x_off, float a, unsigned int n) {
        unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[y_off + i] = a * x[x_off + i] + y[y_off + i];
    }"#;

    const N: usize = 1000;

    pub fn main() -> Result<()> {
        let cu = match CudaBackend::new().and_then(|cu| gpubuf::cuda::nvrtc_available().map(|()| cu)) {
            Ok(cu) => cu,
            Err(e) => {
                println!("skipped: {e}");
                return Ok(());
            }
        };
        // Two arrays carved from the pool: each is a slice of a shared segment.
        let pool = MemoryPool::new(cu.clone());
        let array = |values: &[f32]| -> Result<NDBuffer<CudaBackend, f32>> {
            let buf = pool.allocate(N * 4)?.into_buffer(&cu)?;
            let nd = NDBuffer::from_buffer(buf.slice(0..N * 4)?, &[N], Order::C)?;
            nd.copy_from(&NDBuffer::from_slice(&cu, &[N], values)?)?;
            Ok(nd)
        };
        let x = array(&(0..N).map(|i| i as f32).collect::<Vec<_>>())?;
        let y = array(&vec![1.0; N])?;
        let program = cu.user_program(SRC, "")?; // NVRTC once per context, --fmad=false
        let saxpy = program.kernel(&cu, "saxpy")?;

        // 1. cudarc's launch builder on a cudarc view of gpubuf's default stream.
        let (yp, xp) = (KernelPtr::of_view(&y)?, KernelPtr::of_view(&x)?);
        let (zero, a, n) = (0u64, 2.0f32, N as u32);
        // SAFETY: used only while `cu` (and its default stream) lives, in this function.
        let stream = unsafe { cu.default_stream().borrow_as_cudarc() };
        let cfg = LaunchConfig::for_num_elems(n);
        // SAFETY: the arguments match saxpy's parameters (pointer, u64, pointer, u64, float,
        // uint) and the kernel stays within the N elements of each view.
        unsafe {
            stream
                .launch_builder(saxpy.native())
                .arg(&yp)
                .arg(&zero)
                .arg(&xp)
                .arg(&zero)
                .arg(&a)
                .arg(&n)
                .launch(cfg)
        }
        .map_err(|e| Error::invalid(format!("cudarc launch: {e:?}")))?;

        // 2. gpubuf's launch: arguments checked against the kernel's PTX first.
        let ((ym, yo), (xm, xo)) = (view_parts(&y)?, view_parts(&x)?);
        let args = [
            KernelArg::Memory(ym),
            KernelArg::U64(yo),
            KernelArg::Memory(xm),
            KernelArg::U64(xo),
            KernelArg::F32(0.5),
            KernelArg::U32(n),
        ];
        saxpy.launch(cu.default_stream(), &Launch::new(&[N])?, &args)?;
        let wrong = saxpy.launch(cu.default_stream(), &Launch::new(&[N])?, &args[..5]);
        println!(
            "a launch with a missing argument: {}",
            wrong.map_or_else(|e| e.to_string(), |_| "ran".into())
        );

        let got = y.to_vec()?;
        let ok = got.iter().enumerate().all(|(i, &v)| v == 0.5 * (i as f32) + (2.0 * i as f32 + 1.0));
        println!(
            "{}: saxpy twice over {N} pooled elements, results {}",
            cu.info().name,
            if ok { "correct" } else { "WRONG" }
        );
        if ok {
            Ok(())
        } else {
            Err(Error::invalid("wrong result"))
        }
    }
}

fn main() -> gpubuf::Result<()> {
    #[cfg(feature = "cuda")]
    return run::main();
    #[cfg(not(feature = "cuda"))]
    {
        println!("CUDA backend unavailable: built without the `cuda` feature");
        Ok(())
    }
}
