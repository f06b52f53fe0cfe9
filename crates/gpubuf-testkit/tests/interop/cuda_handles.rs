//! CUDA memory and streams gpubuf owns are never taken over a second time, pointer
//! parameters of user kernels get gpubuf memory only, and buffers outlive the kernels that
//! use them on non-blocking streams. Needs a GPU (skipped without one unless
//! `GPUBUF_REQUIRE` names cuda).

use gpubuf::cuda::cudarc::driver::result::memcpy_htod_async;
use gpubuf::cuda::interop::{view_parts, view_ptr};
use gpubuf::cuda::CudaBackend;
use gpubuf::kernel::{KernelArg, Launch};
use gpubuf::{Backend, Error, NDBuffer, Result};
use std::time::Duration;

use super::cuda::{alone, run_nvrtc, KERNELS};

fn run(f: impl FnOnce(&CudaBackend) -> Result<()>) {
    gpubuf_testkit::run_cuda(f);
}

fn err(e: impl std::fmt::Debug) -> Error {
    Error::invalid(format!("cudarc: {e:?}"))
}

/// The call was refused as taking over something gpubuf owns. A value it returned instead
/// is forgotten, so that the failing test does not go on to free gpubuf's memory.
fn refused<T>(r: Result<T>, what: &str) {
    match r {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("gpubuf's already"), "{what}: {m}"),
        Ok(v) => {
            std::mem::forget(v);
            panic!("{what}: something gpubuf owns was taken over a second time");
        }
        Err(e) => panic!("{what}: expected InvalidArgument, got {e:?}"),
    }
}

/// cudarc slices over gpubuf's memory (whole or in part) and cudarc wrappers of gpubuf's
/// streams are refused; nothing is freed or destroyed, and gpubuf's objects keep working.
#[test]
fn memory_and_streams_gpubuf_owns_are_not_taken_over_again() {
    run(|cu| {
        let nd = NDBuffer::<_, u8>::from_slice(cu, &[256], &[5; 256])?;
        let ptr = nd.buffer().memory().device_ptr();
        let stream = cu.context().default_stream();
        for (at, len) in [(ptr, 256), (ptr + 64, 16), (ptr - 16, 32)] {
            // SAFETY: the contract is broken on purpose (the memory is gpubuf's): the slice
            // must be refused before anything could free it.
            let twin = unsafe { stream.upgrade_device_ptr::<u8>(at, len) };
            refused(cu.adopt_slice(twin), "adopt_slice");
        }
        nd.fill(6)?;
        assert_eq!(nd.to_vec()?, vec![6; 256]);
        let s = cu.new_stream()?;
        for gpubuf_stream in [cu.default_stream(), &s] {
            // SAFETY: the wrapper is refused and dropped within this loop, while the gpubuf
            // stream lives.
            let borrowed = unsafe { gpubuf_stream.borrow_as_cudarc() };
            refused(cu.stream_from_cudarc(borrowed), "stream_from_cudarc");
        }
        cu.synchronize(&s)?;
        // A cudarc stream gpubuf wraps may be wrapped again: the `Arc` keeps it alive.
        let user = cu.context().new_stream().map_err(err)?;
        let on_user = cu.stream_from_cudarc(user.clone())?;
        // SAFETY: the `Arc` returned is the cudarc stream's own, and the stream made of it
        // is dropped before `on_user`.
        let again = cu.stream_from_cudarc(unsafe { on_user.borrow_as_cudarc() })?;
        drop(again);
        drop(on_user);
        cu.synchronize(cu.default_stream())?;
        cu.context().check_err().map_err(err)?;
        Ok(())
    });
}

