//! What the CUDA test binaries share.

use gpubuf_cuda::nvrtc_available;

/// NVRTC is there, or the test is skipped (a failure when `GPUBUF_REQUIRE` names nvrtc).
pub fn nvrtc() -> bool {
    let required = std::env::var("GPUBUF_REQUIRE").map(|v| v.contains("nvrtc")).unwrap_or(false);
    match nvrtc_available() {
        Ok(()) => true,
        Err(e) if required => panic!("NVRTC required (GPUBUF_REQUIRE has nvrtc) but unavailable: {e}"),
        Err(e) => {
            eprintln!("nvrtc skipped: {e}");
            false
        }
    }
}
