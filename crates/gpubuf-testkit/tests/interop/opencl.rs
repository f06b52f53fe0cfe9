//! OpenCL interop: user kernels on gpubuf memory, foreign buffers, queues and events.

use gpubuf::kernel::{KernelArg, Launch};
use gpubuf::opencl::interop::view_parts;
use gpubuf::opencl::opencl3::command_queue::CommandQueue;
use gpubuf::opencl::opencl3::kernel::Kernel;
use gpubuf::opencl::opencl3::memory::{self as clmem, Buffer, ClMem, CL_MEM_READ_WRITE};
use gpubuf::opencl::{ClEvent, OpenClBackend};
use gpubuf::{Backend, Buffer as GBuffer, Error, NDBuffer, Order, Result};
use std::ptr;
use std::sync::Arc;

const IOTA: &str = r#"
__kernel void iota(__global float* base, ulong off, uint n, float scale) {
    size_t i = get_global_id(0);
    if (i < n) base[off + i] = scale * (float)i;
}
__kernel void twice(__global const int* src, ulong so, __global int* dst, ulong d_off) {
    size_t i = get_global_id(0);
    dst[d_off + i] = 2 * src[so + i];
}
__kernel void slow(__global float* out, uint iters) {
    float x = 0.0f;
    for (uint k = 0; k < iters; k++) x = x * 0.999f + 1.0f;
    out[get_global_id(0)] = x > 0.0f ? 1.0f : 2.0f;
}
__kernel void scratch(__global int* out, __local int* tmp) {
    tmp[get_local_id(0)] = 1;
    out[get_global_id(0)] = tmp[get_local_id(0)];
}
"#;

fn run(f: impl FnOnce(&OpenClBackend) -> Result<()>) {
    gpubuf_testkit::run_opencl(f);
}

fn mem_refs<T>(b: &Buffer<T>) -> u32 {
    b.reference_count().expect("CL_MEM_REFERENCE_COUNT")
}

/// A user kernel writes through a view of an array that starts inside a shared
/// allocation; gpubuf reads exactly those elements back.
#[test]
fn a_user_kernel_writes_through_an_offset_view() {
    run(|cl| {
        let whole = GBuffer::zeros(cl, 512)?;
        let a = NDBuffer::<_, f32>::from_buffer(whole.slice(0..256)?, &[64], Order::C)?;
        let b = NDBuffer::<_, f32>::from_buffer(whole.slice(256..512)?, &[64], Order::C)?;
        let v = b.slice(&[10..30])?;
        let (mem, off) = view_parts(&v)?;
        assert_eq!(off, 64 + 10);
        let k = cl.user_kernel(IOTA, "", "iota")?;
        let args = [KernelArg::Memory(mem), KernelArg::U64(off), KernelArg::U32(20), KernelArg::F32(2.0)];
        k.launch(cl.default_stream(), &Launch::new(&[32])?, &args)?;
        let got = b.to_vec()?;
        let want: Vec<f32> =
            (0..64).map(|i| if (10..30).contains(&i) { 2.0 * (i - 10) as f32 } else { 0.0 }).collect();
        assert_eq!(got, want);
        assert!(a.all_equal(0.0)?);
        Ok(())
    });
}

/// gpubuf writes, a user kernel reads (a view with an offset) and writes another array.
#[test]
fn a_user_kernel_reads_what_gpubuf_wrote() {
    run(|cl| {
        let src = NDBuffer::<_, i32>::from_slice(cl, &[40], &(0..40).collect::<Vec<_>>())?;
        let dst = NDBuffer::<_, i32>::zeros(cl, &[16])?;
        let part = src.slice(&[7..23])?;
        let (s, so) = view_parts(&part)?;
        let (d, d_off) = view_parts(&dst)?;
        let k = cl.user_kernel(IOTA, "", "twice")?;
        let args = [KernelArg::Memory(s), KernelArg::U64(so), KernelArg::Memory(d), KernelArg::U64(d_off)];
        k.launch(cl.default_stream(), &Launch::new(&[16])?.with_local(&[4])?, &args)?;
        assert_eq!(dst.to_vec()?, (7..23).map(|v| 2 * v).collect::<Vec<_>>());
        // Programs and kernels are compiled once.
        assert!(Arc::ptr_eq(&cl.user_program(IOTA, "")?, &cl.user_program(IOTA, "")?));
        Ok(())
    });
}

