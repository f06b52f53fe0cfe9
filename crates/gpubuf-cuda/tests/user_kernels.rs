//! User kernels without a GPU: NVRTC builds (options, build errors), kernel signatures read
//! from NVRTC's PTX and from hand-written PTX, and argument lists checked against them.

use gpubuf_core::kernel::KernelArg;
use gpubuf_core::{BackendKind, Error};
use gpubuf_cuda::compile_user_ptx;
use gpubuf_cuda::nvrtc::{build_options, NO_FMAD};
use gpubuf_cuda::ptx::{entries, ParamKind, Signature};

mod common;
use common::nvrtc;

const KERNELS: &str = r#"
struct Pair { double a; int b; };
extern "C" __global__ void every(double* __restrict__ out, const float* in, unsigned long long off,
                                 long long s, int n, unsigned int m, float f, double d, Pair p,
                                 char c, short h) {
    extern __shared__ double tile[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = in[i];
    if (i < n) out[off + i] = tile[threadIdx.x] * d + f + p.a + c + h + m + s;
}
extern "C" __global__ void none() {}
__global__ void mangled(int* x) { x[0] = 1; }
__device__ double helper(double x) { return x * 2.0; }
extern "C" __global__ void __launch_bounds__(128) bounded(const double* a, double* b) {
    b[threadIdx.x] = helper(a[threadIdx.x]);
}
extern "C" __global__ void axpy(double* y, const double* x, double a, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"#;

fn kinds(sig: &Signature) -> Vec<ParamKind> {
    sig.params.iter().map(|p| p.kind.clone()).collect()
}

#[test]
fn signatures_are_read_from_nvrtc_ptx() {
    if !nvrtc() {
        return;
    }
    let ptx = compile_user_ptx(KERNELS, "").expect("the kernels compile");
    let names: Vec<String> = entries(&ptx).unwrap().into_iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        ["every", "none", "_Z7mangledPi", "bounded", "axpy"],
        "device functions are no entries"
    );
    let every = Signature::find(&ptx, "every").unwrap();
    let b64 = ParamKind::Bits64; // from the PTX alone: a pointer or an integer
    assert_eq!(
        kinds(&every),
        [
            b64.clone(),
            b64.clone(),
            b64.clone(),
            b64,
            ParamKind::Bits32,
            ParamKind::Bits32,
            ParamKind::F32,
            ParamKind::F64,
            ParamKind::Bytes(16),
            ParamKind::Other(".u8".into()),
            ParamKind::Other(".u16".into()),
        ]
    );
    assert_eq!(every.params[3].name, "every_param_3");
    assert!(Signature::find(&ptx, "none").unwrap().params.is_empty());
    assert_eq!(Signature::find(&ptx, "bounded").unwrap().params.len(), 2);
    let missing = Signature::find(&ptx, "mangled").unwrap_err();
    assert!(matches!(&missing, Error::InvalidArgument(m) if m.contains("extern \"C\"")), "{missing}");
    assert!(Signature::find(&ptx, "_Z7mangledPi").is_ok());
}

#[test]
fn arguments_are_checked_against_the_parameters() {
    if !nvrtc() {
        return;
    }
    let ptx = compile_user_ptx(KERNELS, "").unwrap();
    let axpy = Signature::find(&ptx, "axpy").unwrap();
    let (y, x) = ((), ());
    let good: [KernelArg<'_, ()>; 4] =
        [KernelArg::Memory(&y), KernelArg::Memory(&x), KernelArg::F64(2.0), KernelArg::U32(8)];
    assert_eq!(axpy.check_args(&good).unwrap(), 0);
    // Signedness is not in the PTX: int and uint fill .u32.
    let ints: [KernelArg<'_, ()>; 4] = [good[0], good[1], KernelArg::F64(2.0), KernelArg::I32(8)];
    assert!(axpy.check_args(&ints).is_ok());
    // From the PTX alone a .u64 may be a pointer: an integer there is refused, except by
    // the raw check (the unsafe launch_raw's).
    let addresses: [KernelArg<'_, ()>; 4] =
        [KernelArg::U64(0x1000), KernelArg::I64(-1), KernelArg::F64(2.0), KernelArg::U32(8)];
    let e = axpy.check_args(&addresses).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("parameter 0") && m.contains("unknown")),
        "{e}"
    );
    assert!(axpy.check_args_raw(&addresses).is_ok());
    // Dynamic shared memory is no parameter: anywhere in the list, not counted, one at most.
    let shared = [
        KernelArg::Local(512),
        KernelArg::Memory(&y),
        KernelArg::Memory(&x),
        KernelArg::F64(2.0),
        KernelArg::U32(8),
    ];
    assert_eq!(axpy.check_args(&shared).unwrap(), 512);
    let two = [good[0], KernelArg::Local(8), good[1], good[2], KernelArg::Local(8), good[3]];
    assert!(matches!(axpy.check_args(&two), Err(Error::InvalidArgument(m)) if m.contains("more than one")));
    let zero = [good[0], good[1], good[2], good[3], KernelArg::Local(0)];
    assert!(axpy.check_args(&zero).is_err());
    // Every mismatch names the parameter.
    let cases: [(&[KernelArg<'_, ()>], &str); 5] = [
        (&good[..3], "takes 4 arguments, 3 were given"),
        (&[good[0], good[1], good[2], good[3], good[3]], "takes 4 arguments, 5 were given"),
        (&[good[0], good[1], KernelArg::F32(2.0), good[3]], "parameter 2 (axpy_param_2)"),
        (&[good[0], good[1], good[2], KernelArg::U64(8)], "parameter 3 (axpy_param_3)"),
        (&[KernelArg::F64(0.0), good[1], good[2], good[3]], "parameter 0 (axpy_param_0)"),
    ];
    for (args, want) in cases {
        match axpy.check_args(args) {
            Err(Error::InvalidArgument(m)) => assert!(m.contains(want), "{m:?} should say {want:?}"),
            other => panic!("{args:?} gave {other:?}"),
        }
    }
    // Parameters no KernelArg fills are refused whatever is given.
    let every = Signature::find(&ptx, "every").unwrap();
    let mut args = vec![good[0], good[1], good[0], good[0], KernelArg::I32(1)];
    args.extend([KernelArg::U32(1), KernelArg::F32(1.0), KernelArg::F64(1.0), KernelArg::U64(0)]);
    args.extend([KernelArg::U32(0), KernelArg::U32(0)]);
    let e = every.check_args(&args).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("parameter 8") && m.contains("16-byte struct")),
        "{e}"
    );
}

#[test]
fn hand_written_ptx_edge_cases() {
    let ptx = r#"
        // .entry commented(.param .u64 x)
        /* .entry blocked(
             .param .u64 y) */
        .visible .func (.param .b32 func_retval0) helper(.param .b32 helper_param_0) { ret; }
        .visible .entry ptrs(
            .param .u64 .ptr .global .align 8 ptrs_param_0, // a pointer, declared so
            .param .s64 ptrs_param_1,
            .param .b32 ptrs_param_2,
            .param .align 4 .b8 ptrs_param_3 [ 12 ],
            .param .b32 ptrs_param_4[4],
            .param .f16 ptrs_param_5
        )
        .maxntid 64, 1, 1
        { ret; }
        .weak .entry bare
        { ret; }
        .entry empty ( ) { ret; }
        .visible .entryish notone() { ret; }
    "#;
    let all = entries(ptx).unwrap();
    let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["ptrs", "bare", "empty"]);
    assert_eq!(
        kinds(&all[0]),
        [
            ParamKind::Pointer,
            ParamKind::Bits64,
            ParamKind::Bits32,
            ParamKind::Bytes(12),
            ParamKind::Bytes(16),
            ParamKind::Other(".f16".into()),
        ]
    );
    assert!(all[1].params.is_empty() && all[2].params.is_empty());
    // A `.ptr` parameter takes memory only.
    let m = ();
    let p = Signature { name: "p".into(), params: all[0].params[..1].to_vec() };
    assert!(p.check_args(&[KernelArg::Memory(&m)]).is_ok());
    assert!(p.check_args(&[KernelArg::<()>::U64(0)]).is_err());
    assert!(p.check_args_raw(&[KernelArg::<()>::U64(0)]).is_ok());
    for bad in [
        ".entry k(.param .u64)",
        ".entry k(.param k_param_0)",
        ".entry k(.reg .u64 k_param_0)",
        ".entry k(.param .u64 a, .param .u64 b",
        ".entry k(.param .align .b8 a[4])",
        ".entry k(.param .b8 a[99999999999999999999])",
        ".entry k(.param .b64 a[4611686018427387904])",
        ".entry (.param .u64 a)",
    ] {
        match entries(bad) {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("malformed PTX"), "{m}"),
            other => panic!("{bad:?} gave {other:?}"),
        }
    }
}

