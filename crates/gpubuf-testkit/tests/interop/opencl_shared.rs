//! Backends over a context and queue another library made (`OpenClBackend::share_context`):
//! the same handles, no second context, one backend per pair while it lives, the caller's
//! references untouched, and bad handles refused.

use gpubuf::opencl::opencl3::command_queue::{CommandQueue, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE};
use gpubuf::opencl::opencl3::context::Context;
use gpubuf::opencl::OpenClBackend;
use gpubuf::{Backend, Error, NDBuffer, Result};

fn run(f: impl FnOnce(&OpenClBackend) -> Result<()>) {
    gpubuf_testkit::run_opencl(f);
}

fn context_refs(c: &Context) -> u32 {
    c.reference_count().expect("CL_CONTEXT_REFERENCE_COUNT")
}

/// A context and an in-order queue of the caller's, on the test device.
fn foreign(cl: &OpenClBackend) -> Result<(Context, CommandQueue)> {
    let ctx = Context::from_device(&cl.device()).map_err(|e| Error::invalid(e.to_string()))?;
    // SAFETY: the device belongs to the context just made.
    let q = unsafe { CommandQueue::create_with_properties(&ctx, ctx.default_device(), 0, 0) }
        .map_err(|e| Error::invalid(e.to_string()))?;
    Ok((ctx, q))
}

#[test]
fn a_shared_context_and_queue_are_used_as_they_are() {
    run(|cl| {
        let (ctx, q) = foreign(cl)?;
        let before = (context_refs(&ctx), q.reference_count().expect("refs"));
        // SAFETY: both handles are live for the whole test.
        let shared = unsafe { OpenClBackend::share_context(ctx.get(), q.get()) }?;
        assert_eq!(shared.context().get(), ctx.get(), "no second context");
        assert_eq!(
            shared.default_stream().queue().get(),
            q.get(),
            "the caller's queue is the default stream"
        );
        // SAFETY: as above.
        let again = unsafe { OpenClBackend::share_context(ctx.get(), q.get()) }?;
        assert!(again.same_device(&shared), "one backend per pair while it lives");
        // SAFETY: as above; no queue: gpubuf's own queue on the context's device.
        let own_queue = unsafe { OpenClBackend::share_context(ctx.get(), std::ptr::null_mut()) }?;
        assert_eq!(own_queue.context().get(), ctx.get());
        assert_ne!(own_queue.default_stream().queue().get(), q.get());
        let a = NDBuffer::<_, f32>::from_slice(&shared, &[4], &[1.0, 2.0, 3.0, 4.0])?;
        // Memory of the shared backend is memory of the context: the other backend over it
        // takes it.
        let b = a.to_backend(&own_queue)?;
        assert_eq!(b.to_vec()?, [1.0, 2.0, 3.0, 4.0]);
        drop((a, b, shared, again, own_queue));
        // Memory objects and queues release their context once the runtime has finished
        // with them, which may come a little after the last gpubuf handle drops.
        let t = std::time::Instant::now();
        let counts = || (context_refs(&ctx), q.reference_count().expect("refs"));
        while counts() != before && t.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(counts(), before, "gpubuf released exactly the references it took");
        Ok(())
    });
}

#[test]
fn bad_handles_are_refused_and_nothing_is_released() {
    run(|cl| {
        let (ctx, q) = foreign(cl)?;
        let (other, other_q) = foreign(cl)?;
        let refs = (context_refs(&ctx), context_refs(&other), other_q.reference_count().expect("refs"));
        // SAFETY: live handles (a null context is refused before any use).
        let null = unsafe { OpenClBackend::share_context(std::ptr::null_mut(), q.get()) };
        assert!(matches!(null, Err(Error::InvalidArgument(_))), "{null:?}");
        // SAFETY: live handles of two contexts.
        let mixed = unsafe { OpenClBackend::share_context(ctx.get(), other_q.get()) };
        assert!(
            matches!(&mixed, Err(Error::InvalidArgument(m)) if m.contains("another OpenCL context")),
            "{mixed:?}"
        );
        // SAFETY: the device belongs to the context.
        let ooo = unsafe {
            CommandQueue::create_with_properties(
                &ctx,
                ctx.default_device(),
                CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE,
                0,
            )
        };
        if let Ok(ooo) = ooo {
            // SAFETY: live handles.
            let r = unsafe { OpenClBackend::share_context(ctx.get(), ooo.get()) };
            assert!(matches!(&r, Err(Error::InvalidArgument(m)) if m.contains("out-of-order")), "{r:?}");
        }
        // A queue gpubuf's own stream holds is refused, not taken a second time.
        // SAFETY: the backend's context and queue are live.
        let own =
            unsafe { OpenClBackend::share_context(cl.context().get(), cl.default_stream().queue().get()) };
        assert!(matches!(&own, Err(Error::InvalidArgument(m)) if m.contains("gpubuf's already")), "{own:?}");
        assert_eq!(
            (context_refs(&ctx), context_refs(&other), other_q.reference_count().expect("refs")),
            refs,
            "nothing of the caller's was released"
        );
        Ok(())
    });
}
