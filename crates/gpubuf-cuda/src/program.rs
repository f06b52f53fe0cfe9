//! User kernels: CUDA C compiled by NVRTC once per context, launched on gpubuf streams
//! with their arguments checked first.
//!
//! The driver's launch call (and cudarc's launch builder) trusts its caller: a missing
//! argument or a 4-byte value for an 8-byte parameter is garbage or a crash.
//! [`UserKernel::launch`] checks the arguments against the kernel's parameters as the PTX
//! declares them ([`crate::ptx`]), the shared memory asked for, and the work sizes against
//! the device and kernel limits; every mismatch is a typed error. A parameter the CUDA C
//! source declares as a pointer takes gpubuf memory only, never an address given as an
//! integer: PTX does not tell pointers from 64-bit integers, so the source's declarations
//! are read too ([`crate::nvrtc::declared_pointers`]); [`UserKernel::launch_raw`] takes
//! addresses, in `unsafe` code.
//!
//! Programs are compiled with `--fmad=false` unless the options name `fmad`
//! ([`crate::nvrtc::build_options`]): no fused multiply-add contraction, so results match
//! the CPU and OpenCL (built with `FP_CONTRACT OFF`) bit for bit.
//!
//! ```no_run
//! use gpubuf_buffer::NDBuffer;
//! use gpubuf_core::kernel::{KernelArg, Launch};
//! use gpubuf_core::Backend;
//! use gpubuf_cuda::{interop::view_parts, CudaBackend};
//!
//! const SRC: &str = r#"extern "C" __global__ void iota(float* base, unsigned long long off, unsigned int n) {
//!     unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
//!     if (i < n) base[off + i] = (float)i;
//! }"#;
//! let cu = CudaBackend::new()?;
//! let a = NDBuffer::<_, f32>::zeros(&cu, &[8])?;
//! let tail = a.slice(&[5..8])?;
//! let (mem, off) = view_parts(&tail)?; // (allocation, element offset)
//! let k = cu.user_kernel(SRC, "", "iota")?; // compiled once per context
//! let args = [KernelArg::Memory(mem), KernelArg::U64(off), KernelArg::U32(3)];
//! k.launch(cu.default_stream(), &Launch::new(&[4])?, &args)?;
//! assert_eq!(a.to_vec()?, vec![0., 0., 0., 0., 0., 0., 1., 2.]);
//! assert!(k.launch(cu.default_stream(), &Launch::new(&[4])?, &args[..2]).is_err());
//! # Ok::<(), gpubuf_core::Error>(())
//! ```

use crate::error::driver;
use crate::geometry::Limits;
use crate::nvrtc::{compile_user_ptx, declared_pointers};
use crate::ptx::Signature;
use crate::{CudaBackend, CudaMemory};
use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{CudaFunction, CudaModule};
use cudarc::nvrtc::Ptx;
use gpubuf_core::kernel::KernelArg;
use gpubuf_core::{Error, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

mod launch;
mod nd;

/// An argument of a CUDA user kernel.
pub type CudaArg<'a> = KernelArg<'a, CudaMemory>;

/// The programs of one context, by source and options.
#[derive(Default)]
pub(crate) struct UserPrograms {
    map: Mutex<HashMap<(String, String), Arc<UserProgram>>>,
}

/// A compiled CUDA C program loaded into one context; its kernels are looked up once and
/// cached.
pub struct UserProgram {
    ptx: String,
    /// Which parameters the source declares as pointers, by kernel
    /// ([`crate::nvrtc::declared_pointers`]; empty when the source could not be read so).
    pointers: HashMap<String, Vec<bool>>,
    module: Arc<CudaModule>,
    ctx: Arc<cudarc::driver::CudaContext>,
    kernels: Mutex<HashMap<String, UserKernel>>,
}

impl std::fmt::Debug for UserProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserProgram").field("ptx_bytes", &self.ptx.len()).finish()
    }
}

/// One kernel of a [`UserProgram`]. Clones share it; launches from several threads are
/// independent (the parameters are copied at each launch).
#[derive(Clone)]
pub struct UserKernel {
    inner: Arc<KernelInner>,
}

struct KernelInner {
    function: CudaFunction,
    signature: Signature,
    limits: Limits,
    /// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`.
    max_dynamic_shared: usize,
    ctx: Arc<cudarc::driver::CudaContext>,
}

impl std::fmt::Debug for UserKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserKernel")
            .field("name", &self.inner.signature.name)
            .field("args", &self.inner.signature.params.len())
            .finish()
    }
}

