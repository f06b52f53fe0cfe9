//! Hostile inputs to the parts of CUDA user kernels that run without a GPU: launch
//! geometry over extreme sizes and limits, PTX text cut anywhere or holding odd bytes, and
//! argument lists with extreme shared-memory sizes. Nothing panics; every answer is either
//! a typed error or a geometry that covers exactly the work-items asked for.

use gpubuf_core::kernel::{KernelArg, Launch};
use gpubuf_core::Error;
use gpubuf_cuda::geometry::{geometry, Limits};
use gpubuf_cuda::ptx::{entries, Signature};

const EDGES: [usize; 12] = [1, 2, 3, 7, 31, 32, 1000, 65535, 65536, 1_000_003, u32::MAX as usize, usize::MAX];

const H100: Limits =
    Limits { max_threads: 1024, max_block: [1024, 1024, 64], max_grid: [i32::MAX as usize, 65535, 65535] };

/// Checks one answer: an error is InvalidArgument; a geometry covers the launch exactly and
/// keeps to the limits.
fn check(launch: &Launch, lim: &Limits) {
    match geometry(launch, lim) {
        Err(Error::InvalidArgument(_)) => {}
        Err(e) => panic!("{launch:?}: {e:?}"),
        Ok(g) => {
            let grid = [g.grid.0, g.grid.1, g.grid.2].map(|x| x as usize);
            let block = [g.block.0, g.block.1, g.block.2].map(|x| x as usize);
            let threads: usize = block.iter().product();
            assert!(threads <= lim.max_threads, "{launch:?}: {g:?}");
            for d in 0..3 {
                let global = launch.global().get(d).copied().unwrap_or(1);
                assert_eq!(grid[d].checked_mul(block[d]), Some(global), "{launch:?}: {g:?}");
                assert!(block[d] <= lim.max_block[d] && grid[d] <= lim.max_grid[d], "{launch:?}: {g:?}");
            }
            if let Some(local) = launch.local() {
                assert_eq!(&block[..local.len()], local, "{launch:?}: {g:?}");
            }
        }
    }
}

#[test]
fn geometry_over_extreme_sizes_and_limits() {
    let limits = [
        H100,
        Limits { max_threads: 0, max_block: [0; 3], max_grid: [0; 3] },
        Limits { max_threads: 1, max_block: [1; 3], max_grid: [1; 3] },
        Limits { max_threads: 1024, max_block: [1024; 3], max_grid: [usize::MAX; 3] },
        Limits { max_threads: usize::MAX, max_block: [1024; 3], max_grid: [usize::MAX; 3] },
    ];
    for lim in &limits {
        for &x in &EDGES {
            for &y in &[1, 3, 65536, usize::MAX] {
                for global in [vec![x], vec![x, y], vec![y, 2, x]] {
                    let Ok(launch) = Launch::new(&global) else { continue };
                    check(&launch, lim);
                    for &l in &[1, 32, 1024, 65536, usize::MAX] {
                        let local: Vec<usize> =
                            global.iter().map(|&g| if g % l == 0 { l } else { 1 }).collect();
                        if let Ok(with) = launch.clone().with_local(&local) {
                            check(&with, lim);
                        }
                    }
                }
            }
        }
    }
}

const PTX: &str = "// héllo wörld: ünïcode in a comment, and a NUL \0 too\n\
    .visible .entry k(\n .param .u64 .ptr .global .align 8 k_param_0, /* ) */\n .param .align 4 .b8 k_param_1[12],\n .param .f32 k_param_2\n)\n{ ret; }\n\
    .visible .entry kk(\n .param .u32 kk_param_0\n)\n{ ret; }\n\
    .entry k_2 { ret; }\n";

#[test]
fn ptx_cut_anywhere_is_read_or_refused() {
    let all = entries(PTX).unwrap();
    let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["k", "kk", "k_2"]);
    // A name that is a prefix of others finds only itself.
    assert_eq!(Signature::find(PTX, "k").unwrap().params.len(), 3);
    assert_eq!(Signature::find(PTX, "kk").unwrap().params.len(), 1);
    for bad in ["", "kkk", "k\0", "ｋ"] {
        assert!(matches!(Signature::find(PTX, bad), Err(Error::InvalidArgument(_))), "{bad:?}");
    }
    for (at, _) in PTX.char_indices() {
        match entries(&PTX[..at]) {
            Ok(found) => assert!(found.len() <= 3),
            Err(Error::InvalidArgument(m)) => assert!(m.contains("malformed PTX"), "{at}: {m}"),
            Err(e) => panic!("{at}: {e:?}"),
        }
        // Each character replaced by a multi-byte one, too.
        let odd = format!("{}é{}", &PTX[..at], &PTX[at..].chars().skip(1).collect::<String>());
        let _ = entries(&odd);
    }
}

#[test]
fn extreme_shared_memory_sizes_do_not_wrap() {
    let sig = Signature::find(".entry s(.param .u64 s_param_0) { ret; }", "s").unwrap();
    let m = ();
    let args = |n: usize| [KernelArg::Local(n), KernelArg::Memory(&m)];
    assert_eq!(sig.check_args(&args(usize::MAX)).unwrap(), usize::MAX);
    assert_eq!(sig.check_args(&args(1)).unwrap(), 1);
    assert!(sig.check_args(&args(0)).is_err());
    let two = [KernelArg::Local(1), KernelArg::Memory(&m), KernelArg::Local(usize::MAX)];
    assert!(matches!(sig.check_args(&two), Err(Error::InvalidArgument(_))));
    let none = Signature::find(".entry z() { ret; }", "z").unwrap();
    assert_eq!(none.check_args::<()>(&[]).unwrap(), 0);
    assert!(none.check_args(&[KernelArg::<()>::U32(0)]).is_err());
}

mod common;
use common::nvrtc;

/// Unicode in a source, a kernel that is not `extern "C"`, and the same source compiled
/// from several threads at once.
#[test]
fn nvrtc_sources_from_several_threads() {
    if !nvrtc() {
        return;
    }
    let src = "// ünïcode: ∑ and ✓\nextern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }\n\
               __global__ void cpp(float* x) { x[0] = 2.0f; }\n";
    let ptx = gpubuf_cuda::compile_user_ptx(src, "").unwrap();
    assert_eq!(Signature::find(&ptx, "k").unwrap().params.len(), 1);
    match Signature::find(&ptx, "cpp") {
        Err(Error::InvalidArgument(m)) => {
            assert!(m.contains("extern \\\"C\\\"") || m.contains("extern"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    let all = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4).map(|_| s.spawn(|| gpubuf_cuda::compile_user_ptx(src, ""))).collect();
        hs.into_iter().map(|h| h.join().expect("no panic")).collect::<Vec<_>>()
    });
    for p in all {
        assert_eq!(p.unwrap(), ptx);
    }
}
