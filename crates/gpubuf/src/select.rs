//! Choosing a backend at run time, whichever were compiled in.

use gpubuf_core::{BackendKind, DeviceInfo, Error, Kernels, Result};

/// Code generic over the backend, run with the backend chosen at run time
/// (see [`with_backend`]).
pub trait BackendVisitor {
    /// What the visit returns.
    type Output;

    /// Runs with a concrete backend.
    ///
    /// # Errors
    /// Whatever the visitor's work returns.
    fn visit<B: Kernels>(self, backend: B) -> Result<Self::Output>;
}

/// Whether a backend was compiled in, and if so whether it can run here.
#[derive(Debug, Clone)]
pub struct BackendStatus {
    /// The backend.
    pub kind: BackendKind,
    /// Whether its cargo feature was enabled.
    pub compiled: bool,
    /// Its devices, or why it cannot run.
    pub devices: std::result::Result<Vec<DeviceInfo>, Error>,
}

fn not_compiled(kind: BackendKind) -> Error {
    Error::BackendUnavailable {
        backend: kind,
        reason: format!("not compiled in (enable the `{}` feature of gpubuf)", kind.name()),
    }
}

/// Opens the default device of `kind` and runs `visitor` with it.
///
/// # Errors
/// [`Error::BackendUnavailable`] when the backend was not compiled in or cannot run here;
/// otherwise what the visitor returns.
pub fn with_backend<V: BackendVisitor>(kind: BackendKind, visitor: V) -> Result<V::Output> {
    match kind {
        #[cfg(feature = "cpu")]
        BackendKind::Cpu => visitor.visit(gpubuf_cpu::CpuBackend::new()),
        #[cfg(feature = "opencl")]
        BackendKind::OpenCl => visitor.visit(gpubuf_opencl::OpenClBackend::new()?),
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => visitor.visit(gpubuf_cuda::CudaBackend::new()?),
        #[allow(unreachable_patterns)]
        other => Err(not_compiled(other)),
    }
}

/// The devices of `kind`.
///
/// # Errors
/// [`Error::BackendUnavailable`] when not compiled in or not runnable here.
pub fn devices(kind: BackendKind) -> Result<Vec<DeviceInfo>> {
    match kind {
        #[cfg(feature = "cpu")]
        BackendKind::Cpu => {
            use gpubuf_core::Backend;
            Ok(vec![gpubuf_cpu::CpuBackend::new().info()])
        }
        #[cfg(feature = "opencl")]
        BackendKind::OpenCl => Ok(gpubuf_opencl::devices()?.into_iter().map(|e| e.info).collect()),
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => gpubuf_cuda::devices(),
        #[allow(unreachable_patterns)]
        other => Err(not_compiled(other)),
    }
}

/// Whether `kind` was compiled into this build.
pub fn compiled(kind: BackendKind) -> bool {
    match kind {
        BackendKind::Cpu => cfg!(feature = "cpu"),
        BackendKind::OpenCl => cfg!(feature = "opencl"),
        BackendKind::Cuda => cfg!(feature = "cuda"),
    }
}

/// The status of every backend, for `gpubuf info`.
pub fn status() -> Vec<BackendStatus> {
    BackendKind::ALL
        .into_iter()
        .map(|kind| BackendStatus { kind, compiled: compiled(kind), devices: devices(kind) })
        .collect()
}