/// A pointer parameter takes gpubuf memory only: an address given as an integer is refused
/// by `launch` before anything runs, and taken by the `unsafe` `launch_raw`.
#[test]
fn a_pointer_parameter_takes_gpubuf_memory_only_at_launch() {
    run_nvrtc(|cu| {
        let nd = NDBuffer::<_, f32>::zeros(cu, &[64])?;
        let v = nd.slice(&[8..40])?;
        let k = cu.user_kernel(KERNELS, "", "iota")?;
        let one = Launch::new(&[32])?;
        let address = view_ptr(&v)?;
        let raw = [KernelArg::U64(address), KernelArg::U64(0), KernelArg::U32(32), KernelArg::F32(1.0)];
        let r = k.launch(cu.default_stream(), &one, &raw);
        assert!(matches!(&r, Err(Error::InvalidArgument(m)) if m.contains("parameter 0")), "{r:?}");
        assert!(nd.all_equal(0.0)?, "nothing ran");
        let (mem, off) = view_parts(&v)?;
        let checked = [KernelArg::Memory(mem), KernelArg::U64(off), KernelArg::U32(32), KernelArg::F32(1.0)];
        k.launch(cu.default_stream(), &one, &checked)?;
        assert_eq!(v.to_vec()?, (0..32).map(|i| i as f32).collect::<Vec<_>>());
        let twice = [KernelArg::U64(address), KernelArg::U64(0), KernelArg::U32(32), KernelArg::F32(2.0)];
        // SAFETY: `address` is the first of the 32 floats of `v` (device memory of this
        // context, the kernel touches those 32), which lives with `nd` past the kernel (it is
        // waited for below) and is used by nothing else meanwhile.
        let done = unsafe { k.launch_raw(cu.default_stream(), &one, &twice) }?;
        cu.wait_event(&done)?;
        assert_eq!(v.to_vec()?, (0..32).map(|i| 2.0 * i as f32).collect::<Vec<_>>());
        Ok(())
    });
}

static ONE: [i32; 1] = [1];

/// A buffer dropped right after a launch on a non-blocking stream, with the gpubuf stream
/// over it dropped too, is freed only after the kernel: the kernel is gated on a flag set
/// later from a stream gpubuf does not know, and the free (on the default stream) waits.
#[test]
fn a_buffer_dropped_after_a_launch_on_a_user_stream_outlives_the_kernel() {
    alone("cuda_handles::a_buffer_dropped_after_a_launch_on_a_user_stream_outlives_the_kernel_alone");
}

/// The body of the test above, in a process of its own.
#[test]
#[ignore = "run alone in a child process by a_buffer_dropped_after_a_launch_on_a_user_stream_outlives_the_kernel"]
fn a_buffer_dropped_after_a_launch_on_a_user_stream_outlives_the_kernel_alone() {
    run_nvrtc(|cu| {
        let flag = NDBuffer::<_, i32>::zeros(cu, &[1])?;
        let out = NDBuffer::<_, f32>::zeros(cu, &[32])?;
        cu.synchronize(cu.default_stream())?;
        let user = cu.context().new_stream().map_err(err)?; // non-blocking
        let on_user = cu.stream_from_cudarc(user.clone())?;
        let k = cu.user_kernel(KERNELS, "", "gated")?;
        let args =
            [KernelArg::Memory(&**flag.buffer().memory()), KernelArg::Memory(&**out.buffer().memory())];
        let ran = k.launch(&on_user, &Launch::new(&[32])?, &args)?;
        drop(on_user);
        drop(out); // the free is queued on the default stream
        let after_free = cu.record_event(cu.default_stream())?;
        std::thread::sleep(Duration::from_millis(100));
        assert!(!cu.event_complete(&ran)?, "gated: the kernel waits for the flag");
        assert!(!cu.event_complete(&after_free)?, "the free waits for the running kernel");
        let setter = cu.context().new_stream().map_err(err)?; // unknown to gpubuf
                                                              // SAFETY: writes the 4 bytes of `flag`, alive until the end; `ONE` is never freed.
        unsafe { memcpy_htod_async(view_ptr(&flag)?, &ONE, setter.cu_stream()) }.map_err(err)?;
        setter.synchronize().map_err(err)?;
        cu.wait_event(&after_free)?;
        assert!(cu.event_complete(&ran)?);
        user.synchronize().map_err(err)?;
        cu.context().check_err().map_err(err)?;
        Ok(())
    });
}
