//! [`DeviceKernel`]: one user kernel written for every backend (OpenCL C, CUDA C, a Rust
//! closure), built for whichever backend a [`Device`] holds and launched with [`Args`]:
//! the arrays themselves ([`NDBuffer`](crate::NDBuffer)s of any element type) and scalars,
//! as CuPy's `RawKernel(...)(grid, block, (u, out, p))` takes them.
//!
//! Each array becomes the parameters `(T* base, long off)` (and `long` strides with
//! `.strided()`), each scalar one parameter, on OpenCL and CUDA; the CPU closure gets
//! ndarray views and the scalars by index. See [`gpubuf_buffer::args`] for the
//! convention and its checks.
//!
//! ```
//! use gpubuf::kernel::Launch;
//! use gpubuf::{Args, Device, KernelSource, NDBuffer};
//!
//! const CL: &str = "__kernel void twice(__global const double* x, long xo, __global double* y, long yo) {
//!     size_t i = get_global_id(0);
//!     y[yo + i] = 2.0 * x[xo + i];
//! }";
//! const CU: &str = r#"extern "C" __global__ void twice(const double* x, long long xo, double* y, long long yo) {
//!     unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
//!     y[yo + i] = 2.0 * x[xo + i];
//! }"#;
//! let source = KernelSource::new().opencl(CL).cuda(CU).cpu(|a| {
//!     let x = a.array::<f64>(0)?;
//!     a.array_mut::<f64>(1)?.zip_mut_with(&x, |y, &x| *y = 2.0 * x);
//!     Ok(())
//! });
//! let device: Device = "cpu".parse()?;
//! let k = device.kernel(&source, "twice")?;
//! let x = NDBuffer::<Device, f64>::from_slice(&device, &[3], &[1.0, 2.0, 3.0])?;
//! let y = NDBuffer::<Device, f64>::zeros(&device, &[3])?;
//! k.launch(&Launch::new(&[3])?, &Args::new().array(&x).array_mut(&y))?;
//! assert_eq!(y.to_vec()?, [2.0, 4.0, 6.0]);
//! # Ok::<(), gpubuf::Error>(())
//! ```

use super::parts::mismatch;
use super::{Device, Event, Inner, Stream};
use gpubuf_buffer::Args;
use gpubuf_core::kernel::Launch;
use gpubuf_core::{Backend, BackendKind, Error, Result};
use gpubuf_cpu::{CpuKernel, CpuKernelArgs, CpuKernelFn};
use std::sync::Arc;

/// A kernel's source for each backend: OpenCL C, CUDA C (an `extern "C"` kernel) and a
/// Rust closure for the CPU. Only the held backend's is needed; a missing one is an error
/// when a device of that backend builds the kernel.
#[derive(Clone, Default)]
pub struct KernelSource<'s> {
    opencl: Option<&'s str>,
    opencl_options: &'s str,
    cuda: Option<&'s str>,
    cuda_options: &'s str,
    cpu: Option<Arc<CpuKernelFn>>,
}

impl std::fmt::Debug for KernelSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelSource")
            .field("opencl", &self.opencl.map(str::len))
            .field("cuda", &self.cuda.map(str::len))
            .field("cpu", &self.cpu.is_some())
            .finish()
    }
}

impl<'s> KernelSource<'s> {
    /// No source yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The OpenCL C program (built with `FP_CONTRACT OFF`, see
    /// [`OpenClBackend::user_program`](gpubuf_opencl::OpenClBackend::user_program)).
    pub fn opencl(mut self, source: &'s str) -> Self {
        self.opencl = Some(source);
        self
    }

    /// Build options for the OpenCL program (default none).
    pub fn opencl_options(mut self, options: &'s str) -> Self {
        self.opencl_options = options;
        self
    }

    /// The CUDA C program (NVRTC, `--fmad=false` unless the options name `fmad`).
    pub fn cuda(mut self, source: &'s str) -> Self {
        self.cuda = Some(source);
        self
    }

    /// NVRTC options for the CUDA program (default none).
    pub fn cuda_options(mut self, options: &'s str) -> Self {
        self.cuda_options = options;
        self
    }

