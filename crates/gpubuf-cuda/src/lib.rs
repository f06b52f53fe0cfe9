//! gpubuf-cuda: the CUDA backend on cudarc, loaded dynamically.
//!
//! Builds with no CUDA toolkit installed. Before any cudarc call that could panic on a
//! missing library, [`CudaBackend::new`] checks for libcuda and a device and returns
//! [`gpubuf_core::Error::BackendUnavailable`] with the reason. Plan kernels come from
//! `kernels/shared/plan_blocks.h` (the OpenCL backend's block kernel, after the CUDA
//! prelude `kernels/cuda/prelude.cuh`), compiled ahead of time and embedded ([`aot`]: cubins for sm_70
//! to sm_90 and PTX the driver JIT-compiles for newer GPUs), so the driver alone runs them;
//! NVRTC compiles them at run time only on a GPU no embedded image fits.
//!
//! Bridges to the caller's own CUDA code: user kernels in CUDA C compiled by NVRTC and
//! launched with checked arguments ([`CudaBackend::user_kernel`], [`program`]), device
//! pointers, streams and events across the boundary, cudarc slices and foreign device
//! memory adopted without a copy, and gpubuf views as arguments of cudarc's launch builder
//! ([`interop`]). The cudarc crate is re-exported as [`cudarc`] (version 0.19, features
//! `driver` and `nvrtc`), so the caller's cudarc types are the ones gpubuf takes.
//!
//! ```
//! use gpubuf_cuda::CudaBackend;
//!
//! match CudaBackend::new() {
//!     Ok(gpu) => println!("CUDA device: {:?}", gpu),
//!     Err(e) => println!("no CUDA here: {e}"), // never a panic
//! }
//! ```

mod adopt;
pub mod aot;
mod backend;
mod device;
mod error;
pub mod geometry;
pub mod interop;
mod kernels;
mod memory;
pub mod nvrtc;
mod order;
mod owned;
pub mod program;
pub mod ptx;
mod staging;

/// The cudarc crate gpubuf is built on (0.19), so that the caller's `CudaSlice`,
/// `CudaStream` and launch builder are the types gpubuf takes.
pub use cudarc;

pub use backend::CudaBackend;
pub use device::{device_list, devices, driver_available, nvrtc_available, DEVICE_ENV};
pub use kernels::{compile_ptx, CudaPlan, MAX_SOURCES, PLAN_SOURCE};
pub use memory::{CudaEvent, CudaMemory, CudaStream};
pub use nvrtc::compile_user_ptx;
pub use program::{CudaArg, UserKernel, UserProgram};