/// A slow kernel on the user's own queue, then a gpubuf read joined to the user's event:
/// the read sees the kernel's result.
#[test]
fn a_user_queue_is_joined_with_its_event() {
    run(|cl| {
        let out = NDBuffer::<_, f32>::zeros(cl, &[4])?;
        let user_queue = CommandQueue::create_default_with_properties(cl.context(), 0, 0).expect("queue");
        let program = cl.user_program(IOTA, "")?;
        let kernel = Kernel::create(program.native(), "slow").expect("kernel");
        let iters: u32 = 20_000_000;
        // SAFETY: the arguments match `slow(__global float*, uint)`; `out` outlives the
        // kernel (it is read after the join below).
        let ev = unsafe {
            kernel.set_arg(0, &out.buffer().memory().raw()).expect("arg 0");
            kernel.set_arg(1, &iters).expect("arg 1");
            user_queue.enqueue_nd_range_kernel(
                kernel.get(),
                1,
                ptr::null(),
                [4usize].as_ptr(),
                ptr::null(),
                &[],
            )
        }
        .expect("enqueue");
        user_queue.flush().expect("flush");
        // SAFETY: `ev` holds the reference the enqueue call returned, handed over here.
        let ev = unsafe { ClEvent::from_native(ev) }?;
        cl.stream_wait(cl.default_stream(), &ev)?;
        assert_eq!(out.to_vec()?, vec![1.0; 4]);
        assert!(cl.event_complete(&ev)?);
        // The same through a gpubuf stream over the user's queue.
        // SAFETY: `user_queue` holds the reference clCreateCommandQueue returned, handed over.
        let stream = unsafe { cl.stream_from_queue(user_queue) }?;
        let k = program.kernel(cl, "slow")?;
        let again = NDBuffer::<_, f32>::zeros(cl, &[4])?;
        let ev = k.launch(
            &stream,
            &Launch::new(&[4])?,
            &[KernelArg::Memory(again.buffer().memory()), KernelArg::U32(iters)],
        )?;
        cl.stream_wait(cl.default_stream(), &ev)?;
        assert_eq!(again.to_vec()?, vec![1.0; 4]);
        // The other way: the user's read waits for a gpubuf launch through its event.
        let gpu_stream = cl.new_stream()?;
        let third = NDBuffer::<_, f32>::zeros(cl, &[4])?;
        let mem = third.buffer().memory();
        let ev =
            k.launch(&gpu_stream, &Launch::new(&[4])?, &[KernelArg::Memory(mem), KernelArg::U32(iters)])?;
        let mut bytes = [0u8; 16];
        // SAFETY: a blocking read of 16 bytes of a 16-byte buffer into a 16-byte slice.
        unsafe { stream.queue().enqueue_read_buffer(mem.native(), 1, 0, &mut bytes, &[ev.native().get()]) }
            .expect("read");
        assert_eq!(bytemuck::cast::<[u8; 16], [f32; 4]>(bytes), [1.0; 4]);
        Ok(())
    });
}

