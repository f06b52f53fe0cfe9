//! OpenCL handles across the boundary: reference counts of shared, adopted and retained
//! handles, handles gpubuf owns never taken over a second time, and buffers that outlive
//! the kernels using them on adopted queues.

use gpubuf::kernel::{KernelArg, Launch};
use gpubuf::opencl::opencl3::command_queue::{CommandQueue, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE};
use gpubuf::opencl::opencl3::event::Event;
use gpubuf::opencl::opencl3::memory::{self as clmem, Buffer, ClMem, CL_MEM_READ_ONLY, CL_MEM_READ_WRITE};
use gpubuf::opencl::opencl3::types::cl_mem;
use gpubuf::opencl::{ClEvent, OpenClBackend};
use gpubuf::{Allocator, Backend, Buffer as GBuffer, Error, NDBuffer, Order, Result};
use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

fn run(f: impl FnOnce(&OpenClBackend) -> Result<()>) {
    gpubuf_testkit::run_opencl(f);
}

fn mem_refs<T>(b: &Buffer<T>) -> u32 {
    b.reference_count().expect("CL_MEM_REFERENCE_COUNT")
}

/// The call was refused as taking over a handle gpubuf owns. A value it returned instead
/// is forgotten, so that the failing test does not go on to release gpubuf's reference.
fn refused<T>(r: Result<T>, what: &str) {
    match r {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("gpubuf's already"), "{what}: {m}"),
        Ok(v) => {
            std::mem::forget(v);
            panic!("{what}: a handle gpubuf owns was taken over a second time");
        }
        Err(e) => panic!("{what}: expected InvalidArgument, got {e:?}"),
    }
}

/// opencl3 wraps any raw handle in safe code: wrappers over gpubuf's own buffer, queues and
/// event are refused by every function that takes a handle in, nothing is released, and
/// gpubuf's objects keep working. Once gpubuf's object is gone, the handle may come in.
#[test]
fn handles_gpubuf_owns_are_not_taken_over_again() {
    run(|cl| {
        let nd = NDBuffer::<_, u8>::from_slice(cl, &[16], &[7; 16])?;
        let m = nd.buffer().memory();
        // SAFETY: the contract is broken on purpose (the reference is gpubuf's): the call
        // must refuse the handle before it takes anything over.
        refused(unsafe { cl.adopt_buffer(Buffer::<u8>::new(m.raw())) }, "adopt_buffer");
        // SAFETY: `m` is a live buffer during the call.
        refused(unsafe { cl.share_raw(m.raw()) }, "share_raw");
        cl.synchronize(cl.default_stream())?;
        assert_eq!(mem_refs(m.native()), 1, "nothing retained or released");
        assert_eq!(nd.to_vec()?, vec![7; 16]);
        nd.fill(9)?;
        assert_eq!(nd.to_vec()?, vec![9; 16]);

        for s in [cl.default_stream().clone(), cl.new_stream()?] {
            let before = s.queue().reference_count().expect("count");
            let twin = CommandQueue::new(s.queue().get(), s.queue().max_work_item_dimensions());
            // SAFETY: broken on purpose, as above.
            refused(unsafe { cl.stream_from_queue(twin) }, "stream_from_queue");
            assert_eq!(s.queue().reference_count().expect("count"), before);
            cl.write(&s, m, 0, &[3; 16])?;
            cl.synchronize(&s)?;
        }
        assert_eq!(nd.to_vec()?, vec![3; 16]);

        let ev = cl.record_event(cl.default_stream())?;
        cl.wait_event(&ev)?; // settled: the count is gpubuf's reference alone
        let before = ev.native().reference_count().expect("count");
        // SAFETY: broken on purpose, as above.
        refused(unsafe { ClEvent::from_native(Event::new(ev.native().get())) }, "from_native");
        assert_eq!(ev.native().reference_count().expect("count"), before);
        assert!(cl.event_complete(&ev)?);
        cl.stream_wait(cl.default_stream(), &ev)?;

        // The caller's own buffer: shared, dropped by gpubuf, then shared and adopted again.
        // SAFETY: a live context, no host pointer, a non-zero size.
        let user = unsafe { Buffer::<u8>::create(cl.context(), CL_MEM_READ_WRITE, 8, ptr::null_mut()) }
            .expect("clCreateBuffer");
        // SAFETY: `user` keeps the buffer alive during the calls.
        let shared = unsafe { cl.share_raw(user.get()) }?;
        // SAFETY: as above.
        refused(unsafe { cl.share_raw(user.get()) }, "share_raw twice");
        drop(shared);
        // SAFETY: as above.
        let again = unsafe { cl.share_raw(user.get()) }?;
        drop(again);
        let raw = user.get();
        // SAFETY: `raw` is live; the reference added is released by `watch`.
        unsafe { clmem::retain_mem_object(raw) }.expect("retain");
        let watch = Buffer::<u8>::new(raw);
        // SAFETY: `user` holds the reference clCreateBuffer returned, handed over here.
        let adopted = unsafe { cl.adopt_buffer(user) }?;
        cl.write(cl.default_stream(), &adopted, 0, &[1; 8])?;
        drop(adopted);
        cl.synchronize(cl.default_stream())?;
        assert_eq!(mem_refs(&watch), 1, "released once, by the adopted memory");
        Ok(())
    });
}