impl CudaBackend {
    /// Compiles `source` with NVRTC and `options` for this context, or returns the program
    /// compiled before from the same source and options. `--fmad=false` is added unless
    /// the options name `fmad` (see [`crate::nvrtc::build_options`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the source or options hold a NUL byte;
    /// [`Error::Build`] with NVRTC's log when the source does not compile (nothing is
    /// cached then); [`Error::BackendUnavailable`] without NVRTC; driver errors loading the
    /// module.
    pub fn user_program(&self, source: &str, options: &str) -> Result<Arc<UserProgram>> {
        // Before the cache: a NUL byte is refused, never looked up (embedded programs are
        // cached under options that hold one).
        if source.contains('\0') || options.contains('\0') {
            return Err(Error::invalid("a CUDA source or NVRTC options hold a NUL byte"));
        }
        let key = (source.to_string(), options.to_string());
        let mut map = self.inner.user_programs.map.lock();
        if let Some(p) = map.get(&key) {
            return Ok(p.clone());
        }
        let ptx = compile_user_ptx(source, options)?;
        crate::ptx::entries(&ptx)?; // a module whose entries cannot be read is refused whole
                                    // Kernels whose declarations cannot be read keep 64-bit parameters of unknown type,
                                    // which take gpubuf memory only.
        let pointers = declared_pointers(source, options, &ptx).unwrap_or_else(|e| {
            tracing::debug!("the pointer parameters of a user program could not be read: {e}");
            HashMap::new()
        });
        let module = self
            .inner
            .ctx
            .load_module(Ptx::from_src(ptx.clone()))
            .map_err(|e| driver(e, "cuModuleLoadData"))?;
        let p = Arc::new(UserProgram {
            ptx,
            pointers,
            module,
            ctx: self.inner.ctx.clone(),
            kernels: Mutex::new(HashMap::new()),
        });
        map.insert(key, p.clone());
        Ok(p)
    }

    /// Loads an embedded program (compiled ahead of time by `cargo xtask cuda-kernels`, such
    /// as [`crate::aot::STENCIL`]) into this context, or returns the one loaded before: the
    /// image chosen as for the plan kernels ([`crate::aot::candidates`]: the device's cubin,
    /// else the PTX, else NVRTC compiling its text), its kernels launched like a user
    /// program's. Kernel signatures come from the embedded PTX and, where the image carries
    /// the signature probe, its pointer parameters too: no NVRTC on a device an image runs on.
    ///
    /// # Errors
    /// [`Error::BackendUnavailable`] when no embedded image runs on the device and NVRTC is
    /// missing, or an image does not inflate; [`Error::Build`] when NVRTC cannot compile for
    /// the device; driver errors loading the module.
    pub fn embedded_program(&self, image: &'static crate::aot::Embedded) -> Result<Arc<UserProgram>> {
        // Options from users never hold a NUL byte (refused), so this key is an embedded
        // one; keyed by the image's address, as a caller's own `Embedded` may reuse a name.
        let key = (format!("{:p}", image), "\0embedded".to_string());
        let mut map = self.inner.user_programs.map.lock();
        if let Some(p) = map.get(&key) {
            return Ok(p.clone());
        }
        let ptx = String::from_utf8(crate::aot::inflate(image.ptx.1)?).map_err(|_| {
            crate::error::unavailable(format!("the embedded PTX of {} is not text", image.source))
        })?;
        crate::ptx::entries(&ptx)?;
        let pointers = crate::nvrtc::embedded_pointers(&ptx)?;
        self.bind()?;
        let (major, minor) =
            self.inner.ctx.compute_capability().map_err(|e| driver(e, "compute capability"))?;
        let cc = |v: i32| {
            u32::try_from(v)
                .map_err(|_| crate::error::unavailable(format!("compute capability {major}.{minor}")))
        };
        let ctx = &self.inner.ctx;
        let (module, _) =
            crate::aot::load_with(image, cc(major)?, cc(minor)?, |choice, bytes| match choice {
                crate::aot::Choice::Ptx(_) => ctx.load_module(Ptx::from_src(String::from_utf8_lossy(&bytes))),
                // A cubin: the driver reads ELF images through aligned loads; allocators hand
                // out blocks of this size (kilobytes) 16-byte aligned (glibc's malloc, which
                // Rust's system allocator calls, jemalloc, mimalloc).
                _ => ctx.load_module(Ptx::from_binary(bytes)),
            })?;
        let p = Arc::new(UserProgram {
            ptx,
            pointers,
            module,
            ctx: ctx.clone(),
            kernels: Mutex::new(HashMap::new()),
        });
        map.insert(key, p.clone());
        Ok(p)
    }

    /// Compiles `source` (cached as [`CudaBackend::user_program`]) and returns its kernel
    /// `name`.
    ///
    /// # Errors
    /// As [`CudaBackend::user_program`] and [`UserProgram::kernel`].
    pub fn user_kernel(&self, source: &str, options: &str, name: &str) -> Result<UserKernel> {
        self.user_program(source, options)?.kernel(self, name)
    }
}

