//! gpubuf-opencl: the OpenCL backend, on opencl3 with the runtime loaded dynamically.
//!
//! [`OpenClBackend::new`] returns [`gpubuf_core::Error::BackendUnavailable`] instead of
//! panicking when no runtime or device exists. Copy plans run as one kernel launch, built
//! once per context, slot count and shape: `kernels/shared/plan_blocks.h` (a work-group
//! per block) on GPU and accelerator devices, `kernels/opencl/plan_rows.cl` (units of rows
//! per work-item) on CPU devices, `kernels/opencl/plan.cl` (a run of elements per
//! work-item) when asked for; [`shape`] says how one is chosen.
//!
//! ```
//! use gpubuf_core::{Allocator, Backend};
//! use gpubuf_opencl::OpenClBackend;
//!
//! match OpenClBackend::new() {
//!     Ok(cl) => {
//!         let s = cl.default_stream();
//!         let mem = cl.allocate(16)?;
//!         cl.write(s, &mem, 0, &[7u8; 16])?;
//!         let mut back = [0u8; 16];
//!         cl.read(s, &mem, 0, &mut back)?;
//!         assert_eq!(back, [7u8; 16]);
//!     }
//!     Err(e) => println!("no OpenCL here: {e}"),
//! }
//! # Ok::<(), gpubuf_core::Error>(())
//! ```

mod backend;
mod device;
mod error;
mod foreign;
pub mod interop;
mod kernels;
mod memory;
mod nd_kernel;
mod owned;
mod program;
mod rows;
pub mod shape;
mod stream;
mod svm;

pub use backend::OpenClBackend;
pub use device::{devices, runtime_available, ClDeviceEntry, DEVICE_ENV};
pub use kernels::{ClPlan, PLAN_BLOCKS_SOURCE, PLAN_ROWS_SOURCE, PLAN_SOURCE};
pub use memory::ClMemory;
/// The opencl3 crate gpubuf's handles are typed with (the same version).
pub use opencl3;
pub use program::{ClArg, UserKernel, UserProgram};
pub use shape::{prelude, PlanKernel, CHUNK_ENV, KERNEL_ENV, MAX_CHUNK, MAX_SLOTS, NARROW_ENV, ROW_UNIT};
pub use stream::{ClEvent, ClStream};
pub use svm::{SvmAllocator, SvmMemory};
