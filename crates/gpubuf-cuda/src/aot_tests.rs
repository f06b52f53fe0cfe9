//! Tests of [`super`]: image choice, the embedded images and sources, NVRTC at run time.

use super::*;

fn first(major: u32, minor: u32) -> Choice {
    candidates(PLAN, major, minor)[0]
}

#[test]
fn each_capability_takes_the_nearest_cubin_then_ptx_then_nvrtc() {
    assert_eq!(first(7, 0), Choice::Cubin(70));
    assert_eq!(first(7, 2), Choice::Cubin(70));
    assert_eq!(first(7, 5), Choice::Cubin(75));
    assert_eq!(first(8, 0), Choice::Cubin(80));
    assert_eq!(first(8, 6), Choice::Cubin(86));
    assert_eq!(first(8, 7), Choice::Cubin(86));
    assert_eq!(first(8, 9), Choice::Cubin(89));
    assert_eq!(first(9, 0), Choice::Cubin(90));
    assert_eq!(candidates(PLAN, 8, 6), [Choice::Cubin(86), Choice::Ptx(70), Choice::Nvrtc]);
    // No cubin of the major: the PTX, JIT-compiled by the driver.
    for (major, minor) in [(10, 0), (10, 3), (12, 0), (9, 9)] {
        let c = candidates(PLAN, major, minor);
        let want = if major == 9 { Choice::Cubin(90) } else { Choice::Ptx(70) };
        assert_eq!(c[0], want, "{major}.{minor}");
    }
    assert_eq!(candidates(PLAN, 12, 0), [Choice::Ptx(70), Choice::Nvrtc]);
    // Pre-Volta: compute_70 PTX cannot run there, only NVRTC can.
    for (major, minor) in [(6, 1), (6, 0), (5, 2), (3, 5), (0, 0)] {
        assert_eq!(candidates(PLAN, major, minor), [Choice::Nvrtc], "{major}.{minor}");
    }
    assert_eq!(first(u32::MAX, u32::MAX), Choice::Ptx(70));
}

#[test]
fn only_image_rejections_fall_through() {
    assert!(image_rejected(CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION));
    assert!(image_rejected(CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU));
    assert!(image_rejected(CUresult::CUDA_ERROR_INVALID_PTX));
    assert!(!image_rejected(CUresult::CUDA_ERROR_OUT_OF_MEMORY));
    assert!(!image_rejected(CUresult::CUDA_ERROR_INVALID_CONTEXT));
    assert!(!image_rejected(CUresult::CUDA_SUCCESS));
}

/// Reads a little-endian integer of `N` bytes at `at`.
/// The SM version a cubin is for: the low byte of e_flags in the ELF ABI version 7
/// cubins before CUDA 13, the second byte from ABI version 8 (CUDA 13's NVRTC).
fn cubin_arch(cubin: &[u8]) -> u64 {
    let flags = le::<4>(cubin, 48);
    if cubin[8] >= 8 {
        (flags >> 8) & 0xff
    } else {
        flags & 0xff
    }
}

fn le<const N: usize>(data: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b[..N].copy_from_slice(&data[at..at + N]);
    u64::from_le_bytes(b)
}

#[test]
fn every_cubin_is_a_cuda_elf_for_its_architecture_naming_the_kernels() {
    let archs: Vec<u32> = PLAN.cubins.iter().map(|c| c.0).collect();
    assert_eq!(archs, [70, 75, 80, 86, 89, 90]);
    for &(arch, compressed) in PLAN.cubins {
        let cubin = &inflate(compressed).expect("inflates")[..];
        assert_eq!(&cubin[..4], b"\x7fELF", "sm_{arch}");
        assert_eq!(cubin[4], 2, "sm_{arch}: 64-bit ELF");
        assert_eq!(le::<2>(cubin, 18), 190, "sm_{arch}: e_machine EM_CUDA");
        assert_eq!(cubin_arch(cubin), u64::from(arch), "sm_{arch}: e_flags");
        for w in [1, 2, 4, 8] {
            for kernel in [format!("gather_{w}"), format!("scatter_{w}")] {
                let sym = format!(".text.{kernel}\0");
                let found = cubin.windows(sym.len()).any(|s| s == sym.as_bytes());
                assert!(found, "sm_{arch} lacks {kernel}");
            }
        }
    }
}