/// A buffer gpubuf shares is not released by gpubuf beyond its own reference; one handed
/// over is released exactly once; both round-trip data without a copy.
#[test]
fn foreign_buffers_keep_their_reference_counts() {
    run(|cl| {
        // SAFETY: a valid context, no host pointer, a non-zero size.
        let user = unsafe { Buffer::<f32>::create(cl.context(), CL_MEM_READ_WRITE, 8, ptr::null_mut()) }
            .expect("clCreateBuffer");
        assert_eq!(mem_refs(&user), 1);
        // SAFETY: `user` is a live buffer; gpubuf writes it only from this thread below.
        let shared = unsafe { cl.share_raw(user.get()) }?;
        assert_eq!(shared.raw(), user.get(), "no copy");
        assert_eq!(mem_refs(&user), 2);
        let g = NDBuffer::<_, f32>::from_buffer(GBuffer::from_memory(cl, shared), &[8], Order::C)?;
        g.copy_from(&NDBuffer::from_slice(cl, &[8], &[1., 2., 3., 4., 5., 6., 7., 8.])?)?;
        let again = g.clone();
        drop(g);
        // Commands in flight hold references of their own: count after they finish.
        cl.synchronize(cl.default_stream())?;
        assert_eq!(mem_refs(&user), 2, "a view is still alive");
        assert_eq!(again.to_vec()?, vec![1., 2., 3., 4., 5., 6., 7., 8.]);
        drop(again);
        assert_eq!(mem_refs(&user), 1, "gpubuf released its own reference only");

        // Handed over: take an extra reference to watch the count, then give `user` away.
        let raw = user.get();
        // SAFETY: `raw` is live (held by `user`); this reference is released below.
        unsafe { clmem::retain_mem_object(raw) }.expect("retain");
        // SAFETY: `user` holds the reference clCreateBuffer returned, handed over here.
        let adopted = unsafe { cl.adopt_buffer(user) }?;
        let watch = Buffer::<u8>::new(raw);
        assert_eq!(mem_refs(&watch), 2, "adoption takes over the reference, adds none");
        let g = GBuffer::from_memory(cl, adopted);
        assert_eq!(g.to_vec()?.len(), 32);
        drop(g);
        assert_eq!(mem_refs(&watch), 1, "released exactly once");

        // A READ_ONLY buffer is refused and released.
        // SAFETY: as above.
        let ro = unsafe { Buffer::<u8>::create(cl.context(), CL_MEM_READ_ONLY, 8, ptr::null_mut()) }
            .expect("create");
        // SAFETY: `ro` is live; the extra reference is released by `keep`.
        unsafe { clmem::retain_mem_object(ro.get()) }.expect("retain");
        let keep = Buffer::<u8>::new(ro.get());
        // SAFETY: `ro` holds the reference clCreateBuffer returned, handed over here.
        assert!(matches!(unsafe { cl.adopt_buffer(ro) }, Err(Error::InvalidArgument(_))));
        assert_eq!(mem_refs(&keep), 1);
        // Owned handles out add a reference and release it.
        let before = cl.context().reference_count().expect("count");
        let ctx = cl.retained_context()?;
        assert_eq!(cl.context().reference_count().expect("count"), before + 1);
        drop(ctx);
        assert_eq!(cl.context().reference_count().expect("count"), before);
        Ok(())
    });
}

#[test]
fn queues_of_another_kind_are_refused() {
    run(|cl| {
        let props = CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE;
        if let Ok(q) = CommandQueue::create_default_with_properties(cl.context(), props, 0) {
            // SAFETY: `q` holds the reference clCreateCommandQueue returned, handed over here.
            assert!(matches!(unsafe { cl.stream_from_queue(q) }, Err(Error::InvalidArgument(_))));
        }
        let s = cl.new_stream()?;
        let before = s.queue().reference_count().expect("count");
        let q = s.retained_queue()?;
        assert_eq!(s.queue().reference_count().expect("count"), before + 1);
        drop(q);
        assert_eq!(s.queue().reference_count().expect("count"), before);
        Ok(())
    });
}

