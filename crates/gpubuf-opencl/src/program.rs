//! User kernels: OpenCL C programs compiled once per context, launched on gpubuf streams
//! with their arguments checked first.
//!
//! opencl3's launch API trusts its caller: a wrong argument count is a driver error at
//! best, a scalar given for a buffer is garbage or a crash. [`UserKernel::launch`] checks
//! the count, and, from the kernel's argument info (programs are built with
//! `-cl-kernel-arg-info`), each argument's address space and scalar type, the local
//! memory asked for, and the work sizes against the device and kernel limits; every
//! mismatch is a typed error. Parameters a [`KernelArg`] cannot fill safely (images, pipes,
//! samplers, vectors, structs, typedef'd names) are refused at launch, never passed a
//! buffer or a scalar: such kernels are launched through [`UserProgram::native`].
//!
//! Programs are compiled with `#pragma OPENCL FP_CONTRACT OFF` in front of the source (line
//! numbers in build logs are the caller's): no fused multiply-add unless the source asks
//! for it (`fma`, `mad`, its own `FP_CONTRACT ON`) or the options do (`-cl-mad-enable`), so
//! results can match other backends bit for bit.
//!
//! ```
//! use gpubuf_buffer::NDBuffer;
//! use gpubuf_core::kernel::{KernelArg, Launch};
//! use gpubuf_core::Backend;
//! use gpubuf_opencl::{interop::view_parts, OpenClBackend};
//!
//! const SRC: &str = "__kernel void iota(__global float* base, ulong off, uint n) {
//!     size_t i = get_global_id(0);
//!     if (i < n) base[off + i] = (float)i;
//! }";
//! let Ok(cl) = OpenClBackend::new() else { return Ok(()) }; // no OpenCL here
//! let a = NDBuffer::<_, f32>::zeros(&cl, &[8])?;
//! let tail = a.slice(&[5..8])?;
//! let (mem, off) = view_parts(&tail)?; // (buffer, element offset)
//! let k = cl.user_kernel(SRC, "", "iota")?; // compiled once per context
//! let args = [KernelArg::Memory(mem), KernelArg::U64(off), KernelArg::U32(3)];
//! k.launch(cl.default_stream(), &Launch::new(&[4])?, &args)?;
//! assert_eq!(a.to_vec()?, vec![0., 0., 0., 0., 0., 0., 1., 2.]);
//! // A wrong argument list is an error, not a crash.
//! assert!(k.launch(cl.default_stream(), &Launch::new(&[4])?, &args[..2]).is_err());
//! # Ok::<(), gpubuf_core::Error>(())
//! ```

use crate::error::{cl, driver, launch_error};
use crate::{ClEvent, ClMemory, ClStream, OpenClBackend};
use gpubuf_core::kernel::{KernelArg, Launch};
use gpubuf_core::{BackendKind, Error, Result};
use opencl3::event::Event;
use opencl3::kernel::{
    Kernel, CL_KERNEL_ARG_ADDRESS_CONSTANT, CL_KERNEL_ARG_ADDRESS_GLOBAL, CL_KERNEL_ARG_ADDRESS_LOCAL,
    CL_KERNEL_ARG_ADDRESS_PRIVATE, CL_KERNEL_ARG_TYPE_PIPE,
};
use opencl3::program::Program;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ptr;
use std::sync::Arc;

/// An argument of an OpenCL user kernel.
pub type ClArg<'a> = KernelArg<'a, ClMemory>;

/// Put in front of every user program.
const PREFIX: &str = "#pragma OPENCL FP_CONTRACT OFF\n#line 1\n";
/// `CL_INVALID_KERNEL_NAME`.
const INVALID_KERNEL_NAME: i32 = -46;
/// The scalar type names a [`KernelArg`] fills, as OpenCL C spells them.
const SCALARS: &str = "int, uint (unsigned int), long, ulong (unsigned long), float, double";

