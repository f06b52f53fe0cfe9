//! User kernels launched with the arrays themselves (`Device::kernel`, `Args`): one body
//! per property, run on every backend a `Device` can hold here (cpu, opencl, cuda), each
//! kernel written in OpenCL C, CUDA C and as a Rust closure.

use gpubuf::kernel::Launch;
use gpubuf::{
    Arg, Args, Backend, BackendKind, DType, Device, Error, KernelSource, MemoryPool, NDBuffer, Result,
};
use gpubuf_testkit::{required, say};
use std::sync::OnceLock;

const CL: &str = r#"
__kernel void scale(__global const double* x, long xo, __global double* y, long yo, double a, int n) {
    int i = get_global_id(0);
    if (i < n) y[yo + i] = a * x[xo + i];
}
__kernel void copy2d(__global const float* t, long to, long t0, long t1,
                     __global float* o, long oo, long o0, long o1) {
    long j = get_global_id(0), i = get_global_id(1);
    o[oo + i * o0 + j * o1] = t[to + i * t0 + j * t1];
}
__kernel void scalars(__global double* o, long oo, int a, uint b, long c, ulong d, float e, double f) {
    o[oo + 0] = a; o[oo + 1] = b; o[oo + 2] = c; o[oo + 3] = d; o[oo + 4] = e; o[oo + 5] = f;
}
"#;

const CU: &str = r#"
extern "C" __global__ void scale(const double* x, long long xo, double* y, long long yo, double a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[yo + i] = a * x[xo + i];
}
extern "C" __global__ void copy2d(const float* t, long long to, long long t0, long long t1,
                                  float* o, long long oo, long long o0, long long o1) {
    long long j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y * blockDim.y + threadIdx.y;
    o[oo + i * o0 + j * o1] = t[to + i * t0 + j * t1];
}
extern "C" __global__ void scalars(double* o, long long oo, int a, unsigned int b, long long c,
                                   unsigned long long d, float e, double f) {
    o[oo + 0] = a; o[oo + 1] = b; o[oo + 2] = c; o[oo + 3] = d; o[oo + 4] = e; o[oo + 5] = f;
}
"#;

fn scale() -> KernelSource<'static> {
    KernelSource::new().opencl(CL).cuda(CU).cpu(|a| {
        let x = a.array::<f64>(0)?;
        let mut y = a.array_mut::<f64>(1)?;
        let (s, n): (f64, i32) = (a.scalar(2)?, a.scalar(3)?);
        let n = usize::try_from(n).unwrap_or(0).min(x.len()).min(y.len());
        for (y, x) in y.iter_mut().zip(x.iter()).take(n) {
            *y = s * x;
        }
        Ok(())
    })
}

fn copy2d() -> KernelSource<'static> {
    KernelSource::new().opencl(CL).cuda(CU).cpu(|a| {
        let t = a.array::<f32>(0)?;
        a.array_mut::<f32>(1)?.assign(&t);
        Ok(())
    })
}

fn scalars() -> KernelSource<'static> {
    KernelSource::new().opencl(CL).cuda(CU).cpu(|a| {
        let v = [
            f64::from(a.scalar::<i32>(1)?),
            f64::from(a.scalar::<u32>(2)?),
            a.scalar::<i64>(3)? as f64,
            a.scalar::<u64>(4)? as f64,
            f64::from(a.scalar::<f32>(5)?),
            a.scalar::<f64>(6)?,
        ];
        let mut o = a.array_mut::<f64>(0)?;
        for (o, v) in o.iter_mut().zip(v) {
            *o = v;
        }
        Ok(())
    })
}

/// Pooled, sliced arrays (non-zero buffer and view offsets) in and out; the elements
/// outside the output view keep their values.
fn offsets(d: &Device) -> Result<()> {
    let pool = MemoryPool::new(d.clone());
    let _first: NDBuffer<Device, f64> = pool.zeros(d, &[7])?; // the next blocks start later
    let x: NDBuffer<Device, f64> = pool.from_slice(d, &[10], &(0..10).map(f64::from).collect::<Vec<_>>())?;
    let y: NDBuffer<Device, f64> = pool.from_slice(d, &[10], &[-1.0; 10])?;
    let (xs, ys) = (x.slice(&[3..7])?, y.slice(&[5..9])?);
    let k = d.kernel(&scale(), "scale")?;
    k.launch(&Launch::new(&[4])?, &Args::new().array(&xs).array_mut(&ys).scalar(0.5).scalar(4i32))?;
    let want = [-1.0, -1.0, -1.0, -1.0, -1.0, 1.5, 2.0, 2.5, 3.0, -1.0];
    assert_eq!(y.to_vec()?, want);
    Ok(())
}