    /// The CPU kernel: a closure over the arguments as ndarray views and scalars
    /// ([`CpuKernelArgs`]), run once per launch.
    pub fn cpu(mut self, f: impl Fn(&mut CpuKernelArgs<'_>) -> Result<()> + Send + Sync + 'static) -> Self {
        self.cpu = Some(Arc::new(f));
        self
    }
}

/// The backend's own kernel a [`DeviceKernel`] holds.
#[derive(Clone, Debug)]
enum Held {
    Cpu(CpuKernel),
    #[cfg(feature = "opencl")]
    OpenCl(gpubuf_opencl::UserKernel),
    #[cfg(feature = "cuda")]
    Cuda(gpubuf_cuda::UserKernel),
}

/// A user kernel built for a [`Device`] ([`Device::kernel`]), launched with [`Args`]:
/// on OpenCL and CUDA each array becomes `(T* base, long offset)` (plus a `long` stride
/// per axis when passed `.strided()`) and each scalar one parameter, as
/// [`crate::args`] describes; the CPU closure gets ndarray views
/// ([`CpuKernelArgs`]). Clones share it.
#[derive(Clone, Debug)]
pub struct DeviceKernel {
    device: Device,
    name: Arc<str>,
    held: Held,
}

/// The error for a kernel with no source for `backend`.
fn no_source(backend: BackendKind, name: &str, what: &str) -> Error {
    Error::BackendUnavailable {
        backend,
        reason: format!("kernel {name:?} has no {what} (give it with KernelSource::{})", backend.name()),
    }
}

impl Device {
    /// Builds kernel `name` from the held backend's part of `source`: compiles the OpenCL
    /// C or CUDA C program (cached per context: the same source and options compile once)
    /// and finds the kernel, or wraps the CPU closure.
    ///
    /// # Errors
    /// [`Error::BackendUnavailable`] naming the backend when `source` has nothing for it;
    /// [`Error::Build`] with the compiler's log; [`Error::InvalidArgument`] when the
    /// program has no kernel `name`; as the backends' `user_kernel`.
    pub fn kernel(&self, source: &KernelSource<'_>, name: &str) -> Result<DeviceKernel> {
        let held = match &self.shared.inner {
            Inner::Cpu(b) => {
                let f = source.cpu.clone().ok_or_else(|| no_source(BackendKind::Cpu, name, "CPU closure"))?;
                Held::Cpu(b.user_kernel_arc(name, f))
            }
            #[cfg(feature = "opencl")]
            Inner::OpenCl(b) => {
                let src =
                    source.opencl.ok_or_else(|| no_source(BackendKind::OpenCl, name, "OpenCL C source"))?;
                Held::OpenCl(b.user_kernel(src, source.opencl_options, name)?)
            }
            #[cfg(feature = "cuda")]
            Inner::Cuda(b) => {
                let src = source.cuda.ok_or_else(|| no_source(BackendKind::Cuda, name, "CUDA C source"))?;
                Held::Cuda(b.user_kernel(src, source.cuda_options, name)?)
            }
        };
        Ok(DeviceKernel { device: self.clone(), name: name.into(), held })
    }
}

impl DeviceKernel {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The backend it was built for.
    pub fn kind(&self) -> BackendKind {
        self.device.kind()
    }

    /// The device it was built for.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The CPU kernel, on a CPU device.
    pub fn as_cpu(&self) -> Option<&CpuKernel> {
        match &self.held {
            Held::Cpu(k) => Some(k),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// The OpenCL kernel, on an OpenCL device.
    #[cfg(feature = "opencl")]
    pub fn as_opencl(&self) -> Option<&gpubuf_opencl::UserKernel> {
        match &self.held {
            Held::OpenCl(k) => Some(k),
            _ => None,
        }
    }

    /// The CUDA kernel, on a CUDA device.
    #[cfg(feature = "cuda")]
    pub fn as_cuda(&self) -> Option<&gpubuf_cuda::UserKernel> {
        match &self.held {
            Held::Cuda(k) => Some(k),
            _ => None,
        }
    }

    /// Launches the kernel on the device's default stream ([`DeviceKernel::launch_on`]).
    ///
    /// # Errors
    /// As [`DeviceKernel::launch_on`].
    pub fn launch(&self, launch: &Launch, args: &Args<'_, Device>) -> Result<Event> {
        self.launch_on(self.device.default_stream(), launch, args)
    }

    /// Launches the kernel on `stream` with `args`; the returned event completes with the
    /// kernel (on the CPU the closure has run when this returns). On OpenCL and CUDA the
    /// [`Launch`] gives the work-items (threads) per dimension, dimension 0 fastest (`x`
    /// on CUDA, see `gpubuf::cuda::geometry`); on the CPU it is handed to the closure.
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] for a stream or an array of another device;
    /// [`Error::InvalidArgument`] for a non-contiguous array passed without strides, for
    /// arguments that do not match the kernel's parameters (count and kinds; the message
    /// lists how the arguments expanded), work sizes over the device's limits, and on the
    /// CPU a written array that shares memory with another argument;
    /// [`Error::DTypeMismatch`] for an array whose element type is not the one its OpenCL
    /// parameter points to, or not the one the CPU closure asks for; driver errors.
    pub fn launch_on(&self, stream: &Stream, launch: &Launch, args: &Args<'_, Device>) -> Result<Event> {
        let want = self.kind();
        if stream.kind() != want {
            return Err(mismatch("a stream", stream.kind(), want));
        }
        match &self.held {
            Held::Cpu(k) => {
                let parts = args.lower(&self.device, |m| m.as_cpu())?;
                k.launch_parts(launch, &parts)?;
                self.device.record_event(stream)
            }
            #[cfg(feature = "opencl")]
            Held::OpenCl(k) => {
                let s = stream.as_opencl().ok_or_else(|| mismatch("a stream", stream.kind(), want))?;
                let parts = args.lower(&self.device, |m| m.as_opencl())?;
                Ok(Event::OpenCl(k.launch_parts(s, launch, &parts)?))
            }
            #[cfg(feature = "cuda")]
            Held::Cuda(k) => {
                let s = stream.as_cuda().ok_or_else(|| mismatch("a stream", stream.kind(), want))?;
                let parts = args.lower(&self.device, |m| m.as_cuda())?;
                Ok(Event::Cuda(k.launch_parts(s, launch, &parts)?))
            }
        }
    }
}
