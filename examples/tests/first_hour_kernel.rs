//! The `first_hour_kernel` example's diffusion gives the same field, bit for bit, on every
//! backend that runs here (its sources use the same operations in the same order, with no
//! FMA contraction), and that field is the one a plain host computation gives.

#[allow(dead_code)]
#[path = "../first_hour_kernel.rs"]
mod example;

use gpubuf::ndarray::{ArrayD, IxDyn};
use gpubuf::{BackendKind, Device};

/// The same steps on the host, written out independently of the kernel sources.
fn host_field(steps: usize) -> ArrayD<f64> {
    let shape = example::INTERIOR.map(|n| n + 2);
    let mut u = ArrayD::from_shape_fn(IxDyn(&shape), |i| ((i[0] * 7 + i[1] * 3 + i[2]) % 17) as f64 * 0.25);
    for _ in 0..steps {
        let mut next = u.clone();
        for x in 1..shape[0] - 1 {
            for y in 1..shape[1] - 1 {
                for z in 1..shape[2] - 1 {
                    let c = u[[x, y, z]];
                    let lap = ((u[[x - 1, y, z]] + u[[x + 1, y, z]]) + (u[[x, y - 1, z]] + u[[x, y + 1, z]]))
                        + (u[[x, y, z - 1]] + u[[x, y, z + 1]])
                        - 6.0 * c;
                    next[[x, y, z]] = c + example::ALPHA * lap;
                }
            }
        }
        u = next;
    }
    u
}

fn bits(a: &ArrayD<f64>) -> Vec<u64> {
    a.iter().map(|v| v.to_bits()).collect()
}

/// The device of `kind`, or `None` (skipped, or a failure when `GPUBUF_REQUIRE` names it).
fn device(kind: BackendKind) -> Option<Device> {
    match Device::new(kind) {
        Ok(d) => Some(d),
        Err(e) if gpubuf_testkit_required(kind) => panic!("{kind} is required but unavailable: {e}"),
        Err(e) => {
            eprintln!("{kind} skipped: {e}");
            None
        }
    }
}

fn gpubuf_testkit_required(kind: BackendKind) -> bool {
    std::env::var("GPUBUF_REQUIRE")
        .map(|v| v.split(',').any(|s| s.trim().eq_ignore_ascii_case(kind.name())))
        .unwrap_or(false)
}

#[test]
fn checksum_is_the_same_on_every_backend() {
    let want = host_field(example::STEPS);
    let mut ran = 0;
    for kind in [BackendKind::Cpu, BackendKind::OpenCl, BackendKind::Cuda] {
        let Some(d) = device(kind) else { continue };
        let got = example::run(&d, example::STEPS).unwrap();
        assert!(bits(&got) == bits(&want), "{kind}: the field differs from the host's");
        assert_eq!(example::checksum(&got), example::checksum(&want));
        ran += 1;
    }
    assert!(ran >= 1);
}

#[test]
fn odd_step_counts_end_in_the_other_field() {
    let d = Device::cpu();
    assert!(bits(&example::run(&d, 3).unwrap()) == bits(&host_field(3)));
    assert_ne!(example::checksum(&host_field(3)), example::checksum(&host_field(2)));
}

/// The example's CUDA C compiles with NVRTC and takes the arguments `run` launches with
/// (no GPU needed).
#[cfg(feature = "cuda")]
#[test]
fn cuda_source_takes_the_launched_arguments() {
    use gpubuf::args::expand;
    use gpubuf::cuda::{compile_user_ptx, nvrtc::declared_pointers, nvrtc_available, ptx::Signature};
    use gpubuf::{Args, NDBuffer};
    if let Err(e) = nvrtc_available() {
        assert!(!std::env::var("GPUBUF_REQUIRE").is_ok_and(|v| v.contains("nvrtc")), "NVRTC required: {e}");
        eprintln!("nvrtc skipped: {e}");
        return;
    }
    let ptx = compile_user_ptx(example::CUDA, "").unwrap();
    let pointers = declared_pointers(example::CUDA, "", &ptx).unwrap();
    let sig = Signature::find(&ptx, "diffuse").unwrap().with_pointers(&pointers["diffuse"]).unwrap();
    let d = Device::cpu();
    let u = NDBuffer::<Device, f64>::zeros(&d, &example::INTERIOR.map(|n| n + 2)).unwrap();
    let inner = u.slice(&example::INTERIOR.map(|n| 1..n + 1)).unwrap();
    let parts =
        Args::new().strided(&u).strided_mut(&inner).scalar(example::ALPHA).lower(&d, |m| m.as_cpu()).unwrap();
    sig.check_args(&expand(&parts).unwrap().args).unwrap();
}