/// The programs of one context, by source and options.
#[derive(Default)]
pub(crate) struct UserPrograms {
    map: Mutex<HashMap<(String, String), Arc<UserProgram>>>,
}

/// A compiled OpenCL C program of one context; its kernels are created once and cached.
pub struct UserProgram {
    program: Program,
    kernels: Mutex<HashMap<String, UserKernel>>,
}

impl std::fmt::Debug for UserProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserProgram").field("program", &self.program.get()).finish()
    }
}

/// What a kernel parameter takes, from its argument info.
#[derive(Debug, Clone, PartialEq)]
enum Param {
    /// A `__global` or `__constant` pointer, with the type it points to as declared
    /// (`"double"` for `double*`).
    Memory(String),
    /// A `__local` pointer.
    Local,
    /// A private scalar, by its OpenCL C name (one of [`SCALARS`]).
    Value(&'static str),
    /// Anything else (image, pipe, sampler, vector, struct, typedef'd name), by its
    /// declaration: no [`KernelArg`] fills it.
    Unsupported(String),
}

/// One kernel of a [`UserProgram`]. Clones share the kernel; launches from several threads
/// are serialised (argument setting and enqueueing happen under one lock).
#[derive(Clone)]
pub struct UserKernel {
    inner: Arc<KernelInner>,
}

struct KernelInner {
    kernel: Mutex<Kernel>,
    name: String,
    /// Per parameter, when the implementation reports argument info.
    params: Option<Vec<Param>>,
    /// `CL_KERNEL_LOCAL_MEM_SIZE` before any argument was set: the kernel's own `__local`.
    static_local: u64,
    /// `CL_DEVICE_LOCAL_MEM_SIZE`.
    device_local: u64,
    num_args: usize,
    max_group: usize,
    max_dims: usize,
    max_item: Vec<usize>,
}

impl std::fmt::Debug for UserKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserKernel")
            .field("name", &self.inner.name)
            .field("args", &self.inner.num_args)
            .finish()
    }
}

impl OpenClBackend {
    /// Compiles `source` with `options` for this context, or returns the program compiled
    /// before from the same source and options.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the source or `options` hold a NUL byte (the compiler
    /// would stop reading the source there); [`Error::Build`] with the compiler's log when
    /// the source does not compile (nothing is cached then).
    pub fn user_program(&self, source: &str, options: &str) -> Result<Arc<UserProgram>> {
        no_nul(options, "build options")?;
        if let Some(at) = source.find('\0') {
            return Err(Error::invalid(format!("OpenCL C source holds a NUL byte at {at}")));
        }
        let key = (source.to_string(), options.to_string());
        let mut map = self.inner.user_programs.map.lock();
        if let Some(p) = map.get(&key) {
            return Ok(p.clone());
        }
        let _span = tracing::debug_span!("opencl.user_build", bytes = source.len()).entered();
        let full = format!("{PREFIX}{source}");
        let opts = format!("{options} -cl-kernel-arg-info");
        let program = Program::create_and_build_from_source(&self.inner.context, &full, &opts)
            .map_err(|log| Error::Build { backend: BackendKind::OpenCl, log })?;
        let p = Arc::new(UserProgram { program, kernels: Mutex::new(HashMap::new()) });
        map.insert(key, p.clone());
        Ok(p)
    }

    /// Compiles `source` (cached as [`OpenClBackend::user_program`]) and returns its kernel `name`.
    ///
    /// # Errors
    /// As [`OpenClBackend::user_program`] and [`UserProgram::kernel`].
    pub fn user_kernel(&self, source: &str, options: &str, name: &str) -> Result<UserKernel> {
        self.user_program(source, options)?.kernel(self, name)
    }
}

impl UserProgram {
    /// The compiled program (the program's own reference: do not release it).
    pub fn native(&self) -> &Program {
        &self.program
    }

