//! Backends over a context (and queue) that another library made: pyopencl's, or any
//! OpenCL code's. The backend uses that context itself (no second context), so memory
//! and events pass between the two without copies, and the queue, when one is named, as
//! its default stream.
//!
//! One backend per (context, queue) pair lives at a time: sharing the same pair again
//! while a backend over it is alive returns a clone of that backend, so two libraries
//! asking for the pair see one device (the same program cache, the same default stream).

use crate::backend::{Inner, OpenClBackend};
use crate::device::devices;
use crate::error::cl;
use crate::owned;
use crate::stream::{claimed_stream, new_queue};
use gpubuf_core::{Error, Result};
use opencl3::command_queue::{CommandQueue, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE};
use opencl3::context::Context;
use opencl3::types::{cl_command_queue, cl_context, cl_device_id};
use parking_lot::Mutex;
use std::sync::{Arc, Weak};

/// The live backends made by [`OpenClBackend::share_context`], by (context, queue) handle
/// (queue 0: a queue of gpubuf's own).
static SHARED: Mutex<Vec<(usize, usize, Weak<Inner>)>> = Mutex::new(Vec::new());

impl OpenClBackend {
    /// A backend over the caller's `context`, with `queue` as its default stream (or a new
    /// in-order queue of gpubuf's when `queue` is null). gpubuf retains both and releases
    /// only those references when the backend's last clone drops; the caller's own
    /// references are untouched. While a backend over the same pair is alive, the call
    /// returns a clone of it.
    ///
    /// The device is the queue's, or the context's only device when no queue is named.
    ///
    /// # Safety
    /// * `context` is a valid `cl_context`, and `queue` is null or a valid
    ///   `cl_command_queue`, both live until this call returns.
    /// * Work the caller enqueues on other queues of the context over memory gpubuf uses
    ///   is ordered against gpubuf's streams by the caller (events, or `finish`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the queue belongs to another context, is out of
    /// order, or is held by a gpubuf stream already, or when no queue is named for a
    /// context of several devices; [`Error::BackendUnavailable`] when the device is not one
    /// that [`crate::devices`] lists (another loader's platform); driver errors of the
    /// queries. Nothing of the caller's is released on an error.
    pub unsafe fn share_context(context: cl_context, queue: cl_command_queue) -> Result<Self> {
        if context.is_null() {
            return Err(Error::invalid("a null cl_context"));
        }
        let key = (context as usize, queue as usize);
        let mut shared = SHARED.lock();
        shared.retain(|(_, _, w)| w.strong_count() > 0);
        if let Some(inner) = shared.iter().find(|(c, q, _)| (*c, *q) == key).and_then(|(_, _, w)| w.upgrade())
        {
            return Ok(OpenClBackend { inner, plan_kernel: None });
        }
        // SAFETY: `context` is a valid context (the caller's contract); the reference taken
        // here is the one the wrapper releases.
        unsafe { cl3::context::retain_context(context) }
            .map_err(|c| crate::error::driver(c, "clRetainContext"))?;
        let probe = Context::new(context, &[]);
        let listed: Vec<cl_device_id> =
            cl3::context::get_context_info(context, cl3::context::CL_CONTEXT_DEVICES)
                .map_err(|c| crate::error::driver(c, "CL_CONTEXT_DEVICES"))?
                .to_vec_intptr()
                .into_iter()
                .map(|p| p as cl_device_id)
                .collect();
        let device: cl_device_id;
        let stream = if queue.is_null() {
            device = match listed.as_slice() {
                [one] => *one,
                _ => {
                    return Err(Error::invalid(format!(
                        "the context has {} devices: name the queue whose device gpubuf should use",
                        listed.len()
                    )))
                }
            };
            None
        } else {
            if owned::is_owned(owned::Kind::Queue, queue) {
                return Err(owned::already_owned("command queue"));
            }
            // SAFETY: `queue` is a valid queue (the caller's contract); the reference taken
            // here is the one the stream releases (or the wrapper, on an error below).
            unsafe { cl3::command_queue::retain_command_queue(queue) }
                .map_err(|c| crate::error::driver(c, "clRetainCommandQueue"))?;
            // Three dimensions until the device is known (only used by opencl3's launches).
            let q = CommandQueue::new(queue, 3);
            if q.context().map_err(|e| cl(e, "CL_QUEUE_CONTEXT"))? != context {
                return Err(Error::invalid("the queue belongs to another OpenCL context"));
            }
            let props = q.properties().map_err(|e| cl(e, "CL_QUEUE_PROPERTIES"))?;
            if props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE != 0 {
                return Err(Error::invalid("an out-of-order queue cannot be a gpubuf stream"));
            }
            device = q.device().map_err(|e| cl(e, "CL_QUEUE_DEVICE"))?;
            let dims = opencl3::device::Device::new(device).max_work_item_dimensions().unwrap_or(3);
            std::mem::forget(q); // its reference moves to the wrapper below
            Some(CommandQueue::new(queue, dims))
        };
        let entry = devices()?.into_iter().find(|e| e.device.id() == device).ok_or_else(|| {
            Error::BackendUnavailable {
                backend: gpubuf_core::BackendKind::OpenCl,
                reason: "the context's device is not one gpubuf's OpenCL loader lists".into(),
            }
        })?;
        // The wrapper with the device recorded (the plan programs are built for it).
        let ctx = Context::new(probe.get(), &[device]);
        std::mem::forget(probe); // its reference is `ctx`'s now
        let default_stream = match stream {
            Some(q) => claimed_stream(q, context as usize).map_err(|q| {
                drop(q); // claimed by another stream meanwhile: releases the reference taken above
                owned::already_owned("command queue")
            })?,
            None => new_queue(&ctx)?,
        };
        let backend = Self::from_parts(entry, ctx, default_stream)?;
        shared.push((key.0, key.1, Arc::downgrade(&backend.inner)));
        Ok(backend)
    }
}
