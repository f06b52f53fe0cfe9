//! The first hour, plus your own kernel: 3-d fields from a memory pool, and a diffusion
//! step the user writes three times (OpenCL C, CUDA C, a Rust closure) and launches with
//! the arrays themselves, on a backend chosen at run time. It prints one checksum, the
//! same bits on every backend: each source does the same operations in the same order,
//! and no backend contracts them into fused multiply-adds (OpenCL programs are built with
//! `FP_CONTRACT OFF`, CUDA with `--fmad=false`).
//!
//! The arrays are passed `.strided()`: the kernel gets `(pointer, long offset, long s0,
//! long s1, long s2)` per array, so the whole field (with its one-point halo) and the
//! interior view of the output (a slice: not contiguous, offset into a pool block) need
//! no copies.
//!
//! Run: `cargo run -p gpubuf-examples --example first_hour_kernel -- cpu`, or
//! `cargo run -p gpubuf-examples --features opencl --example first_hour_kernel -- --backend opencl`
//! (or `GPUBUF_BACKEND=opencl`).

use gpubuf::kernel::Launch;
use gpubuf::ndarray::{ArrayD, Ix3, IxDyn};
use gpubuf::{Args, Device, Error, KernelSource, MemoryPool, NDBuffer, Result};

/// Interior points per axis; each field has one halo point on every side.
pub const INTERIOR: [usize; 3] = [48, 48, 10];
/// Diffusion steps.
pub const STEPS: usize = 20;
/// The diffusion coefficient times the time step (stable below 1/6).
pub const ALPHA: f64 = 0.1;

/// One diffusion step in OpenCL C: `o[i, j, k] = c + alpha * lap` over the interior, `u`
/// the whole field (halo included), `o` the interior view of the output.
pub const OPENCL: &str = r#"
__kernel void diffuse(__global const double* u, long uo, long us0, long us1, long us2,
                      __global double* o, long oo, long os0, long os1, long os2, double alpha) {
    long k = get_global_id(0), j = get_global_id(1), i = get_global_id(2);
    long c = uo + (i + 1) * us0 + (j + 1) * us1 + (k + 1) * us2;
    double lap = ((u[c - us0] + u[c + us0]) + (u[c - us1] + u[c + us1])) + (u[c - us2] + u[c + us2])
                 - 6.0 * u[c];
    o[oo + i * os0 + j * os1 + k * os2] = u[c] + alpha * lap;
}
"#;

/// The same step in CUDA C (launch dimension 0 is `x`).
pub const CUDA: &str = r#"
extern "C" __global__ void diffuse(const double* u, long long uo, long long us0, long long us1, long long us2,
                                   double* o, long long oo, long long os0, long long os1, long long os2,
                                   double alpha) {
    long long k = blockIdx.x * blockDim.x + threadIdx.x;
    long long j = blockIdx.y * blockDim.y + threadIdx.y;
    long long i = blockIdx.z * blockDim.z + threadIdx.z;
    long long c = uo + (i + 1) * us0 + (j + 1) * us1 + (k + 1) * us2;
    double lap = ((u[c - us0] + u[c + us0]) + (u[c - us1] + u[c + us1])) + (u[c - us2] + u[c + us2])
                 - 6.0 * u[c];
    o[oo + i * os0 + j * os1 + k * os2] = u[c] + alpha * lap;
}
"#;

fn dims3<T>(a: gpubuf::ndarray::ArrayBase<T, IxDyn>) -> Result<gpubuf::ndarray::ArrayBase<T, Ix3>>
where
    T: gpubuf::ndarray::RawData,
{
    a.into_dimensionality::<Ix3>().map_err(|e| Error::invalid(format!("a 3-d field was expected: {e}")))
}

/// The kernel's three sources; the closure is the CPU's.
pub fn source() -> KernelSource<'static> {
    KernelSource::new().opencl(OPENCL).cuda(CUDA).cpu(|a| {
        let u = dims3(a.array::<f64>(0)?)?;
        let mut o = dims3(a.array_mut::<f64>(1)?)?;
        let alpha: f64 = a.scalar(2)?;
        for ((i, j, k), out) in o.indexed_iter_mut() {
            let (x, y, z) = (i + 1, j + 1, k + 1);
            let c = u[[x, y, z]];
            let lap = ((u[[x - 1, y, z]] + u[[x + 1, y, z]]) + (u[[x, y - 1, z]] + u[[x, y + 1, z]]))
                + (u[[x, y, z - 1]] + u[[x, y, z + 1]])
                - 6.0 * c;
            *out = c + alpha * lap;
        }
        Ok(())
    })
}

/// Runs `steps` diffusion steps of the starting field on `device` and returns the final
/// field (halo included).
///
/// # Errors
/// Errors of the pool, the kernel build and the launches.
pub fn run(device: &Device, steps: usize) -> Result<ArrayD<f64>> {
    let pool = MemoryPool::new(device.clone());
    let shape = INTERIOR.map(|n| n + 2);
    let start = ArrayD::from_shape_fn(IxDyn(&shape), |i| ((i[0] * 7 + i[1] * 3 + i[2]) % 17) as f64 * 0.25);
    // Two pooled fields with the same halo; the steps go back and forth between them.
    let a: NDBuffer<Device, f64> = pool.from_ndarray(device, start.view())?;
    let b: NDBuffer<Device, f64> = pool.from_ndarray(device, start.view())?;
    let interior = INTERIOR.map(|n| 1..n + 1);
    let (a_in, b_in) = (a.slice(&interior)?, b.slice(&interior)?);
    let k = device.kernel(&source(), "diffuse")?;
    // Work-item (k, j, i): dimension 0 is the fastest axis of the arrays.
    let launch = Launch::new(&[INTERIOR[2], INTERIOR[1], INTERIOR[0]])?;
    for step in 0..steps {
        let (from, to) = if step % 2 == 0 { (&a, &b_in) } else { (&b, &a_in) };
        k.launch(&launch, &Args::new().strided(from).strided_mut(to).scalar(ALPHA))?;
    }
    let last = if steps % 2 == 0 { &a } else { &b };
    last.to_ndarray()
}

/// The checksum printed: the sum of the field (added in C order) and a 64-bit FNV-1a hash
/// of its elements' bits, which changes with any bit of any element.
pub fn checksum(field: &ArrayD<f64>) -> (f64, u64) {
    let hash = field.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, v| {
        v.to_bits().to_le_bytes().iter().fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
    });
    (field.iter().sum(), hash)
}

/// The backend named by `--backend NAME`, a bare `NAME`, or `GPUBUF_BACKEND`; `cpu` when
/// none is.
fn backend_name() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = args.iter().position(|a| a == "--backend").and_then(|i| args.get(i + 1)).cloned();
    let bare = args.iter().find(|a| !a.starts_with("--")).cloned();
    flag.or(bare).or_else(|| std::env::var("GPUBUF_BACKEND").ok()).unwrap_or_else(|| "cpu".into())
}

fn main() -> Result<()> {
    let device: Device = backend_name().parse()?;
    let (sum, hash) = checksum(&run(&device, STEPS)?);
    println!(
        "{} diffusion steps of a {:?} field (one halo point per side) on {}",
        STEPS,
        INTERIOR,
        device.kind()
    );
    println!("checksum: sum {sum:.17e}, bits hash {hash:016x}");
    Ok(())
}