/// A transposed input and a flipped output (negative stride) passed with their strides.
fn strides(d: &Device) -> Result<()> {
    let a = NDBuffer::<Device, f32>::from_slice(d, &[2, 3], &[1., 2., 3., 4., 5., 6.])?;
    let t = a.transpose(None)?; // 3 x 2, strides (1, 3)
    let out = NDBuffer::<Device, f32>::zeros(d, &[3, 2])?;
    let flipped = out.flip(0)?; // rows written in reverse order
    let k = d.kernel(&copy2d(), "copy2d")?;
    k.launch(&Launch::new(&[2, 3])?, &Args::new().strided(&t).strided_mut(&flipped))?;
    assert_eq!(out.to_vec()?, [3., 6., 2., 5., 1., 4.]);
    // Without strides a non-contiguous array is refused, naming the remedy.
    let e = k.launch(&Launch::new(&[2, 3])?, &Args::new().array(&t).strided_mut(&out)).unwrap_err();
    assert!(matches!(&e, Error::InvalidArgument(m) if m.contains("strided")), "{e}");
    Ok(())
}

/// Every scalar type reaches the kernel as its value.
fn scalar_types(d: &Device) -> Result<()> {
    let o = NDBuffer::<Device, f64>::zeros(d, &[6])?;
    let k = d.kernel(&scalars(), "scalars")?;
    let args = Args::new().array_mut(&o).scalar(-3i32).scalar(4u32).scalar(-5i64).scalar(6u64);
    k.launch(&Launch::new(&[1])?, &args.scalar(0.25f32).scalar(1.5f64))?;
    assert_eq!(o.to_vec()?, [-3.0, 4.0, -5.0, 6.0, 0.25, 1.5]);
    Ok(())
}

/// Wrong argument lists are errors, and the kernel works after each.
fn bad_arguments(d: &Device) -> Result<()> {
    let x = NDBuffer::<Device, f64>::from_slice(d, &[2], &[1.0, 2.0])?;
    let y = NDBuffer::<Device, f64>::zeros(d, &[2])?;
    let y32 = NDBuffer::<Device, f32>::zeros(d, &[2])?;
    let k = d.kernel(&scale(), "scale")?;
    let l = Launch::new(&[2])?;
    let good = || Args::new().array(&x).array_mut(&y).scalar(2.0).scalar(2i32);
    let bad: Vec<(&str, Args<'_, Device>)> = vec![
        ("missing scalar", Args::new().array(&x).array_mut(&y).scalar(2.0)),
        ("scalar for an array", Args::new().scalar(1.0).array_mut(&y).scalar(2.0).scalar(2i32)),
        ("float for a double", Args::new().array(&x).array_mut(&y).scalar(2f32).scalar(2i32)),
        ("read-only output", Args::new().array(&x).array(&y).scalar(2.0).scalar(2i32)),
    ];
    for (what, args) in bad {
        // A read-only array for a written parameter cannot be told apart on OpenCL/CUDA.
        if what == "read-only output" && d.kind() != BackendKind::Cpu {
            continue;
        }
        let e = k.launch(&l, &args).expect_err(what);
        assert!(matches!(e, Error::InvalidArgument(_)), "{what}: {e}");
        k.launch(&l, &good())?;
    }
    // An f32 array for a double* parameter: OpenCL reads the pointee type, the CPU closure
    // asks for f64 views; PTX does not record pointee types, so CUDA cannot tell.
    if d.kind() != BackendKind::Cuda {
        let e = k.launch(&l, &Args::new().array(&x).array_mut(&y32).scalar(2.0).scalar(2i32)).unwrap_err();
        assert!(matches!(e, Error::DTypeMismatch { expected: DType::F64, got: DType::F32 }), "{e}");
    }
    y.fill(0.0)?;
    k.launch(&l, &good())?;
    assert_eq!(y.to_vec()?, [2.0, 4.0]);
    Ok(())
}

/// The same array read and written: an error on the CPU (two aliasing views), an update in
/// place on OpenCL and CUDA.
fn same_array_in_and_out(d: &Device) -> Result<()> {
    let x = NDBuffer::<Device, f64>::from_slice(d, &[3], &[1.0, 2.0, 3.0])?;
    let k = d.kernel(&scale(), "scale")?;
    let l = Launch::new(&[3])?;
    let r = k.launch(&l, &Args::new().array(&x).array_mut(&x).scalar(2.0).scalar(3i32));
    if d.kind() == BackendKind::Cpu {
        let e = r.unwrap_err();
        assert!(matches!(&e, Error::InvalidArgument(m) if m.contains("shares memory")), "{e}");
        // Overlapping views of one array too; disjoint views of it are fine.
        let (a, b) = (x.slice(&[0..2])?, x.slice(&[1..3])?);
        assert!(k.launch(&l, &Args::new().array(&a).array_mut(&b).scalar(2.0).scalar(2i32)).is_err());
        let (a, b) = (x.slice(&[0..1])?, x.slice(&[2..3])?);
        k.launch(&l, &Args::new().array(&a).array_mut(&b).scalar(2.0).scalar(1i32))?;
        assert_eq!(x.to_vec()?, [1.0, 2.0, 2.0]);
    } else {
        r?;
        assert_eq!(x.to_vec()?, [2.0, 4.0, 6.0]);
    }
    Ok(())
}

