//! Launches of user kernels: the checked [`UserKernel::launch`], and
//! [`UserKernel::launch_raw`], which also passes raw device addresses for pointers.

use super::UserKernel;
use crate::error::{driver, maybe_oom};
use crate::geometry::geometry;
use crate::{CudaArg, CudaEvent, CudaStream};
use cudarc::driver::result;
use cudarc::driver::sys::CUevent_flags;
use gpubuf_core::kernel::{KernelArg, Launch};
use gpubuf_core::{Error, Result};
use std::ffi::c_void;

/// A parameter value, kept in place while the driver reads it.
enum Slot {
    B64(u64),
    B32(u32),
    F32(f32),
    F64(f64),
}

impl UserKernel {
    /// Launches the kernel on `stream` after checking the arguments ([`UserKernel::check_args`])
    /// and the work sizes (`Launch` dimension 0 is `x`; see [`crate::geometry`]); the
    /// returned event completes with the kernel. Memory arguments are passed as their
    /// allocation's base address: pass a view's element offset as a separate argument
    /// ([`crate::interop::view_parts`]).
    ///
    /// **Pointers.** A parameter the CUDA C source declares as a pointer takes gpubuf
    /// memory ([`KernelArg::Memory`]) of this context only, never an address given as
    /// `U64`/`I64` (see [`crate::ptx`]; [`UserKernel::launch_raw`] takes addresses, in
    /// `unsafe` code), so every pointer the kernel gets is a live gpubuf allocation.
    ///
    /// **Lifetimes.** A buffer dropped right after the launch stays allocated until the
    /// kernel is done, whichever gpubuf stream it runs on (a stream over a non-blocking
    /// cudarc stream from [`crate::CudaBackend::stream_from_cudarc`] included): gpubuf
    /// frees memory after the work queued so far on every gpubuf stream of the context
    /// (see [`crate::interop`]). The launch stream first waits for the allocation of each
    /// memory argument made on another stream, so the kernel never runs before its buffers
    /// exist.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for arguments that do not match the kernel (an integer
    /// given for a pointer included) or work sizes over the limits;
    /// [`Error::DeviceMismatch`] for a stream or buffer of another context; driver errors
    /// (`OutOfMemory` when the launch runs out of resources).
    pub fn launch(&self, stream: &CudaStream, launch: &Launch, args: &[CudaArg<'_>]) -> Result<CudaEvent> {
        let shared = self.check_args(args)?;
        self.enqueue(stream, launch, args, shared)
    }

    /// [`UserKernel::launch`], except that a pointer parameter, or a 64-bit parameter whose
    /// C type could not be read ([`crate::ptx::ParamKind::Bits64`]), also takes a raw
    /// device address as `U64` or `I64` ([`UserKernel::check_args_raw`]): memory gpubuf
    /// does not own, an address inside a gpubuf allocation, or an integer for a kernel
    /// declared where gpubuf cannot read its parameter types. `Memory` arguments keep every
    /// guarantee of [`UserKernel::launch`].
    ///
    /// # Safety
    /// For every `U64`/`I64` given for such a parameter that the kernel uses as an address:
    /// * it is an address of memory the device can reach from this kernel's context (device
    ///   memory of the context, managed memory, or mapped host memory), valid for every
    ///   access the kernel makes through it, in bounds and aligned as the kernel needs;
    /// * the memory stays allocated, and is not reused for anything else, until the kernel
    ///   has completed: gpubuf does not know it is in use, so a gpubuf buffer it lies in
    ///   must be kept alive by the caller (a later drop is still ordered after the kernel,
    ///   as for `Memory` arguments), and foreign memory must not be freed before the
    ///   returned event completes or a stream that frees it waits for that event;
    /// * no other work writes the memory while the kernel reads it, or touches it while
    ///   the kernel writes it, unless ordered with the kernel by events or stream order.
    ///
    /// Without `unsafe` the call does not compile:
    ///
    /// ```compile_fail,E0133
    /// # use gpubuf_core::kernel::Launch;
    /// # use gpubuf_cuda::{CudaArg, CudaStream, UserKernel};
    /// # fn f(k: &UserKernel, s: &CudaStream, l: &Launch, args: &[CudaArg<'_>]) -> gpubuf_core::Result<()> {
    /// k.launch_raw(s, l, args)?; // the caller vouches for every address in `args`
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`UserKernel::launch`].
    pub unsafe fn launch_raw(
        &self,
        stream: &CudaStream,
        launch: &Launch,
        args: &[CudaArg<'_>],
    ) -> Result<CudaEvent> {
        let shared = self.check_args_raw(args)?;
        self.enqueue(stream, launch, args, shared)
    }

    /// Launches after the arguments were checked (`shared`: the dynamic shared memory the
    /// check returned).
    fn enqueue(
        &self,
        stream: &CudaStream,
        launch: &Launch,
        args: &[CudaArg<'_>],
        shared: usize,
    ) -> Result<CudaEvent> {
        let inner = &*self.inner;
        let geo = geometry(launch, &inner.limits)?;
        let ctx = inner.ctx.cu_ctx();
        if stream.owner.ctx.cu_ctx() != ctx {
            return Err(Error::DeviceMismatch(format!(
                "kernel {} launched on a stream of another context",
                self.name()
            )));
        }
        let mut slots = Vec::with_capacity(args.len());
        for (i, a) in args.iter().enumerate() {
            slots.push(match a {
                KernelArg::Memory(m) => {
                    if m.ctx.cu_ctx() != ctx {
                        return Err(Error::DeviceMismatch(format!(
                            "argument {i} of {} is memory of another CUDA context",
                            self.name()
                        )));
                    }
                    Slot::B64(m.ptr)
                }
                KernelArg::U64(v) => Slot::B64(*v),
                KernelArg::I64(v) => Slot::B64(*v as u64),
                KernelArg::U32(v) => Slot::B32(*v),
                KernelArg::I32(v) => Slot::B32(*v as u32),
                KernelArg::F32(v) => Slot::F32(*v),
                KernelArg::F64(v) => Slot::F64(*v),
                KernelArg::Local(_) => continue,
            });
        }
        let mut params: Vec<*mut c_void> = slots
            .iter_mut()
            .map(|s| match s {
                Slot::B64(v) => v as *mut u64 as *mut c_void,
                Slot::B32(v) => v as *mut u32 as *mut c_void,
                Slot::F32(v) => v as *mut f32 as *mut c_void,
                Slot::F64(v) => v as *mut f64 as *mut c_void,
            })
            .collect();
        // Within the kernel's dynamic shared limit (an `int`), checked above.
        let shared = u32::try_from(shared).map_err(|_| Error::invalid("shared memory size exceeds u32"))?;
        let _span = tracing::trace_span!("cuda.user_launch", kernel = %self.name()).entered();
        inner.ctx.bind_to_thread().map_err(|e| driver(e, "cuCtxSetCurrent"))?;
        // Memory allocated stream-ordered on another stream is used here only after its
        // allocation: the launch stream waits for it (a no-op once it is known done).
        for a in args {
            if let KernelArg::Memory(m) = a {
                m.join_allocation(stream)?;
            }
        }
        // SAFETY: the check matched every value to its PTX parameter: one pointer per
        // parameter, each to a value of the parameter's size (8 bytes for 64-bit integers,
        // pointers and .f64, 4 for .u32/.s32/.b32 and .f32); every pointer parameter gets
        // the base of a live gpubuf allocation of this context (borrowed by `args` for the
        // call; its free is ordered after the kernel, see `launch`), or, in `launch_raw`
        // only, an address the caller vouches for (its contract); `slots` outlives the call
        // (the driver copies the values at launch); the function and stream belong to this
        // context; the grid and block are within the device's and kernel's limits, and the
        // dynamic shared memory within the kernel's.
        unsafe {
            result::launch_kernel(
                inner.function.cu_function(),
                geo.grid,
                geo.block,
                shared,
                stream.raw,
                &mut params,
            )
        }
        .map_err(|e| maybe_oom(e, &format!("cuLaunchKernel({})", self.name()), 0))?;
        let raw = result::event::create(CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map_err(|e| driver(e, "cuEventCreate"))?;
        let ev = CudaEvent::created(raw, inner.ctx.clone());
        // SAFETY: a live event and stream of this context.
        unsafe { result::event::record(ev.raw, stream.raw) }.map_err(|e| driver(e, "cuEventRecord"))?;
        Ok(ev)
    }
}
