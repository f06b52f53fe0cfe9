//! [`Device`]: one concrete backend handle whose backend is chosen at run time.
//!
//! `Device` implements [`Backend`] and [`Kernels`](gpubuf_core::Kernels) by matching on which backend it holds, so
//! application code names one type (`NDBuffer<Device, f64>`, `MemoryPool<Device>`,
//! `HaloDataTransformer<Device, f64>`) and picks CPU, OpenCL or CUDA from a string or a
//! [`BackendKind`]. Its memory, streams, events and prepared plans are enums
//! ([`Memory`], [`Stream`], [`Event`], [`Plan`]) holding the chosen backend's own types; an
//! object of one backend given to a device of another is [`Error::DeviceMismatch`].
//!
//! ```
//! use gpubuf::{Device, NDBuffer};
//!
//! let device: Device = "cpu".parse()?;
//! let a: NDBuffer<Device, f64> = NDBuffer::from_slice(&device, &[2, 2], &[1.0, 2.0, 3.0, 4.0])?;
//! assert_eq!(a.transpose(None)?.to_vec()?, [1.0, 3.0, 2.0, 4.0]);
//! # Ok::<(), gpubuf::Error>(())
//! ```
//!
//! [`Backend::KIND`] is a constant of the type and cannot follow the value: for `Device` it
//! is [`BackendKind::Cpu`]. Ask [`Backend::kind`] (or [`Device::kind`]) which backend a
//! device holds; gpubuf's own code asks the value.

mod backend;
mod kernel;
mod parts;

pub use kernel::{DeviceKernel, KernelSource};
pub use parts::{Event, Memory, Plan, Stream};

use gpubuf_core::{Backend, BackendKind, Error, Result};
use std::sync::Arc;

/// A device of whichever backend was chosen at run time: CPU always, OpenCL and CUDA when
/// the `opencl` and `cuda` features of gpubuf are enabled.
///
/// Cloning shares the device context, like cloning the backend it holds, and costs one
/// reference count.
#[derive(Clone, Debug)]
pub struct Device {
    pub(crate) shared: Arc<Shared>,
}

/// What every clone of a [`Device`] shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) inner: Inner,
    /// The held backend's default stream, wrapped once (so `default_stream` can lend it).
    pub(crate) default_stream: Stream,
}

/// The backend a [`Device`] holds.
#[derive(Clone, Debug)]
pub(crate) enum Inner {
    Cpu(gpubuf_cpu::CpuBackend),
    #[cfg(feature = "opencl")]
    OpenCl(gpubuf_opencl::OpenClBackend),
    #[cfg(feature = "cuda")]
    Cuda(gpubuf_cuda::CudaBackend),
}

/// The error for a backend whose cargo feature was off when gpubuf was built.
#[cfg(not(all(feature = "opencl", feature = "cuda")))]
fn not_compiled(kind: BackendKind) -> Error {
    Error::BackendUnavailable {
        backend: kind,
        reason: format!("not compiled in (enable the `{}` feature of gpubuf)", kind.name()),
    }
}

impl Device {
    /// Opens the default device of `kind` (for OpenCL and CUDA, the one their backend's
    /// `new` picks, which their device environment variables can choose).
    ///
    /// # Errors
    /// [`Error::BackendUnavailable`] when the backend was not compiled in (the message names
    /// the feature to enable) or cannot run here; driver errors opening it.
    pub fn new(kind: BackendKind) -> Result<Self> {
        match kind {
            BackendKind::Cpu => Ok(Self::cpu()),
            BackendKind::OpenCl => Self::opencl(),
            BackendKind::Cuda => Self::cuda(),
        }
    }

    /// A new CPU device (host memory, rayon kernels). Like [`gpubuf_cpu::CpuBackend::new`],
    /// two devices made by separate calls are distinct devices; clone one to share it.
    pub fn cpu() -> Self {
        Self::from(gpubuf_cpu::CpuBackend::new())
    }

    /// Opens the default OpenCL device.
    ///
    /// # Errors
    /// [`Error::BackendUnavailable`] when the `opencl` feature is off or no OpenCL runtime or
    /// device is found; driver errors.
    pub fn opencl() -> Result<Self> {
        #[cfg(feature = "opencl")]
        return Ok(Self::from(gpubuf_opencl::OpenClBackend::new()?));
        #[cfg(not(feature = "opencl"))]
        Err(not_compiled(BackendKind::OpenCl))
    }

    /// Opens the default CUDA device.
    ///
    /// # Errors
    /// [`Error::BackendUnavailable`] when the `cuda` feature is off, or the CUDA driver,
    /// NVRTC or a device is missing; driver errors.
    pub fn cuda() -> Result<Self> {
        #[cfg(feature = "cuda")]
        return Ok(Self::from(gpubuf_cuda::CudaBackend::new()?));
        #[cfg(not(feature = "cuda"))]
        Err(not_compiled(BackendKind::Cuda))
    }

    /// Which backend this device holds.
    pub fn kind(&self) -> BackendKind {
        match &self.shared.inner {
            Inner::Cpu(_) => BackendKind::Cpu,
            #[cfg(feature = "opencl")]
            Inner::OpenCl(_) => BackendKind::OpenCl,
            #[cfg(feature = "cuda")]
            Inner::Cuda(_) => BackendKind::Cuda,
        }
    }

    /// The CPU backend, when this is a CPU device.
    pub fn as_cpu(&self) -> Option<&gpubuf_cpu::CpuBackend> {
        match &self.shared.inner {
            Inner::Cpu(b) => Some(b),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// The OpenCL backend, when this is an OpenCL device.
    #[cfg(feature = "opencl")]
    pub fn as_opencl(&self) -> Option<&gpubuf_opencl::OpenClBackend> {
        match &self.shared.inner {
            Inner::OpenCl(b) => Some(b),
            _ => None,
        }
    }

    /// The CUDA backend, when this is a CUDA device.
    #[cfg(feature = "cuda")]
    pub fn as_cuda(&self) -> Option<&gpubuf_cuda::CudaBackend> {
        match &self.shared.inner {
            Inner::Cuda(b) => Some(b),
            _ => None,
        }
    }
}

impl Default for Device {
    /// A new CPU device.
    fn default() -> Self {
        Self::cpu()
    }
}

impl std::str::FromStr for Device {
    type Err = Error;

    /// Opens the default device of the backend named `cpu`, `opencl` or `cuda` (any case).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for another name; as [`Device::new`].
    fn from_str(s: &str) -> Result<Self> {
        Self::new(s.parse()?)
    }
}

impl From<gpubuf_cpu::CpuBackend> for Device {
    fn from(b: gpubuf_cpu::CpuBackend) -> Self {
        let default_stream = Stream::Cpu(b.default_stream().clone());
        Device { shared: Arc::new(Shared { inner: Inner::Cpu(b), default_stream }) }
    }
}

#[cfg(feature = "opencl")]
impl From<gpubuf_opencl::OpenClBackend> for Device {
    fn from(b: gpubuf_opencl::OpenClBackend) -> Self {
        let default_stream = Stream::OpenCl(b.default_stream().clone());
        Device { shared: Arc::new(Shared { inner: Inner::OpenCl(b), default_stream }) }
    }
}

#[cfg(feature = "cuda")]
impl From<gpubuf_cuda::CudaBackend> for Device {
    fn from(b: gpubuf_cuda::CudaBackend) -> Self {
        let default_stream = Stream::Cuda(b.default_stream().clone());
        Device { shared: Arc::new(Shared { inner: Inner::Cuda(b), default_stream }) }
    }
}
