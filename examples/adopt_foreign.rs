//! Foreign memory adopted without a copy, CuPy-style: memory another library allocated
//! becomes a gpubuf `NDBuffer`, is worked on by gpubuf in place, and is released exactly
//! once, when the last gpubuf view drops. On the CPU a `Vec`; on OpenCL a `cl_mem` buffer
//! made with opencl3; on CUDA a cudarc `CudaSlice`.
//!
//! Run: `cargo run -p gpubuf-examples --features opencl --example adopt_foreign -- cpu|opencl|cuda`
//! (`cuda` needs `--features cuda`). A backend that is not built or has no device is
//! reported and the example exits successfully.

use gpubuf::{BackendKind, Kernels, NDBuffer, Result};

const ROWS: usize = 4;
const COLS: usize = 6;

fn data() -> Vec<f32> {
    (0..ROWS * COLS).map(|i| i as f32).collect()
}

/// The same gpubuf work on any backend: a view of row 2, filled in place, and the sum.
fn work<B: Kernels>(nd: NDBuffer<B, f32>) -> Result<f32> {
    let row = nd.slice(&[2..3, 0..COLS])?;
    drop(nd); // the view keeps the adopted memory alive
    row.fill(-1.0)?;
    let all = row.to_vec()?;
    Ok(all.iter().sum())
}

fn cpu() -> Result<String> {
    let cpu = gpubuf::cpu::CpuBackend::new();
    let v = data();
    let at = v.as_ptr() as usize;
    let nd = gpubuf::cpu::interop::adopt_vec(&cpu, v, &[ROWS, COLS])?;
    let same = gpubuf::cpu::interop::view(&nd, |a| a.as_ptr() as usize)? == at;
    Ok(format!(
        "a Vec adopted in place ({}); row 2 sums to {}",
        if same { "no copy" } else { "copied" },
        work(nd)?
    ))
}

#[cfg(feature = "opencl")]
fn opencl() -> Result<String> {
    use gpubuf::opencl::opencl3::memory::{Buffer, CL_MEM_COPY_HOST_PTR, CL_MEM_READ_WRITE};
    use gpubuf::opencl::OpenClBackend;
    let cl = match OpenClBackend::new() {
        Ok(cl) => cl,
        Err(e) => return Ok(format!("skipped: {e}")),
    };
    let mut host = data();
    // SAFETY: `host` holds ROWS * COLS floats, copied at creation (COPY_HOST_PTR).
    let foreign = unsafe {
        Buffer::<f32>::create(
            cl.context(),
            CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
            host.len(),
            host.as_mut_ptr().cast(),
        )
    }
    .map_err(|e| gpubuf::Error::invalid(format!("clCreateBuffer: {e}")))?;
    // SAFETY: `foreign` holds the reference clCreateBuffer returned, handed over here: it
    // is gpubuf's now, released when the last view drops.
    let memory = unsafe { cl.adopt_buffer(foreign) }?;
    let nd =
        NDBuffer::from_buffer(gpubuf::Buffer::from_memory(&cl, memory), &[ROWS, COLS], gpubuf::Order::C)?;
    Ok(format!("a cl_mem adopted on {}; row 2 sums to {}", gpubuf::Backend::info(&cl).name, work(nd)?))
}

#[cfg(feature = "cuda")]
fn cuda() -> Result<String> {
    use gpubuf::cuda::CudaBackend;
    let cu = match CudaBackend::new() {
        Ok(cu) => cu,
        Err(e) => return Ok(format!("skipped: {e}")),
    };
    let stream = cu.context().new_stream().map_err(|e| gpubuf::Error::invalid(format!("{e:?}")))?;
    let slice = stream.clone_htod(&data()).map_err(|e| gpubuf::Error::invalid(format!("{e:?}")))?;
    // The slice's stream is joined to gpubuf's default stream; cudarc frees the slice
    // once, after gpubuf's work, when the last view drops.
    let buf = cu.adopt_slice(slice)?;
    let nd = NDBuffer::from_buffer(buf, &[ROWS, COLS], gpubuf::Order::C)?;
    Ok(format!("a CudaSlice adopted on {}; row 2 sums to {}", gpubuf::Backend::info(&cu).name, work(nd)?))
}

fn main() -> Result<()> {
    let kind: BackendKind = std::env::args().nth(1).unwrap_or_else(|| "cpu".into()).parse()?;
    let line = match kind {
        BackendKind::Cpu => cpu()?,
        #[cfg(feature = "opencl")]
        BackendKind::OpenCl => opencl()?,
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => cuda()?,
        #[allow(unreachable_patterns)]
        other => format!("{other} backend unavailable: built without the `{}` feature", other.name()),
    };
    println!("{kind}: {line}");
    Ok(())
}
