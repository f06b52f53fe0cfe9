//! CUDA interop: user kernels on gpubuf memory, cudarc slices and foreign pointers adopted,
//! streams and events across the boundary, views in cudarc's launch builder. Needs a GPU
//! (skipped without one unless `GPUBUF_REQUIRE` names cuda).

use gpubuf::cuda::cudarc::driver::result::memcpy_htod_async;
use gpubuf::cuda::cudarc::driver::{LaunchConfig, PushKernelArg};
use gpubuf::cuda::interop::{view_parts, view_ptr, KernelPtr};
use gpubuf::cuda::{CudaBackend, CudaEvent};
use gpubuf::kernel::{KernelArg, Launch};
use gpubuf::{Backend, Buffer as GBuffer, Error, NDBuffer, Order, Result};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

/// The kernels of the CUDA interop tests (`cuda_handles` launches `iota` and `gated` too).
pub(crate) const KERNELS: &str = r#"
extern "C" __global__ void iota(float* base, unsigned long long off, unsigned int n, float scale) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) base[off + i] = scale * (float)i;
}
extern "C" __global__ void twice(const int* src, unsigned long long so, int* dst, unsigned long long d_off) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    dst[d_off + i] = 2 * src[so + i];
}
extern "C" __global__ void axpy(double* y, const double* x, double a) {
    unsigned int i = threadIdx.x;
    y[i] = a * x[i] + y[i];
}
extern "C" __global__ void scratch(int* out) {
    extern __shared__ int tmp[];
    tmp[threadIdx.x] = (int)threadIdx.x + 1;
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = tmp[blockDim.x - 1 - threadIdx.x];
}
// Spins until *flag is set (or about two seconds pass), then writes 1 (2 on a time-out).
extern "C" __global__ void gated(const volatile int* flag, float* out) {
    long long start = clock64();
    int timed_out = 0;
    while (*flag == 0) {
        if (clock64() - start > 4000000000LL) { timed_out = 1; break; }
    }
    out[threadIdx.x] = timed_out ? 2.0f : 1.0f;
}
"#;

fn run(f: impl FnOnce(&CudaBackend) -> Result<()>) {
    gpubuf_testkit::run_cuda(f);
}

/// For the tests that compile user kernels: they skip where NVRTC is absent.
pub(crate) fn run_nvrtc(f: impl FnOnce(&CudaBackend) -> Result<()>) {
    gpubuf_testkit::run_cuda_nvrtc(f);
}

/// A user kernel writes through a view of an array that starts inside a shared
/// allocation; gpubuf reads exactly those elements back.
#[test]
fn a_user_kernel_writes_through_an_offset_view() {
    run_nvrtc(|cu| {
        let whole = GBuffer::zeros(cu, 512)?;
        let a = NDBuffer::<_, f32>::from_buffer(whole.slice(0..256)?, &[64], Order::C)?;
        let b = NDBuffer::<_, f32>::from_buffer(whole.slice(256..512)?, &[64], Order::C)?;
        let v = b.slice(&[10..30])?;
        let (mem, off) = view_parts(&v)?;
        assert_eq!(off, 64 + 10);
        let k = cu.user_kernel(KERNELS, "", "iota")?;
        let args = [KernelArg::Memory(mem), KernelArg::U64(off), KernelArg::U32(20), KernelArg::F32(2.0)];
        k.launch(cu.default_stream(), &Launch::new(&[32])?, &args)?;
        let want: Vec<f32> =
            (0..64).map(|i| if (10..30).contains(&i) { 2.0 * (i - 10) as f32 } else { 0.0 }).collect();
        assert_eq!(b.to_vec()?, want);
        assert!(a.all_equal(0.0)?);
        Ok(())
    });
}