/// An array of another device (a separate CPU device) is refused.
fn another_device(d: &Device) -> Result<()> {
    let other = Device::cpu();
    let x = NDBuffer::<Device, f64>::from_slice(&other, &[2], &[1.0, 2.0])?;
    let y = NDBuffer::<Device, f64>::zeros(d, &[2])?;
    let k = d.kernel(&scale(), "scale")?;
    let e = k.launch(&Launch::new(&[2])?, &Args::new().array(&x).array_mut(&y).scalar(2.0).scalar(2i32));
    assert!(matches!(e, Err(Error::DeviceMismatch(_))), "{e:?}");
    // A stream of another backend too (CPU streams run work at submission: any CPU
    // device's stream runs a CPU kernel).
    if d.kind() != BackendKind::Cpu {
        let y2 = NDBuffer::<Device, f64>::zeros(d, &[2])?;
        let args = Args::from(vec![Arg::array(&y2), Arg::array_mut(&y), 2.0.into(), 2i32.into()]);
        let e = k.launch_on(other.default_stream(), &Launch::new(&[2])?, &args);
        assert!(matches!(e, Err(Error::DeviceMismatch(_))), "{e:?}");
    }
    Ok(())
}

/// A kernel without a source for the held backend is an error naming that backend.
fn missing_source(d: &Device) -> Result<()> {
    let e = d.kernel(&KernelSource::new(), "scale").unwrap_err();
    assert!(matches!(e, Error::BackendUnavailable { backend, .. } if backend == d.kind()), "{e}");
    Ok(())
}

fn device(kind: BackendKind) -> Option<Device> {
    static DEVICES: OnceLock<Vec<(BackendKind, Result<Device>)>> = OnceLock::new();
    let all = DEVICES.get_or_init(|| {
        [BackendKind::Cpu, BackendKind::OpenCl, BackendKind::Cuda].map(|k| (k, Device::new(k))).into()
    });
    match &all.iter().find(|(k, _)| *k == kind)?.1 {
        Ok(d) => Some(d.clone()),
        Err(e) if required(kind) => panic!("{kind} is required (GPUBUF_REQUIRE) but unavailable: {e}"),
        Err(e) => {
            say(&format!("{kind} skipped: {e}"));
            None
        }
    }
}

fn run(kind: BackendKind, body: fn(&Device) -> Result<()>) {
    if let Some(d) = device(kind) {
        if let Err(e) = body(&d) {
            panic!("test body failed on {kind}: {e}");
        }
    }
}

macro_rules! device_tests {
    ($($name:ident),+) => {$(
        mod $name {
            use gpubuf::BackendKind;
            #[test]
            fn cpu() {
                super::run(BackendKind::Cpu, super::$name);
            }
            #[test]
            fn opencl() {
                super::run(BackendKind::OpenCl, super::$name);
            }
            #[test]
            fn cuda() {
                super::run(BackendKind::Cuda, super::$name);
            }
        }
    )+};
}

device_tests!(
    offsets,
    strides,
    scalar_types,
    bad_arguments,
    same_array_in_and_out,
    another_device,
    missing_source
);

/// The CUDA sources compile with NVRTC, and the arguments the tests launch with expand to
/// what their PTX signatures take (no GPU needed); the wrong lists are refused.
#[cfg(feature = "cuda")]
#[test]
fn cuda_sources_take_the_expanded_arguments() {
    use gpubuf::args::expand;
    use gpubuf::cuda::{compile_user_ptx, nvrtc::declared_pointers, nvrtc_available, ptx::Signature};
    if let Err(e) = nvrtc_available() {
        assert!(!std::env::var("GPUBUF_REQUIRE").is_ok_and(|v| v.contains("nvrtc")), "NVRTC required: {e}");
        say(&format!("nvrtc skipped: {e}"));
        return;
    }
    let ptx = compile_user_ptx(CU, "").unwrap();
    let pointers = declared_pointers(CU, "", &ptx).unwrap();
    let sig = |name: &str| Signature::find(&ptx, name).unwrap().with_pointers(&pointers[name]).unwrap();
    let d = Device::cpu();
    let x = NDBuffer::<Device, f64>::zeros(&d, &[4]).unwrap();
    let t = NDBuffer::<Device, f32>::zeros(&d, &[2, 3]).unwrap().transpose(None).unwrap();
    let check = |name: &str, args: Args<'_, Device>| {
        let parts = args.lower(&d, |m| m.as_cpu())?;
        sig(name).check_args(&expand(&parts)?.args).map(|_| ())
    };
    check("scale", Args::new().array(&x).array_mut(&x).scalar(0.5).scalar(4i32)).unwrap();
    check("copy2d", Args::new().strided(&t).strided_mut(&t)).unwrap();
    let all = Args::new().array_mut(&x).scalar(1i32).scalar(2u32).scalar(3i64).scalar(4u64);
    check("scalars", all.scalar(5f32).scalar(6f64)).unwrap();
    assert!(check("scale", Args::new().array(&x).array_mut(&x).scalar(0.5)).is_err());
    assert!(check("scale", Args::new().array(&x).array_mut(&x).scalar(0.5f32).scalar(4i32)).is_err());
    assert!(check("copy2d", Args::new().array(&x).strided_mut(&t)).is_err());
}