const SLOW: &str = "__kernel void slow(__global float* out, uint iters) {
    float x = 0.0f;
    for (uint k = 0; k < iters; k++) x = x * 0.999f + 1.0f;
    out[get_global_id(0)] = x > 0.0f ? 1.0f : 2.0f;
}";

static DELETED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_delete(_mem: cl_mem, _data: *mut c_void) {
    DELETED.store(true, SeqCst);
}

/// A buffer dropped right after a launch on an adopted (foreign) queue is not deleted
/// before the kernel has finished: OpenCL defers the deletion of a released buffer until
/// the commands queued with it are done, on any queue, so no gpubuf ordering is needed.
#[test]
fn a_buffer_dropped_after_a_launch_on_an_adopted_queue_outlives_the_kernel() {
    run(|cl| {
        let q = CommandQueue::create_default_with_properties(cl.context(), 0, 0).expect("queue");
        // SAFETY: `q` holds the reference clCreateCommandQueue returned, handed over here.
        let stream = unsafe { cl.stream_from_queue(q) }?;
        let k = cl.user_kernel(SLOW, "", "slow")?;
        let out = cl.allocate(16)?;
        DELETED.store(false, SeqCst);
        // SAFETY: a live buffer; the callback only stores to a static.
        unsafe { clmem::set_mem_object_destructor_callback(out.raw(), on_delete, ptr::null_mut()) }
            .expect("clSetMemObjectDestructorCallback");
        let args = [KernelArg::Memory(&out), KernelArg::U32(40_000_000)];
        let done = k.launch(&stream, &Launch::new(&[4])?, &args)?;
        drop(out);
        let mut running = 0;
        loop {
            // Deleted first, complete second: deleted while not yet complete is the failure.
            let deleted = DELETED.load(SeqCst);
            let complete = cl.event_complete(&done)?;
            assert!(!deleted || complete, "the buffer was deleted under the running kernel");
            if complete {
                break;
            }
            running += 1;
            std::thread::sleep(Duration::from_millis(1));
        }
        if running == 0 {
            eprintln!("the kernel finished before the first look: nothing was checked");
        }
        let start = Instant::now();
        while !DELETED.load(SeqCst) && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(DELETED.load(SeqCst), "deleted once the kernel was done");
        Ok(())
    });
}

/// Memory an adopted buffer cannot keep alive is refused: a `USE_HOST_PTR` buffer's
/// storage is host memory its owner frees with its own object, and a sub-buffer of
/// gpubuf's memory (a pool block) would outlive the block. Nothing is released.
#[test]
fn host_pointer_buffers_and_sub_buffers_of_gpubuf_memory_are_refused() {
    run(|cl| {
        let mut host = vec![7u8; 4096];
        // SAFETY: a buffer over `host`, which outlives it (dropped at the end of the test).
        let hosted = unsafe {
            Buffer::<u8>::create(
                cl.context(),
                CL_MEM_READ_WRITE | clmem::CL_MEM_USE_HOST_PTR,
                host.len(),
                host.as_mut_ptr().cast::<c_void>(),
            )
        }
        .expect("create");
        // SAFETY: `hosted` is live during the call.
        match unsafe { cl.share_raw(hosted.get()) } {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("USE_HOST_PTR"), "{m}"),
            other => panic!("a USE_HOST_PTR buffer was taken: {:?}", other.map(|_| ())),
        }
        assert_eq!(mem_refs(&hosted), 1, "nothing retained");
        let nd = NDBuffer::<_, u8>::from_slice(cl, &[1024], &[1; 1024])?;
        // Not the owner's reference: ManuallyDrop keeps it from being released.
        let parent = std::mem::ManuallyDrop::new(Buffer::<u8>::new(nd.buffer().memory().raw()));
        // SAFETY: a sub-buffer of a live buffer, within it; released when `sub` drops.
        let sub = unsafe { parent.create_sub_buffer(CL_MEM_READ_WRITE, 0, 256) }.expect("sub-buffer");
        // SAFETY: `sub` is live during the call.
        match unsafe { cl.share_raw(sub.get()) } {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("sub-buffer"), "{m}"),
            other => panic!("a sub-buffer of gpubuf's memory was taken: {:?}", other.map(|_| ())),
        }
        assert_eq!(mem_refs(&sub), 1, "nothing retained");
        drop(sub);
        assert_eq!(nd.to_vec()?, vec![1; 1024]);
        drop(hosted);
        drop(host);
        Ok(())
    });
}