/// Every mismatch is a typed error before anything is enqueued.
#[test]
fn wrong_arguments_and_sizes_are_typed_errors() {
    run(|cl| {
        let a = NDBuffer::<_, f32>::zeros(cl, &[8])?;
        let m = a.buffer().memory();
        let k = cl.user_kernel(IOTA, "", "iota")?;
        let one = Launch::new(&[8])?;
        let bad = |args: &[gpubuf::opencl::ClArg<'_>]| k.launch(cl.default_stream(), &one, args);
        let cases: [&[gpubuf::opencl::ClArg<'_>]; 5] = [
            &[KernelArg::Memory(m), KernelArg::U64(0), KernelArg::U32(8)],
            &[KernelArg::Memory(m), KernelArg::U64(0), KernelArg::F32(8.0), KernelArg::F32(1.0)],
            &[KernelArg::Memory(m), KernelArg::U32(0), KernelArg::U32(8), KernelArg::F32(1.0)],
            &[KernelArg::U64(0), KernelArg::U64(0), KernelArg::U32(8), KernelArg::F32(1.0)],
            &[KernelArg::Memory(m), KernelArg::Memory(m), KernelArg::U32(8), KernelArg::F32(1.0)],
        ];
        for args in cases {
            let r = bad(args);
            assert!(matches!(r, Err(Error::InvalidArgument(_))), "{args:?}: {r:?}");
        }
        assert!(a.all_equal(0.0)?, "nothing ran");
        let s = cl.user_kernel(IOTA, "", "scratch")?;
        let local = Launch::new(&[8])?.with_local(&[4])?;
        let r = s.launch(cl.default_stream(), &local, &[KernelArg::Memory(m), KernelArg::Memory(m)]);
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        let r = s.launch(cl.default_stream(), &local, &[KernelArg::Memory(m), KernelArg::Local(0)]);
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        s.launch(cl.default_stream(), &local, &[KernelArg::Memory(m), KernelArg::Local(16)])?;
        assert_eq!(
            NDBuffer::<_, i32>::from_buffer(a.buffer().clone(), &[8], Order::C)?.to_vec()?,
            vec![1; 8]
        );
        let huge = Launch::new(&[1 << 24])?.with_local(&[1 << 24])?;
        let r = s.launch(cl.default_stream(), &huge, &[KernelArg::Memory(m), KernelArg::Local(16)]);
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        assert!(matches!(cl.user_kernel(IOTA, "", "nope"), Err(Error::InvalidArgument(_))));
        // Another context: its stream, its buffers and kernels do not mix with ours.
        let other = OpenClBackend::new()?;
        let r = s.launch(other.default_stream(), &local, &[KernelArg::Memory(m), KernelArg::Local(16)]);
        assert!(matches!(r, Err(Error::DeviceMismatch(_))), "{r:?}");
        let foreign = NDBuffer::<_, i32>::zeros(&other, &[8])?;
        let r = s.launch(
            cl.default_stream(),
            &local,
            &[KernelArg::Memory(foreign.buffer().memory()), KernelArg::Local(16)],
        );
        assert!(matches!(r, Err(Error::DeviceMismatch(_))), "{r:?}");
        assert!(matches!(cl.user_program(IOTA, "")?.kernel(&other, "iota"), Err(Error::DeviceMismatch(_))));
        Ok(())
    });
}

#[test]
fn a_build_error_carries_the_log() {
    run(|cl| {
        let src = "__kernel void k(__global int* a) {\n    a[0] = undeclared_thing;\n}\n";
        match cl.user_program(src, "") {
            Err(Error::Build { log, .. }) => assert!(log.contains("undeclared_thing"), "{log}"),
            other => panic!("expected a build error, got {other:?}"),
        }
        Ok(())
    });
}

/// No fused multiply-add unless asked for: `a * b + c` rounds twice, as on the CPU.
#[test]
fn user_kernels_do_not_contract_multiply_add() {
    run(|cl| {
        let n = 4096;
        let gen = |seed: u32| -> Vec<f32> {
            (0..n as u32)
                .map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed) % 10_007) as f32 / 997.0 + 0.1)
                .collect()
        };
        let (a, b, c) = (gen(1), gen(7), gen(13));
        let src = "__kernel void madd(__global const float* a, __global const float* b,\n\
                   __global const float* c, __global float* out) {\n\
                   size_t i = get_global_id(0);\n    out[i] = a[i] * b[i] - c[i];\n}\n";
        let [da, db, dc] = [&a, &b, &c].map(|v| NDBuffer::from_slice(cl, &[n], v));
        let (da, db, dc) = (da?, db?, dc?);
        let out = NDBuffer::<_, f32>::zeros(cl, &[n])?;
        let mem = |x: &NDBuffer<OpenClBackend, f32>| x.buffer().memory().clone();
        let (ma, mb, mc, mo) = (mem(&da), mem(&db), mem(&dc), mem(&out));
        let args = [
            KernelArg::Memory(&*ma),
            KernelArg::Memory(&*mb),
            KernelArg::Memory(&*mc),
            KernelArg::Memory(&*mo),
        ];
        cl.user_kernel(src, "", "madd")?.launch(cl.default_stream(), &Launch::new(&[n])?, &args)?;
        let got = out.to_vec()?;
        let unfused: Vec<f32> = (0..n).map(|i| a[i] * b[i] - c[i]).collect();
        let fused = (0..n).filter(|&i| a[i].mul_add(b[i], -c[i]) != unfused[i]).count();
        assert!(fused > 0, "the inputs tell fused from unfused results");
        let differ = (0..n).filter(|&i| got[i].to_bits() != unfused[i].to_bits()).count();
        assert_eq!(differ, 0, "{differ} of {n} results differ from a*b-c rounded twice");
        Ok(())
    });
}