/// gpubuf writes, a user kernel reads (through gpubuf's launch and through cudarc's
/// launch builder with `KernelPtr`s), gpubuf reads the result.
#[test]
fn gpubuf_writes_and_a_user_kernel_reads() {
    run_nvrtc(|cu| {
        let src = NDBuffer::<_, i32>::from_slice(cu, &[4, 8], &(0..32).collect::<Vec<_>>())?;
        let dst = NDBuffer::<_, i32>::zeros(cu, &[4, 8])?;
        let (row1, row2) = (src.slice(&[1..2, 0..8])?, dst.slice(&[2..3, 0..8])?);
        let ((s, so), (d, d_off)) = (view_parts(&row1)?, view_parts(&row2)?);
        let k = cu.user_kernel(KERNELS, "", "twice")?;
        let args = [KernelArg::Memory(s), KernelArg::U64(so), KernelArg::Memory(d), KernelArg::U64(d_off)];
        k.launch(cu.default_stream(), &Launch::new(&[8])?.with_local(&[4])?, &args)?;
        let got = dst.to_vec()?;
        assert_eq!(&got[16..24], &(8..16).map(|x| 2 * x).collect::<Vec<_>>()[..]);
        assert!(got[..16].iter().chain(&got[24..]).all(|&x| x == 0));
        // The same kernel through cudarc, on a cudarc stream over gpubuf's default stream.
        let row0 = src.slice(&[0..1, 0..8])?;
        let row3 = dst.slice(&[3..4, 0..8])?;
        let (sp, dp) = (KernelPtr::of_view(&row0)?, KernelPtr::of_view(&row3)?);
        let zero = 0u64;
        // SAFETY: used only while `cu`'s default stream lives (this closure).
        let stream = unsafe { cu.default_stream().borrow_as_cudarc() };
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (8, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: `twice(const int*, u64, int*, u64)`: two device pointers to 8 ints and two
        // zero offsets; the views outlive the launch (read back below on the same stream).
        unsafe { stream.launch_builder(k.native()).arg(&sp).arg(&zero).arg(&dp).arg(&zero).launch(cfg) }
            .map_err(|e| Error::invalid(format!("cudarc launch: {e:?}")))?;
        assert_eq!(row3.to_vec()?, (0..8).map(|x| 2 * x).collect::<Vec<_>>());
        Ok(())
    });
}

/// Wrong arguments, sizes and names are typed errors; programs are cached by source and
/// options; `--fmad=false` by default gives the CPU's rounding.
#[test]
fn user_kernels_check_before_launching() {
    run_nvrtc(|cu| {
        let p = cu.user_program(KERNELS, "")?;
        assert!(Arc::ptr_eq(&p, &cu.user_program(KERNELS, "")?));
        assert!(!Arc::ptr_eq(&p, &cu.user_program(KERNELS, "--fmad=true")?));
        assert!(matches!(p.kernel(cu, "missing"), Err(Error::InvalidArgument(_))));
        assert!(matches!(p.kernel(cu, "io\0ta"), Err(Error::InvalidArgument(_))));
        assert!(matches!(cu.user_program("__global__ void k( {", ""), Err(Error::Build { .. })));
        let y = NDBuffer::<_, f64>::zeros(cu, &[1])?;
        let k = p.kernel(cu, "axpy")?;
        let s = cu.default_stream();
        let one = Launch::new(&[1])?;
        let m = &**y.buffer().memory();
        for bad in [
            vec![KernelArg::Memory(m), KernelArg::Memory(m)],
            vec![KernelArg::Memory(m), KernelArg::Memory(m), KernelArg::F32(1.0)],
            vec![KernelArg::Memory(m), KernelArg::F64(1.0), KernelArg::F64(1.0)],
            vec![KernelArg::Memory(m), KernelArg::Memory(m), KernelArg::F64(1.0), KernelArg::Local(1 << 30)],
        ] {
            assert!(matches!(k.launch(s, &one, &bad), Err(Error::InvalidArgument(_))), "{bad:?}");
        }
        let args = [KernelArg::Memory(m), KernelArg::Memory(m), KernelArg::F64(1.0)];
        assert!(matches!(
            k.launch(s, &Launch::new(&[4096])?.with_local(&[4096])?, &args),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            k.launch(s, &Launch::new(&[1, 1 << 20, 1])?.with_local(&[1, 1, 1])?, &args),
            Err(Error::InvalidArgument(_))
        ));
        // a * x + y with two roundings is 0 here; a fused multiply-add gives 2^-60.
        let a = 1.0 + 2f64.powi(-30);
        let fused = |opts: &str| -> Result<f64> {
            let x = NDBuffer::<_, f64>::from_slice(cu, &[1], &[a])?;
            let y = NDBuffer::<_, f64>::from_slice(cu, &[1], &[-(1.0 + 2f64.powi(-29))])?;
            let k = cu.user_kernel(KERNELS, opts, "axpy")?;
            let args = [
                KernelArg::Memory(&**y.buffer().memory()),
                KernelArg::Memory(&**x.buffer().memory()),
                KernelArg::F64(a),
            ];
            k.launch(s, &one, &args)?;
            y.get(&[0])
        };
        assert_eq!(fused("")?, a * a - (1.0 + 2f64.powi(-29)), "the CPU's two roundings");
        assert_eq!(fused("")?, 0.0);
        assert_eq!(fused("--fmad=true")?, 2f64.powi(-60));
        Ok(())
    });
}

/// `Local(bytes)` sizes the kernel's `extern __shared__` array.
#[test]
fn local_is_dynamic_shared_memory() {
    run_nvrtc(|cu| {
        let out = NDBuffer::<_, i32>::zeros(cu, &[2, 64])?;
        let k = cu.user_kernel(KERNELS, "", "scratch")?;
        let args = [KernelArg::Local(64 * 4), KernelArg::Memory(&**out.buffer().memory())];
        k.launch(cu.default_stream(), &Launch::new(&[128])?.with_local(&[64])?, &args)?;
        let want: Vec<i32> = (0..2).flat_map(|_| (1..=64).rev()).collect();
        assert_eq!(out.to_vec()?, want);
        Ok(())
    });
}

/// A cudarc slice becomes gpubuf memory without a copy, stays alive while any view does,
/// and is freed once, by its last view (the driver records no error).
#[test]
fn an_adopted_slice_round_trips_and_is_freed_once() {
    run(|cu| {
        let user = cu.context().new_stream().map_err(|e| Error::invalid(format!("{e:?}")))?;
        let host: Vec<f32> = (0..256).map(|i| i as f32).collect();
        let slice = user.clone_htod(&host).map_err(|e| Error::invalid(format!("{e:?}")))?;
        let buf = cu.adopt_slice(slice)?;
        assert!(buf.memory().is_adopted());
        assert_eq!(buf.len(), 1024);
        let nd = NDBuffer::<_, f32>::from_buffer(buf, &[16, 16], Order::C)?;
        assert_eq!(nd.to_vec()?, host, "the slice's contents, joined to the default stream");
        let view = nd.slice(&[4..5, 0..16])?;
        drop(nd);
        view.fill(-1.0)?;
        assert_eq!(view.to_vec()?, vec![-1.0; 16]);
        drop(view);
        cu.synchronize(cu.default_stream())?;
        user.synchronize().map_err(|e| Error::invalid(format!("{e:?}")))?;
        cu.context().check_err().map_err(|e| Error::invalid(format!("a driver error at the free: {e:?}")))?;
        // A slice of another context would be refused; one of this context with a wrong
        // length cannot be made, so the error paths are the context check only.
        Ok(())
    });
}

static GUARD_DROPS: AtomicUsize = AtomicUsize::new(0);
struct Guard;
impl Drop for Guard {
    fn drop(&mut self) {
        GUARD_DROPS.fetch_add(1, SeqCst);
    }
}

/// Memory adopted by raw pointer is used in place, never freed by gpubuf, and its guard is
/// dropped exactly once, after the last view; bad ranges are errors that drop the guard.
#[test]
fn a_raw_pointer_is_never_freed_and_its_guard_drops_once() {
    run(|cu| {
        let stream = cu.context().default_stream();
        let err = |e| Error::invalid(format!("{e:?}"));
        let owned = stream.alloc_zeros::<f64>(128).map_err(err)?;
        let ptr = {
            use gpubuf::cuda::cudarc::driver::DevicePtr;
            let (p, _rec) = owned.device_ptr(&stream);
            p
        };
        stream.synchronize().map_err(err)?;
        GUARD_DROPS.store(0, SeqCst);
        // SAFETY: `owned` is 1024 bytes of this context and outlives the buffer (dropped
        // at the end of this closure, after the buffer and its views).
        let buf = unsafe { cu.adopt_ptr(ptr + 512, 512, Box::new(Guard))? };
        let nd = NDBuffer::<_, f64>::from_buffer(buf, &[64], Order::C)?;
        nd.copy_from(&NDBuffer::from_slice(cu, &[64], &(0..64).map(f64::from).collect::<Vec<_>>())?)?;
        let view = nd.slice(&[8..16])?;
        drop(nd);
        assert_eq!(GUARD_DROPS.load(SeqCst), 0, "a view is still alive");
        assert_eq!(view.to_vec()?, (8..16).map(f64::from).collect::<Vec<_>>());
        drop(view);
        assert_eq!(GUARD_DROPS.load(SeqCst), 1);
        // Never freed: the owner still reads what gpubuf wrote.
        let back = stream.clone_dtoh(&owned).map_err(err)?;
        assert_eq!(&back[64..], &(0..64).map(f64::from).collect::<Vec<_>>()[..]);
        assert!(back[..64].iter().all(|&x| x == 0.0));
        for (p, n) in [(0, 8), (ptr + 512, 1 << 40), (u64::MAX - 4, 8)] {
            // SAFETY: every range is refused before any use.
            let r = unsafe { cu.adopt_ptr(p, n, Box::new(Guard)) };
            assert!(matches!(r, Err(Error::InvalidArgument(_))), "{p:#x} + {n}");
        }
        assert_eq!(GUARD_DROPS.load(SeqCst), 4, "each refused guard dropped once");
        drop(owned);
        Ok(())
    });
}

/// A kernel on the user's (non-blocking) stream, gated on a flag, is joined by gpubuf's
/// default stream with `stream_wait` on the user's event: the default stream then waits
/// for the kernel (an event recorded on it stays incomplete while the kernel is gated),
/// and once a stream gpubuf does not know sets the flag, a read on the default stream sees
/// the kernel's result. Nothing here waits on the host before the flag is set: whether
/// the driver would order the default stream after the user's without the join (one
/// driver made a pageable read wait) is not gpubuf's promise either way.
#[test]
fn a_user_stream_is_joined_by_its_event() {
    alone("cuda::a_user_stream_is_joined_by_its_event_alone");
}

/// The body of [`a_user_stream_is_joined_by_its_event`], in a process of its own.
#[test]
#[ignore = "run alone in a child process by a_user_stream_is_joined_by_its_event"]
fn a_user_stream_is_joined_by_its_event_alone() {
    run_nvrtc(|cu| {
        let err = |e| Error::invalid(format!("{e:?}"));
        let flag = NDBuffer::<_, i32>::zeros(cu, &[1])?;
        let out = NDBuffer::<_, f32>::zeros(cu, &[32])?;
        cu.synchronize(cu.default_stream())?;
        let user = cu.context().new_stream().map_err(err)?;
        let on_user = cu.stream_from_cudarc(user.clone())?;
        assert!(Arc::ptr_eq(on_user.cudarc().expect("wraps cudarc"), &user));
        let k = cu.user_kernel(KERNELS, "", "gated")?;
        let args =
            [KernelArg::Memory(&**flag.buffer().memory()), KernelArg::Memory(&**out.buffer().memory())];
        let ran = k.launch(&on_user, &Launch::new(&[32])?, &args)?;
        assert!(!cu.event_complete(&ran)?, "gated: the kernel waits for the flag");
        let done = CudaEvent::from_cudarc(cu, user.record_event(None).map_err(err)?)?;
        cu.stream_wait(cu.default_stream(), &done)?;
        let after_join = cu.record_event(cu.default_stream())?;
        assert!(!cu.event_complete(&after_join)?, "the joined default stream waits for the kernel");
        let setter = cu.context().new_stream().map_err(err)?; // unknown to gpubuf
                                                              // SAFETY: writes the 4 bytes of `flag`, alive until the end; `ONE` is never freed.
        unsafe { memcpy_htod_async(view_ptr(&flag)?, &ONE, setter.cu_stream()) }.map_err(err)?;
        setter.synchronize().map_err(err)?;
        assert_eq!(out.to_vec()?, vec![1.0; 32], "joined (2.0 would be a time-out)");
        user.synchronize().map_err(err)?;
        Ok(())
    });
}

static ONE: [i32; 1] = [1];

/// Runs the ignored test `name` (its full path in this binary) alone in a child process:
/// the tests that gate a kernel on a flag. On one driver a pageable copy, or a call that
/// waited on the host, in another thread of the process stalled the call that sets the
/// flag until the gated kernel timed out; alone in a process (as with `--test-threads=1`)
/// they passed every time.
pub(crate) fn alone(name: &str) {
    if gpubuf_testkit::cuda().is_none() {
        return;
    }
    let out = gpubuf_testkit::child_test(name).output();
    let out = out.unwrap_or_else(|e| panic!("running {name}: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name}: {text}");
    assert!(text.contains("1 passed"), "{name} ran: {text}");
}
