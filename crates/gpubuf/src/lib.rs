//! gpubuf: GPU memory work on every backend.
//!
//! This umbrella crate re-exports the shared vocabulary ([`gpubuf_core`]), [`Buffer`] and
//! [`NDBuffer`], and the backends selected by cargo features: `cpu` (default), `opencl`,
//! `cuda`. A backend that was not compiled in is still nameable at run time, and asking for
//! it gives [`Error::BackendUnavailable`] rather than a panic ([`with_backend`]).
//!
//! ```
//! use gpubuf::{with_backend, BackendKind, BackendVisitor, Kernels, NDBuffer, Result};
//!
//! struct Sum;
//! impl BackendVisitor for Sum {
//!     type Output = f64;
//!     fn visit<B: Kernels>(self, b: B) -> Result<f64> {
//!         let a = NDBuffer::<B, f64>::from_slice(&b, &[2, 2], &[1.0, 2.0, 3.0, 4.0])?;
//!         Ok(a.transpose(None)?.to_vec()?.iter().sum())
//!     }
//! }
//! assert_eq!(with_backend(BackendKind::Cpu, Sum)?, 10.0);
//! # Ok::<(), gpubuf::Error>(())
//! ```

#[cfg(feature = "cpu")]
pub mod device;
mod select;

#[cfg(feature = "cpu")]
pub use device::Device;
pub use gpubuf_buffer::{Buffer, NDBuffer};
/// The bufferizer crate.
pub use gpubuf_bufferizer as bufferizer;
pub use gpubuf_bufferizer::Bufferizer;
pub use gpubuf_core::*;
/// The halo transformer crate.
pub use gpubuf_halo as halo;
/// The mirror crate.
pub use gpubuf_mirror as mirror;
pub use gpubuf_mirror::Mirror;
/// The memory pool crate.
pub use gpubuf_pool as pool;
pub use gpubuf_pool::{MemoryPool, PooledBuffer};
pub use select::{compiled, devices, status, with_backend, BackendStatus, BackendVisitor};

/// The CPU backend crate.
#[cfg(feature = "cpu")]
pub use gpubuf_cpu as cpu;
/// The CUDA backend crate.
#[cfg(feature = "cuda")]
pub use gpubuf_cuda as cuda;
/// Halo exchange across MPI ranks.
#[cfg(feature = "mpi")]
pub use gpubuf_mpi as mpi;
/// The OpenCL backend crate.
#[cfg(feature = "opencl")]
pub use gpubuf_opencl as opencl;