#[test]
fn the_ptx_is_isa_8_0_for_sm_70_with_every_kernel() {
    assert_eq!(PLAN.ptx.0, 70);
    let ptx = inflate(PLAN.ptx.1).expect("inflates");
    assert!(!ptx.contains(&0), "the PTX file holds no NUL byte");
    let ptx = std::str::from_utf8(&ptx).expect("PTX is text");
    assert!(ptx.lines().any(|l| l == ".version 8.0"), "PTX ISA 8.0 (drivers from R525)");
    assert!(ptx.lines().any(|l| l == ".target sm_70"));
    for w in [1, 2, 4, 8] {
        assert!(ptx.contains(&format!(".entry gather_{w}(")), "gather_{w}");
        assert!(ptx.contains(&format!(".entry scatter_{w}(")), "scatter_{w}");
    }
}

/// The run-time fallback, compiled by whatever NVRTC is installed (no GPU needed).
#[test]
fn nvrtc_compiles_a_cubin_for_the_oldest_device_it_can() {
    let required = std::env::var("GPUBUF_REQUIRE").map(|v| v.contains("nvrtc")).unwrap_or(false);
    if let Err(e) = nvrtc_available() {
        assert!(!required, "NVRTC required (GPUBUF_REQUIRE has nvrtc) but unavailable: {e}");
        eprintln!("nvrtc skipped: {e}");
        return;
    }
    let source = PLAN.text;
    let archs = nvrtc_archs();
    // sm_61 where this NVRTC still compiles for it (CUDA 12); CUDA 13 starts at sm_75,
    // and then the refusal names the range and the oldest one is compiled instead.
    let (major, minor) = if archs.contains(&61) {
        (6, 1)
    } else {
        let refused = nvrtc_cubin("plan.cu", source, &[], 6, 1);
        assert!(
            matches!(&refused, Err(Error::Build { log, .. }) if log.contains("compute capability 6.1")),
            "{refused:?}"
        );
        let oldest = *archs.first().expect("NVRTC lists its architectures");
        (oldest / 10, oldest % 10)
    };
    let cubin = nvrtc_cubin("plan.cu", source, &[], major, minor).expect("plan.cu compiles");
    assert_eq!(&cubin[..4], b"\x7fELF");
    assert_eq!(cubin_arch(&cubin), u64::from(major * 10 + minor), "e_flags: the architecture");
    assert!(cubin.windows(16).any(|w| w == b".text.scatter_8\0"));
    let bad = nvrtc_cubin("bad.cu", "this is not CUDA", &[], major, minor);
    assert!(matches!(bad, Err(Error::Build { .. })), "{bad:?}");
}

#[test]
fn a_corrupt_image_is_an_error() {
    let mut bad = PLAN.cubins[0].1.to_vec();
    bad.truncate(bad.len() / 2);
    assert!(matches!(inflate(&bad), Err(Error::BackendUnavailable { .. })));
    assert!(matches!(inflate(b"not zlib"), Err(Error::BackendUnavailable { .. })));
}

#[test]
fn every_source_is_embedded_and_aligned_images_end_in_nul() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    for e in embedded() {
        assert_eq!(
            e.parts.first(),
            Some(&"kernels/cuda/prelude.cuh"),
            "{}: the CUDA prelude first",
            e.source
        );
    }
    assert!(embedded().iter().any(|e| e.source == PLAN.source));
    for data in [&b""[..], b"1234567", b"12345678", b"123456789"] {
        let words = aligned(data);
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(&bytes[..data.len()], data);
        assert!(bytes.len() > data.len() && bytes[data.len()..].iter().all(|&b| b == 0));
    }
    // The sources themselves: read in the repository; a test binary copied elsewhere (the
    // GPU bundle) has none beside it.
    if !std::path::Path::new(&format!("{root}/kernels/shared")).is_dir() {
        eprintln!("kernel sources skipped: {root}/kernels is not here");
        return;
    }
    let mut files = Vec::new();
    for dir in ["kernels/cuda", "kernels/shared"] {
        for f in std::fs::read_dir(format!("{root}/{dir}")).expect("a kernels folder").flatten() {
            files.push(format!("{dir}/{}", f.file_name().to_string_lossy()));
        }
    }
    assert!(files.len() >= 3, "{files:?}");
    for file in &files {
        // The signature probe is appended to images, not a part of a kernel's text.
        let used =
            file == "kernels/cuda/probe.cuh" || embedded().iter().any(|e| e.parts.contains(&file.as_str()));
        assert!(used, "{file} is part of no embedded kernel: run `cargo xtask cuda-kernels`");
    }
    for e in embedded() {
        let text: String =
            e.parts.iter().map(|p| std::fs::read_to_string(format!("{root}/{p}")).expect(p)).collect();
        assert_eq!(e.text, text, "{}: the text is its parts", e.source);
    }
}