#[test]
fn options_default_to_no_fused_multiply_add() {
    assert_eq!(build_options("").unwrap(), [NO_FMAD]);
    assert_eq!(build_options("  -O3\t--std=c++17 ").unwrap(), [NO_FMAD, "-O3", "--std=c++17"]);
    assert_eq!(build_options("--fmad=true").unwrap(), ["--fmad=true"]);
    assert_eq!(build_options("-arch=compute_80 -fmad=false").unwrap(), ["-arch=compute_80", "-fmad=false"]);
    assert!(matches!(build_options("-O3\0"), Err(Error::InvalidArgument(_))));
    if !nvrtc() {
        return;
    }
    let fused = |opts: &str| {
        let ptx = compile_user_ptx(KERNELS, opts).unwrap();
        let body = &ptx[ptx.find(".entry axpy").unwrap()..];
        body.contains("fma.rn.f64")
    };
    assert!(!fused(""), "a * x + y must round twice by default");
    assert!(fused("--fmad=true"), "the caller may ask for contraction");
    assert!(!fused("--std=c++17 -lineinfo"));
}

#[test]
fn build_errors_carry_nvrtc_log() {
    assert!(matches!(compile_user_ptx("int x;\0", ""), Err(Error::InvalidArgument(_))));
    if !nvrtc() {
        return;
    }
    let src = "extern \"C\" __global__ void broken(float* x) {\n  x[0] = undeclared_name;\n}\n";
    match compile_user_ptx(src, "") {
        Err(Error::Build { backend: BackendKind::Cuda, log }) => {
            assert!(log.contains("undeclared_name") && log.contains("error"), "{log}");
        }
        other => panic!("{other:?}"),
    }
    match compile_user_ptx("extern \"C\" __global__ void k() {}", "--no-such-option") {
        Err(Error::Build { log, .. }) => assert!(log.contains("--no-such-option"), "{log}"),
        other => panic!("{other:?}"),
    }
    assert!(compile_user_ptx("extern \"C\" __global__ void k() {}", "--std=c++17").is_ok());
}