/// OpenCL reports images (and pipes) as `__global`: a buffer given for one would be read
/// as an image object by the driver. Parameters no `KernelArg` fills are refused, by name.
#[test]
fn parameters_no_kernel_arg_fills_are_refused() {
    run(|cl| {
        let src = "__kernel void img(__write_only image2d_t im, int v) {\n\
                   write_imagef(im, (int2)(0, 0), (float4)(v));\n}\n\
                   __kernel void img1(__global int* o, __read_only image1d_t im) { o[0] = 1; }\n\
                   __kernel void smp(__global int* o, sampler_t s) { o[0] = 1; }\n\
                   __kernel void vec(__global float* o, float4 v) { o[0] = v.x; }\n\
                   typedef int myint;\n\
                   __kernel void td(__global int* o, myint v) { o[0] = v; }\n";
        let a = NDBuffer::<_, i32>::zeros(cl, &[4])?;
        let m = a.buffer().memory();
        let one = Launch::new(&[1])?;
        let refused = |name: &str, args: &[gpubuf::opencl::ClArg<'_>], param: &str| -> Result<()> {
            let k = cl.user_kernel(src, "", name)?;
            match k.launch(cl.default_stream(), &one, args) {
                Err(Error::InvalidArgument(msg)) => assert!(msg.contains(param), "{name}: {msg}"),
                other => panic!("{name}: expected InvalidArgument, got {other:?}"),
            }
            Ok(())
        };
        refused(
            "img",
            &[KernelArg::Memory(m), KernelArg::I32(1)],
            "argument 0 of img is declared image2d_t",
        )?;
        refused(
            "img1",
            &[KernelArg::Memory(m), KernelArg::Memory(m)],
            "argument 1 of img1 is declared image1d_t",
        )?;
        refused("smp", &[KernelArg::Memory(m), KernelArg::U32(0)], "sampler_t")?;
        refused("vec", &[KernelArg::Memory(m), KernelArg::F32(1.0)], "float4")?;
        // A typedef'd scalar: the message says which names are understood.
        refused("td", &[KernelArg::Memory(m), KernelArg::I32(1)], "myint")?;
        refused("td", &[KernelArg::Memory(m), KernelArg::I32(1)], "int, uint (unsigned int), long")?;
        // Pipes where the device has them.
        let pipe = "__kernel void p(__global int* o, __write_only pipe int q) { o[0] = 1; }";
        if let Ok(k) = cl.user_kernel(pipe, "-cl-std=CL2.0", "p") {
            let r = k.launch(cl.default_stream(), &one, &[KernelArg::Memory(m), KernelArg::Memory(m)]);
            assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        }
        assert!(a.all_equal(0)?, "nothing ran");
        Ok(())
    });
}

