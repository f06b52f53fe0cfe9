//! gpubuf: GPU memory work on every backend.
//!
//! This umbrella crate re-exports the shared vocabulary of `gpubuf-core` ([`Backend`],
//! [`Kernels`], [`Layout`], [`Order`], [`DType`], [`Error`], ...), [`Buffer`] and
//! [`NDBuffer`], the components ([`MemoryPool`], [`Bufferizer`], [`Mirror`] with
//! [`DirtyPolicy`], [`HaloDataTransformer`] with [`HaloExchangeSpec`], [`QuantityHaloSpec`],
//! [`Boundary`] and [`Dim`]; their crates as [`pool`], [`bufferizer`], [`mirror`], [`halo`]),
//! and the backends selected by cargo features: `cpu` (default), `opencl`, `cuda`. A
//! backend that was not compiled in is still nameable at run time, and asking for it gives
//! [`Error::BackendUnavailable`] rather than a panic ([`with_backend`]).
//!
//! [`ndarray`] is re-exported (version 0.17, the one `NDBuffer::from_ndarray`, `to_ndarray`,
//! the mirror and the CPU views speak): name it as `gpubuf::ndarray` and a crate that
//! depends on another ndarray version still works. On the CPU backend, [`CpuView`] lends an
//! `NDBuffer` to ndarray without a copy (`a.view(|v| ..)`, `a.view_mut(|v| ..)`).
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
#[cfg(doctest)]
mod doctests;
mod select;

#[cfg(feature = "cpu")]
pub use device::{Device, DeviceKernel, KernelSource};
/// The buffer crate: [`Buffer`], [`NDBuffer`] and their helpers.
#[doc(inline)]
pub use gpubuf_buffer as buffer;
/// The ndarray crate (version 0.17) that gpubuf's host interop speaks.
pub use gpubuf_buffer::ndarray;
pub use gpubuf_buffer::{args, c_order_vec, Arg, Args, Buffer, NDBuffer};
/// The bufferizer crate.
#[doc(inline)]
pub use gpubuf_bufferizer as bufferizer;
pub use gpubuf_bufferizer::Bufferizer;
pub use gpubuf_core::*;
/// The halo transformer crate.
#[doc(inline)]
pub use gpubuf_halo as halo;
pub use gpubuf_halo::{
    Boundary, Dim, HaloDataTransformer, HaloExchangeSpec, HaloField, HaloFields, QuantityHaloSpec,
};
/// The mirror crate.
#[doc(inline)]
pub use gpubuf_mirror as mirror;
pub use gpubuf_mirror::{DirtyPolicy, Mirror};
/// The memory pool crate.
#[doc(inline)]
pub use gpubuf_pool as pool;
pub use gpubuf_pool::{MemoryPool, PooledBuffer};
pub use select::{compiled, devices, status, with_backend, BackendStatus, BackendVisitor};

/// The CPU backend crate.
#[cfg(feature = "cpu")]
#[doc(inline)]
pub use gpubuf_cpu as cpu;
#[cfg(feature = "cpu")]
pub use gpubuf_cpu::CpuView;
/// The CUDA backend crate.
#[cfg(feature = "cuda")]
#[doc(inline)]
pub use gpubuf_cuda as cuda;
/// Halo exchange across MPI ranks.
#[cfg(feature = "mpi")]
#[doc(inline)]
pub use gpubuf_mpi as mpi;
/// The OpenCL backend crate.
#[cfg(feature = "opencl")]
#[doc(inline)]
pub use gpubuf_opencl as opencl;