    /// The kernel `name` of this program, created once; `backend` is the handle the
    /// program was compiled with (its device limits check the launches).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the program has no kernel of that name (a name with a
    /// NUL byte included);
    /// [`Error::DeviceMismatch`] when `backend` has another context; driver errors of the
    /// kernel queries.
    pub fn kernel(&self, backend: &OpenClBackend, name: &str) -> Result<UserKernel> {
        let ctx = self.program.get_context().map_err(|e| cl(e, "CL_PROGRAM_CONTEXT"))?;
        if ctx != backend.inner.context.get() {
            return Err(Error::DeviceMismatch("the program was built for another OpenCL context".into()));
        }
        no_nul(name, "a kernel name")?;
        let mut kernels = self.kernels.lock();
        if let Some(k) = kernels.get(name) {
            return Ok(k.clone());
        }
        let kernel = Kernel::create(&self.program, name).map_err(|e| {
            if e.0 == INVALID_KERNEL_NAME {
                Error::invalid(format!("the program has no kernel named {name:?}"))
            } else {
                cl(e, "clCreateKernel")
            }
        })?;
        let num_args = kernel.num_args().map_err(|e| cl(e, "CL_KERNEL_NUM_ARGS"))? as usize;
        let params = (0..num_args as u32).map(|i| param(&kernel, i)).collect::<Option<Vec<_>>>();
        let device = backend.inner.entry.device;
        let max_group =
            kernel.get_work_group_size(device.id()).map_err(|e| cl(e, "CL_KERNEL_WORK_GROUP_SIZE"))?;
        let max_dims =
            device.max_work_item_dimensions().map_err(|e| cl(e, "CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS"))?;
        let max_item = device.max_work_item_sizes().map_err(|e| cl(e, "CL_DEVICE_MAX_WORK_ITEM_SIZES"))?;
        // Queried before any argument is set: the kernel's own `__local` variables only.
        let static_local =
            kernel.get_local_mem_size(device.id()).map_err(|e| cl(e, "CL_KERNEL_LOCAL_MEM_SIZE"))?;
        let device_local = device.local_mem_size().map_err(|e| cl(e, "CL_DEVICE_LOCAL_MEM_SIZE"))?;
        let k = UserKernel {
            inner: Arc::new(KernelInner {
                kernel: Mutex::new(kernel),
                name: name.to_string(),
                params,
                static_local,
                device_local,
                num_args,
                max_group,
                max_dims: max_dims as usize,
                max_item,
            }),
        };
        kernels.insert(name.to_string(), k.clone());
        Ok(k)
    }
}

/// `InvalidArgument` when `s` holds a NUL byte (opencl3 would panic making a C string).
fn no_nul(s: &str, what: &str) -> Result<()> {
    match s.find('\0') {
        Some(at) => Err(Error::invalid(format!("{what} {s:?} holds a NUL byte at {at}"))),
        None => Ok(()),
    }
}

/// Parameter `i` from the argument info, `None` when the implementation has none.
///
/// OpenCL reports images and pipes as `__global` too: only a pointer type (its name ends
/// with `*`) is memory, and only a private parameter of a known scalar name is a value.
fn param(kernel: &Kernel, i: u32) -> Option<Param> {
    let space = kernel.get_arg_address_qualifier(i).ok()?;
    let qualifier = kernel.get_arg_type_qualifier(i).ok()?;
    let ty = kernel.get_arg_type_name(i).ok()?;
    let ty = ty.trim_end_matches('\0').trim().to_string();
    let pointer = ty.ends_with('*');
    Some(match space {
        _ if qualifier & u64::from(CL_KERNEL_ARG_TYPE_PIPE) != 0 => Param::Unsupported(format!("pipe {ty}")),
        CL_KERNEL_ARG_ADDRESS_GLOBAL | CL_KERNEL_ARG_ADDRESS_CONSTANT if pointer => {
            Param::Memory(ty.trim_end_matches('*').trim().to_string())
        }
        CL_KERNEL_ARG_ADDRESS_LOCAL if pointer => Param::Local,
        CL_KERNEL_ARG_ADDRESS_PRIVATE if !pointer => scalar(&ty).map_or(Param::Unsupported(ty), Param::Value),
        _ => Param::Unsupported(ty),
    })
}

