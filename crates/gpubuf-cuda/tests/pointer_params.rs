//! Pointer parameters of user kernels read from the CUDA C source (PTX keeps sizes only),
//! and the check that gives a pointer parameter gpubuf memory only. NVRTC, no GPU.

use gpubuf_core::kernel::KernelArg;
use gpubuf_core::Error;
use gpubuf_cuda::compile_user_ptx;
use gpubuf_cuda::nvrtc::declared_pointers;
use gpubuf_cuda::ptx::{ParamKind, Signature};
use std::collections::HashMap;

mod common;
use common::nvrtc;

const SOURCE: &str = r#"
typedef float* floats;
typedef unsigned long long u64;
struct Pair { double a; int b; };
#define KERNEL(name) extern "C" __global__ void name
extern "C" __global__ void every(double* __restrict__ out, const float* in, unsigned long long off,
                                 long long s, int n, floats f, float* const c, size_t z, Pair p,
                                 const volatile int* flag, u64 u, void (*fn)(int), double d) {
    if (n) out[off + s + z + u] = in[0] + f[0] + c[0] + p.a + *flag + d;
}
KERNEL(from_macro)(int* x, long long i) { x[i] = 1; }
extern "C" __global__ void scalars(unsigned long long a, long long b, int c) {}
extern "C" __global__ void none() {}
__global__ void mangled(int* x, long long i) { x[i] = 1; }
"#;

fn typed(ptx: &str, pointers: &HashMap<String, Vec<bool>>, name: &str) -> Signature {
    let sig = Signature::find(ptx, name).unwrap();
    sig.with_pointers(&pointers[name]).unwrap()
}

fn kinds(sig: &Signature) -> Vec<ParamKind> {
    sig.params.iter().map(|p| p.kind.clone()).collect()
}

#[test]
fn pointer_parameters_are_read_from_the_source() {
    if !nvrtc() {
        return;
    }
    for options in ["", "--std=c++11", "--std=c++17 -DUNUSED=1"] {
        let ptx = compile_user_ptx(SOURCE, options).unwrap();
        let pointers = declared_pointers(SOURCE, options, &ptx).unwrap();
        let (p, i) = (ParamKind::Pointer, ParamKind::Int64);
        assert_eq!(
            kinds(&typed(&ptx, &pointers, "every")),
            [
                p.clone(),
                p.clone(),
                i.clone(),
                i.clone(),
                ParamKind::Bits32,
                p.clone(), // through a typedef
                p.clone(), // a const pointer
                i.clone(), // size_t
                ParamKind::Bytes(16),
                p.clone(),
                i.clone(), // a typedef'd integer
                p.clone(), // a function pointer
                ParamKind::F64,
            ],
            "{options}"
        );
        assert_eq!(kinds(&typed(&ptx, &pointers, "from_macro")), [p.clone(), i.clone()]);
        assert_eq!(kinds(&typed(&ptx, &pointers, "scalars")), [i.clone(), i.clone(), ParamKind::Bits32]);
        // Not asked: no 64-bit parameter, or a C++ name the probe cannot spell.
        assert!(!pointers.contains_key("none") && !pointers.contains_key("_Z7mangledPix"));
        let mangled = Signature::find(&ptx, "_Z7mangledPix").unwrap();
        assert_eq!(kinds(&mangled), [ParamKind::Bits64, ParamKind::Bits64]);
    }
}

/// A pointer takes gpubuf memory only: an address given as an integer is refused by the
/// checked launch's check and taken only by the raw one; an integer takes no memory.
#[test]
fn a_pointer_parameter_takes_gpubuf_memory_only() {
    if !nvrtc() {
        return;
    }
    let ptx = compile_user_ptx(SOURCE, "").unwrap();
    let pointers = declared_pointers(SOURCE, "", &ptx).unwrap();
    let k = typed(&ptx, &pointers, "from_macro");
    let m = ();
    assert!(k.check_args(&[KernelArg::Memory(&m), KernelArg::I64(3)]).is_ok());
    for address in [KernelArg::<()>::U64(0x7f00_0000_0000), KernelArg::I64(0)] {
        let args = [address, KernelArg::I64(3)];
        match k.check_args(&args) {
            Err(Error::InvalidArgument(msg)) => {
                assert!(msg.contains("parameter 0") && msg.contains("launch_raw"), "{msg}")
            }
            other => panic!("an address for a pointer: {other:?}"),
        }
        assert!(k.check_args_raw(&args).is_ok());
    }
    // The integer takes integers only, in both checks.
    for check in [Signature::check_args::<()>, Signature::check_args_raw::<()>] {
        let r = check(&k, &[KernelArg::Memory(&m), KernelArg::Memory(&m)]);
        assert!(matches!(&r, Err(Error::InvalidArgument(msg)) if msg.contains("parameter 1")), "{r:?}");
    }
    let s = typed(&ptx, &pointers, "scalars");
    assert!(s.check_args::<()>(&[KernelArg::U64(1), KernelArg::I64(-1), KernelArg::I32(0)]).is_ok());
    // The flags must match the parameters.
    assert!(matches!(k.with_pointers(&[true]), Err(Error::InvalidArgument(_))));
}

/// A kernel the probe cannot name (declared in a namespace) keeps parameters of unknown
/// type; the other kernels of the program are still read. A dialect the probe does not
/// compile in is an error, and nothing is read.
#[test]
fn kernels_the_probe_cannot_name_stay_unknown() {
    if !nvrtc() {
        return;
    }
    let src = "namespace inner { extern \"C\" __global__ void hidden(int* x, long long i) { x[i] = 0; } }\n\
               extern \"C\" __global__ void plain(int* x, long long i) { x[i] = 0; }\n";
    let ptx = compile_user_ptx(src, "").unwrap();
    let pointers = declared_pointers(src, "", &ptx).unwrap();
    assert_eq!(pointers.get("plain"), Some(&vec![true, false]));
    assert!(!pointers.contains_key("hidden"));
    let hidden = Signature::find(&ptx, "hidden").unwrap();
    assert!(hidden.check_args::<()>(&[KernelArg::U64(64), KernelArg::I64(1)]).is_err());
    // A source that only compiles as C++03 has no variadic templates for the probe.
    let old = "extern \"C\" __global__ void k(int* x, long long i) { x[i] = 0; }\n";
    let ptx = compile_user_ptx(old, "--std=c++03").unwrap();
    assert!(matches!(declared_pointers(old, "--std=c++03", &ptx), Err(Error::Build { .. })));
    // Nothing to ask: no compile at all.
    let none = "extern \"C\" __global__ void k(int n) {}\n";
    assert!(declared_pointers(none, "", &compile_user_ptx(none, "").unwrap()).unwrap().is_empty());
}