impl UserProgram {
    /// The PTX NVRTC produced.
    pub fn ptx(&self) -> &str {
        &self.ptx
    }

    /// The loaded cudarc module, for the caller's own launches (`load_function`).
    pub fn native(&self) -> &Arc<CudaModule> {
        &self.module
    }

    /// The kernel `name` (an `extern "C"` kernel's C name), looked up once; `backend` is the
    /// handle the program was compiled with (its device limits check the launches).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the PTX has no entry of that name (a name with a NUL
    /// byte included); [`Error::DeviceMismatch`] when `backend` has another context; driver
    /// errors of the function queries.
    pub fn kernel(&self, backend: &CudaBackend, name: &str) -> Result<UserKernel> {
        if self.ctx.cu_ctx() != backend.inner.ctx.cu_ctx() {
            return Err(Error::DeviceMismatch("the program was built for another CUDA context".into()));
        }
        let mut kernels = self.kernels.lock();
        if let Some(k) = kernels.get(name) {
            return Ok(k.clone());
        }
        // Found in the PTX first: the name is an entry there, so it has no NUL byte (cudarc
        // would panic making a C string of it).
        let mut signature = Signature::find(&self.ptx, name)?;
        if let Some(typed) = self.pointers.get(name).and_then(|p| signature.with_pointers(p).ok()) {
            signature = typed;
        }
        backend.bind()?;
        let function = self
            .module
            .load_function(name)
            .map_err(|e| driver(e, &format!("cuModuleGetFunction({name})")))?;
        let fattr = |a: CUfunction_attribute, what: &str| -> Result<usize> {
            let v = function.get_attribute(a).map_err(|e| driver(e, what))?;
            Ok(usize::try_from(v).unwrap_or(0))
        };
        let dattr = |a: CUdevice_attribute, what: &str| -> Result<usize> {
            let v = backend.inner.ctx.attribute(a).map_err(|e| driver(e, what))?;
            Ok(usize::try_from(v).unwrap_or(0))
        };
        use CUdevice_attribute::*;
        let limits = Limits {
            max_threads: fattr(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                "CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK",
            )?,
            max_block: [
                dattr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, "MAX_BLOCK_DIM_X")?,
                dattr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, "MAX_BLOCK_DIM_Y")?,
                dattr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, "MAX_BLOCK_DIM_Z")?,
            ],
            max_grid: [
                dattr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, "MAX_GRID_DIM_X")?,
                dattr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, "MAX_GRID_DIM_Y")?,
                dattr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, "MAX_GRID_DIM_Z")?,
            ],
        };
        let max_dynamic_shared = fattr(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES",
        )?;
        let k = UserKernel {
            inner: Arc::new(KernelInner {
                function,
                signature,
                limits,
                max_dynamic_shared,
                ctx: self.ctx.clone(),
            }),
        };
        kernels.insert(name.to_string(), k.clone());
        Ok(k)
    }
}

impl UserKernel {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.inner.signature.name
    }

    /// How many arguments the kernel takes (its PTX parameters; a `Local` is not one).
    pub fn num_args(&self) -> usize {
        self.inner.signature.params.len()
    }

    /// The parameters as the PTX declares them.
    pub fn signature(&self) -> &Signature {
        &self.inner.signature
    }

    /// The cudarc function, for cudarc's launch builder.
    pub fn native(&self) -> &CudaFunction {
        &self.inner.function
    }

    /// Checks `args` as [`Signature::check_args`] does (a pointer parameter takes gpubuf
    /// memory only), and the dynamic shared memory against the kernel's limit; returns the
    /// bytes of dynamic shared memory.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the first mismatch.
    pub fn check_args(&self, args: &[CudaArg<'_>]) -> Result<usize> {
        let shared = self.inner.signature.check_args(args)?;
        self.check_shared(shared)
    }

    /// As [`UserKernel::check_args`], with [`Signature::check_args_raw`]: pointers also
    /// take addresses (`U64`, `I64`), as [`UserKernel::launch_raw`] does.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the first mismatch.
    pub fn check_args_raw(&self, args: &[CudaArg<'_>]) -> Result<usize> {
        let shared = self.inner.signature.check_args_raw(args)?;
        self.check_shared(shared)
    }

    fn check_shared(&self, shared: usize) -> Result<usize> {
        if shared > self.inner.max_dynamic_shared {
            return Err(Error::invalid(format!(
                "kernel {} asks for {shared} bytes of dynamic shared memory, it takes at most {}",
                self.name(),
                self.inner.max_dynamic_shared
            )));
        }
        Ok(shared)
    }
}