/// The canonical name of a scalar type a [`KernelArg`] fills.
fn scalar(declared: &str) -> Option<&'static str> {
    Some(match declared {
        "int" => "int",
        "uint" | "unsigned int" => "uint",
        "long" => "long",
        "ulong" | "unsigned long" => "ulong",
        "float" => "float",
        "double" => "double",
        _ => return None,
    })
}

impl UserKernel {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// How many arguments the kernel takes.
    pub fn num_args(&self) -> usize {
        self.inner.num_args
    }

    /// The type `__global`/`__constant` pointer parameter `i` points to, as the kernel
    /// declares it (`"double"` for `__global const double*`), when the implementation
    /// reports argument info; `None` for another parameter.
    pub fn pointee(&self, i: usize) -> Option<&str> {
        match self.inner.params.as_ref()?.get(i)? {
            Param::Memory(t) => Some(t),
            _ => None,
        }
    }

    /// Checks `args` against the kernel's parameters: the count; per argument, a buffer for
    /// a `__global`/`__constant` pointer, a non-zero size for a `__local` one, a scalar of
    /// the declared type (`int`, `uint`, `long`, `ulong`, `float`, `double`; no typedef'd
    /// names); and the `__local` sizes together with the kernel's own `__local` variables
    /// within `CL_DEVICE_LOCAL_MEM_SIZE`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the first mismatch, or naming a parameter no
    /// [`KernelArg`] fills (an image, pipe, sampler, vector, struct or typedef'd scalar: such
    /// kernels are launched through [`UserProgram::native`]); also for every launch of a
    /// kernel whose implementation reports no argument info (nothing could be checked).
    pub fn check_args(&self, args: &[ClArg<'_>]) -> Result<()> {
        let inner = &*self.inner;
        let name = &inner.name;
        if args.len() != inner.num_args {
            return Err(Error::invalid(format!(
                "kernel {name} takes {} arguments, {} were given",
                inner.num_args,
                args.len()
            )));
        }
        let Some(params) = &inner.params else {
            return Err(Error::invalid(format!(
                "the OpenCL implementation reports no argument info for kernel {name}: its \
                 arguments cannot be checked (launch it through UserProgram::native)"
            )));
        };
        let mut local = inner.static_local;
        for (i, (p, a)) in params.iter().zip(args).enumerate() {
            let ok = match (p, a) {
                (Param::Memory(_), KernelArg::Memory(_)) => true,
                (Param::Local, KernelArg::Local(0)) => {
                    return Err(Error::invalid(format!(
                        "argument {i} of {name}: zero bytes of local memory"
                    )));
                }
                (Param::Local, KernelArg::Local(n)) => {
                    local = u64::try_from(*n).ok().and_then(|n| local.checked_add(n)).unwrap_or(u64::MAX);
                    true
                }
                (Param::Value(t), a) => a.c_type() == Some(*t),
                (Param::Unsupported(t), _) => {
                    return Err(Error::invalid(format!(
                        "argument {i} of {name} is declared {t}, which user kernels cannot take \
                         (they take __global, __constant and __local pointers and the scalars \
                         {SCALARS}; launch it through UserProgram::native)"
                    )));
                }
                _ => false,
            };
            if !ok {
                let want = match p {
                    Param::Memory(_) => "a device buffer".to_string(),
                    Param::Local => "local memory".to_string(),
                    Param::Value(t) => format!("a scalar {t}"),
                    Param::Unsupported(t) => t.clone(),
                };
                return Err(Error::invalid(format!(
                    "argument {i} of {name} takes {want}, {} was given",
                    a.describe()
                )));
            }
        }
        if local > inner.device_local {
            return Err(Error::invalid(format!(
                "kernel {name} asks for {} bytes of local memory ({} of its own), the device has {}",
                if local == u64::MAX { "more than u64::MAX".to_string() } else { local.to_string() },
                inner.static_local,
                inner.device_local
            )));
        }
        Ok(())
    }

    /// Launches the kernel on `stream` after checking the arguments and work sizes; the
    /// returned event completes with the kernel. Buffers stay alive until the kernel is done
    /// even when dropped earlier (OpenCL defers their release).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for arguments that do not match the kernel or that it
    /// cannot take (see [`UserKernel::check_args`]) or work sizes over the device's limits;
    /// [`Error::DeviceMismatch`] for a stream or buffer of another context; driver errors
    /// (`OutOfMemory` when the launch runs out of resources).
    pub fn launch(&self, stream: &ClStream, launch: &Launch, args: &[ClArg<'_>]) -> Result<ClEvent> {
        let inner = &*self.inner;
        self.check_args(args)?;
        launch.check_limits(inner.max_dims, inner.max_group, &inner.max_item)?;
        let kernel = inner.kernel.lock();
        let ctx = kernel.context().map_err(|e| cl(e, "CL_KERNEL_CONTEXT"))?;
        if stream.queue.context().map_err(|e| cl(e, "CL_QUEUE_CONTEXT"))? != ctx {
            return Err(Error::DeviceMismatch(format!(
                "kernel {} launched on a queue of another context",
                inner.name
            )));
        }
        for (i, a) in args.iter().enumerate() {
            let at = i as u32;
            let what = || format!("clSetKernelArg({} #{i})", inner.name);
            // SAFETY: check_args matched every argument to its parameter's argument info: a
            // live cl_mem handle for a `__global`/`__constant` pointer (not an image or pipe),
            // a scalar of the declared type, or a non-zero `__local` size that, with the
            // kernel's own, fits the device's local memory.
            let set = unsafe {
                match a {
                    KernelArg::Memory(m) => {
                        if opencl3::memory::ClMem::context(m.native()).map_err(|e| cl(e, "CL_MEM_CONTEXT"))?
                            != ctx
                        {
                            return Err(Error::DeviceMismatch(format!(
                                "argument {i} of {} is a buffer of another OpenCL context",
                                inner.name
                            )));
                        }
                        kernel.set_arg(at, &m.raw())
                    }
                    KernelArg::I32(v) => kernel.set_arg(at, v),
                    KernelArg::U32(v) => kernel.set_arg(at, v),
                    KernelArg::I64(v) => kernel.set_arg(at, v),
                    KernelArg::U64(v) => kernel.set_arg(at, v),
                    KernelArg::F32(v) => kernel.set_arg(at, v),
                    KernelArg::F64(v) => kernel.set_arg(at, v),
                    KernelArg::Local(n) => kernel.set_arg_local_buffer(at, *n),
                }
            };
            set.map_err(|e| driver(e.0, &what()))?;
        }
        let global = launch.global();
        let local = launch.local().map_or(ptr::null(), |l| l.as_ptr());
        let _span = tracing::trace_span!("opencl.user_launch", kernel = %inner.name).entered();
        // SAFETY: a live queue and kernel of one context; every argument was set above;
        // `global` (and `local` when given) hold `global.len()` sizes, 1 to 3 (Launch).
        let ev = unsafe {
            cl3::command_queue::enqueue_nd_range_kernel(
                stream.queue.get(),
                kernel.get(),
                global.len() as u32,
                ptr::null(),
                global.as_ptr(),
                local,
                0,
                ptr::null(),
            )
        }
        .map_err(|c| launch_error(c, &inner.name))?;
        let event = ClEvent::created(Event::new(ev));
        stream.queue.flush().map_err(|e| cl(e, "clFlush"))?;
        Ok(event)
    }
}
