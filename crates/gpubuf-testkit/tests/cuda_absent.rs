//! CUDA on a machine without it: every public constructor returns an error, never a panic;
//! the kernels still compile to PTX wherever NVRTC is installed.
#![cfg(feature = "cuda")]

use gpubuf::cuda::{compile_ptx, devices, driver_available, nvrtc_available, CudaBackend};
use gpubuf::{BackendKind, Error};

fn is_unavailable(e: &Error) -> bool {
    matches!(e, Error::BackendUnavailable { backend: BackendKind::Cuda, .. })
}

#[test]
fn constructors_give_errors_without_a_gpu() {
    match driver_available() {
        Ok(()) => {
            // With a driver: the listing works without panicking, and ordinals past the
            // last device are typed errors, not driver panics or wrapped indices.
            let list = devices().expect("devices() with a driver present");
            for ordinal in [list.len(), list.len() + 1, i32::MAX as usize, usize::MAX] {
                match CudaBackend::with_ordinal(ordinal) {
                    Ok(_) => panic!("ordinal {ordinal} of {} devices opened", list.len()),
                    Err(e) => assert!(
                        matches!(
                            e,
                            Error::BackendUnavailable { .. }
                                | Error::InvalidArgument(_)
                                | Error::Driver { .. }
                        ),
                        "{e}"
                    ),
                }
            }
            for d in &list {
                assert_eq!(d.backend, BackendKind::Cuda);
                assert!(d.total_memory > 0 && !d.name.is_empty(), "{d:?}");
            }
        }
        Err(e) => {
            assert!(is_unavailable(&e), "{e}");
            assert!(is_unavailable(&CudaBackend::new().unwrap_err()));
            assert!(is_unavailable(&CudaBackend::with_ordinal(0).unwrap_err()));
            assert!(is_unavailable(&CudaBackend::with_ordinal(7).unwrap_err()));
            assert!(is_unavailable(&CudaBackend::with_ordinal(usize::MAX).unwrap_err()));
            assert!(is_unavailable(&devices().unwrap_err()));
            let via_umbrella = gpubuf::devices(BackendKind::Cuda).unwrap_err();
            assert!(is_unavailable(&via_umbrella));
        }
    }
}

#[test]
fn cuda_kernels_compile_to_ptx() {
    let required = std::env::var("GPUBUF_REQUIRE").map(|v| v.contains("nvrtc")).unwrap_or(false);
    match nvrtc_available() {
        Ok(()) => {
            let ptx = compile_ptx().expect("the plan kernels (kernels/shared/plan_blocks.h) must compile");
            for w in [1, 2, 4, 8] {
                assert!(ptx.contains(&format!(".entry gather_{w}")), "gather_{w} missing from PTX");
                assert!(ptx.contains(&format!(".entry scatter_{w}")), "scatter_{w} missing from PTX");
            }
        }
        Err(e) if required => panic!("NVRTC required (GPUBUF_REQUIRE has nvrtc) but unavailable: {e}"),
        Err(e) => {
            assert!(is_unavailable(&e));
            eprintln!("nvrtc skipped: {e}");
        }
    }
}