/// `__local` sizes are checked, with the kernel's own `__local` variables, against the
/// device's local memory: huge sizes never reach the driver.
#[test]
fn local_memory_over_the_device_limit_is_refused() {
    run(|cl| {
        let limit =
            usize::try_from(cl.device().local_mem_size().expect("CL_DEVICE_LOCAL_MEM_SIZE")).expect("fits");
        let src = "__kernel void two(__global int* o, __local int* a, __local int* b) {\n\
                   a[get_local_id(0)] = 1; b[get_local_id(0)] = 2;\n\
                   o[get_global_id(0)] = a[get_local_id(0)] + b[get_local_id(0)];\n}\n\
                   __kernel void own(__global int* o, __local int* a) {\n\
                   __local int mine[1024];\n    mine[get_local_id(0)] = 3; a[get_local_id(0)] = 1;\n\
                   o[get_global_id(0)] = mine[get_local_id(0)] + a[get_local_id(0)];\n}\n";
        let a = NDBuffer::<_, i32>::zeros(cl, &[8])?;
        let m = a.buffer().memory();
        let local = Launch::new(&[8])?.with_local(&[4])?;
        let s = cl.user_kernel(IOTA, "", "scratch")?;
        for n in [usize::MAX, 1 << 40, 1 << 30, limit + 1] {
            let r = s.launch(cl.default_stream(), &local, &[KernelArg::Memory(m), KernelArg::Local(n)]);
            assert!(matches!(r, Err(Error::InvalidArgument(_))), "{n}: {r:?}");
        }
        let two = cl.user_kernel(src, "", "two")?;
        for (x, y) in [(usize::MAX / 2 + 1, usize::MAX / 2 + 1), (limit / 2 + 1, limit / 2), (limit, 16)] {
            let args = [KernelArg::Memory(&**m), KernelArg::Local(x), KernelArg::Local(y)];
            let r = two.launch(cl.default_stream(), &local, &args);
            assert!(matches!(r, Err(Error::InvalidArgument(_))), "{x} + {y}: {r:?}");
        }
        let own = cl.user_kernel(src, "", "own")?;
        // The kernel's own `__local` variables count where the implementation reports them
        // (PoCL reports 0: it places them apart from the arguments).
        let own_kernel = Kernel::create(cl.user_program(src, "")?.native(), "own").expect("kernel");
        if own_kernel.get_local_mem_size(cl.device().id()).expect("CL_KERNEL_LOCAL_MEM_SIZE") > 0 {
            let r = own.launch(cl.default_stream(), &local, &[KernelArg::Memory(m), KernelArg::Local(limit)]);
            assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        }
        assert!(a.all_equal(0)?, "nothing ran");
        // Valid sizes run.
        two.launch(
            cl.default_stream(),
            &local,
            &[KernelArg::Memory(m), KernelArg::Local(16), KernelArg::Local(16)],
        )?;
        assert_eq!(a.to_vec()?, vec![3; 8]);
        own.launch(cl.default_stream(), &local, &[KernelArg::Memory(m), KernelArg::Local(64)])?;
        assert_eq!(a.to_vec()?, vec![4; 8]);
        // The whole device limit less what the kernel holds itself (NVIDIA reports a byte
        // for a kernel that declares none), on a backend of its own: a device that accepts
        // the launch and then fails it may keep reporting that on its queue.
        let own_cl = OpenClBackend::new()?;
        let b = NDBuffer::<_, i32>::zeros(&own_cl, &[8])?;
        let s = own_cl.user_kernel(IOTA, "", "scratch")?;
        let scratch = Kernel::create(own_cl.user_program(IOTA, "")?.native(), "scratch").expect("kernel");
        let held = scratch.get_local_mem_size(own_cl.device().id()).expect("CL_KERNEL_LOCAL_MEM_SIZE");
        let rest = limit - usize::try_from(held).expect("fits");
        let args = |n| [KernelArg::Memory(&**b.buffer().memory()), KernelArg::Local(n)];
        let refused = match s.launch(own_cl.default_stream(), &local, &args(rest)) {
            Ok(_) => match b.to_vec() {
                Ok(v) => {
                    assert_eq!(v, vec![1; 8]);
                    false
                }
                // NVIDIA's OpenCL keeps part of the 48 KiB it reports, accepts the launch and
                // says CL_OUT_OF_RESOURCES at the next call (a read: `OutOfMemory`).
                Err(Error::OutOfMemory { .. } | Error::Driver { code: -5, .. }) => true,
                Err(e) => panic!("{rest} bytes of local memory, read after: {e}"),
            },
            // Or refuses it at once: the driver's error says what ran short.
            Err(Error::Driver { code: -5, message, .. }) => {
                assert!(message.contains("local memory"), "{message}");
                true
            }
            Err(e) => panic!("{rest} bytes of local memory: {e}"),
        };
        if refused {
            // Half of it runs, on a fresh backend again.
            let cl2 = OpenClBackend::new()?;
            let c = NDBuffer::<_, i32>::zeros(&cl2, &[8])?;
            let args = [KernelArg::Memory(&**c.buffer().memory()), KernelArg::Local(rest / 2)];
            cl2.user_kernel(IOTA, "", "scratch")?.launch(cl2.default_stream(), &local, &args)?;
            assert_eq!(c.to_vec()?, vec![1; 8]);
        }
        Ok(())
    });
}

