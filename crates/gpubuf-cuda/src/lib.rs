//! gpubuf-cuda: the CUDA backend on cudarc, loaded dynamically.
//!
//! Builds with no CUDA toolkit installed. Before any cudarc call that could panic on a
//! missing library, [`CudaBackend::new`] checks for libcuda and a device and returns
//! [`gpubuf_core::Error::BackendUnavailable`] with the reason. Plan kernels come from
//! `kernels/cuda/plan.cu`, compiled by NVRTC ([`compile_ptx`]) once per context.
//!
//! ```
//! use gpubuf_cuda::CudaBackend;
//!
//! match CudaBackend::new() {
//!     Ok(gpu) => println!("CUDA device: {:?}", gpu),
//!     Err(e) => println!("no CUDA here: {e}"), // never a panic
//! }
//! ```

mod backend;
mod device;
mod error;
pub mod interop;
mod kernels;
mod memory;
mod staging;

pub use backend::CudaBackend;
pub use device::{devices, driver_available, nvrtc_available, DEVICE_ENV};
pub use kernels::{compile_ptx, CudaPlan, MAX_SOURCES, PLAN_SOURCE};
pub use memory::{CudaEvent, CudaMemory, CudaStream};