/// Strings with a NUL byte are typed errors, not panics inside opencl3.
#[test]
fn nul_bytes_in_options_and_names_are_refused() {
    run(|cl| {
        let r = cl.user_program(IOTA, "-D A=1\0");
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        let r = cl.user_kernel(IOTA, "", "k\0x");
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        let r = cl.user_program(IOTA, "")?.kernel(cl, "iota\0");
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        assert!(matches!(cl.user_kernel(IOTA, "", ""), Err(Error::InvalidArgument(_))));
        Ok(())
    });
}

/// `view_parts` takes C-contiguous views only (the kernel gets no strides), and every
/// empty view, at any offset, as offset 0.
#[test]
fn view_parts_takes_dense_views_and_any_empty_one() {
    run(|cl| {
        let whole = GBuffer::zeros(cl, 128)?;
        let empty = NDBuffer::<_, f32>::from_buffer_layout(
            whole.slice(32..64)?,
            gpubuf::Layout::new(vec![0], vec![1], usize::MAX - 3)?,
        )?;
        assert_eq!(view_parts(&empty)?.1, 0);
        let grid = NDBuffer::<_, f32>::from_buffer(whole.slice(32..96)?, &[4, 4], Order::C)?;
        assert_eq!(view_parts(&grid.slice(&[2..2, 0..4])?)?.1, 0);
        assert_eq!(view_parts(&grid.slice(&[1..3, 0..4])?)?.1, 8 + 4);
        assert_eq!(view_parts(&grid.slice(&[1..2, 1..3])?)?.1, 8 + 5, "one row is dense");
        for v in [grid.flip(0)?, grid.flip(1)?, grid.transpose(None)?, grid.slice(&[0..4, 1..3])?] {
            let r = view_parts(&v);
            assert!(matches!(r, Err(Error::InvalidArgument(_))), "{:?}: {r:?}", v.strides());
        }
        let flat = NDBuffer::<_, f32>::from_buffer(whole.slice(0..16)?, &[4], Order::C)?;
        assert!(matches!(view_parts(&flat.flip(0)?), Err(Error::InvalidArgument(_))));
        assert_eq!(view_parts(&flat.flip(0)?.slice(&[1..2])?)?.1, 2, "one element is dense");
        Ok(())
    });
}

/// An image wrapped as an opencl3 `Buffer` is no gpubuf memory (a kernel would take it as a
/// `__global` pointer): refused and released once; a NUL in a source is refused, not cut.
#[test]
fn images_and_nul_sources_are_refused() {
    use gpubuf::opencl::opencl3::memory::{cl_image_desc, cl_image_format, Image};
    use gpubuf::opencl::opencl3::memory::{CL_FLOAT, CL_MEM_OBJECT_IMAGE2D, CL_RGBA};
    run(|cl| {
        let r = cl.user_program("__kernel void k(__global int* x) { x[0] = 1; }\0 junk", "");
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        let format = cl_image_format { image_channel_order: CL_RGBA, image_channel_data_type: CL_FLOAT };
        // SAFETY: a zeroed descriptor is valid (no buffer, no pitches); the fields set follow.
        let mut desc: cl_image_desc = unsafe { std::mem::zeroed() };
        (desc.image_type, desc.image_width, desc.image_height) = (CL_MEM_OBJECT_IMAGE2D, 4, 4);
        // SAFETY: a live context, a valid format and descriptor, no host pointer.
        let image =
            unsafe { Image::create(cl.context(), CL_MEM_READ_WRITE, &format, &desc, ptr::null_mut()) };
        // A device without image support skips the rest.
        let Ok(image) = image else { return Ok(()) };
        // SAFETY: `image` is live; the extra reference is released by `watch`.
        unsafe { clmem::retain_mem_object(image.get()) }.expect("retain");
        let watch = Buffer::<u8>::new(image.get());
        std::mem::forget(image); // its reference moves into the wrapper below
                                 // SAFETY: the wrapper holds the image's own reference (forgotten above), handed over.
        let r = unsafe { cl.adopt_buffer(Buffer::<u8>::new(watch.get())) };
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        assert_eq!(mem_refs(&watch), 1, "the refused image was released once");
        // SAFETY: `watch` keeps the image alive during the call.
        let r = unsafe { cl.share_raw(watch.get()) };
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        assert_eq!(mem_refs(&watch), 1);
        Ok(())
    });
}
