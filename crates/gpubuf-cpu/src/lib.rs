//! gpubuf-cpu: the CPU backend.
//!
//! Host memory aligned to 64 bytes, streams that run work at submission, and copy plans
//! executed by rayon over rows (see [`CpuBackend`]). [`CpuView`] lends an `NDBuffer` to
//! ndarray without copying (`a.view(|v| ..)`, `a.view_mut(|v| ..)`); [`with_array`] and
//! [`with_array_mut`] do the same for a [`Buffer`](gpubuf_buffer::Buffer) and a layout.
//! The ndarray these views are is re-exported as [`ndarray`] (version 0.17).
//!
//! ```
//! use gpubuf_core::{Allocator, Backend, CopyPlan, DType, Kernels, MemRef, Segment};
//! use gpubuf_cpu::CpuBackend;
//!
//! let cpu = CpuBackend::new();
//! let s = cpu.default_stream();
//! let src = cpu.allocate(4 * 4)?;
//! let bytes: Vec<u8> = [1i32, 2, 3, 4].iter().flat_map(|v| v.to_le_bytes()).collect();
//! cpu.write(s, &src, 0, &bytes)?;
//! // Gather the four i32 values reversed (stride -1), negated.
//! let seg = Segment::new(0, 3, &[(4, -1)], 0)?.negated(true);
//! let plan = cpu.prepare(&CopyPlan::new(vec![4], 4, vec![seg])?, DType::I32)?;
//! let dst = cpu.allocate(16)?;
//! cpu.gather(s, &plan, &[MemRef::whole(&src)], MemRef::whole(&dst))?;
//! let mut out = [0u8; 16];
//! cpu.read(s, &dst, 0, &mut out)?;
//! assert_eq!(out[..4], (-4i32).to_le_bytes());
//! # Ok::<(), gpubuf_core::Error>(())
//! ```

mod array;
mod backend;
pub mod baseline;
mod borrow;
mod huge;
pub mod interop;
mod kernels;
mod memory;
mod rows;
pub mod span;
mod team;
mod user_kernel;
mod view;

pub use array::{with_array, with_array_mut, CpuStorage};
pub use backend::{CpuBackend, CpuEvent, CpuPlan, CpuStream};
pub use kernels::{negate_in_place, run_plan_serial};
pub use memory::{CpuMemory, ALIGN};
/// The ndarray crate whose views [`CpuView`] lends (use it to name their types).
pub use ndarray;
pub use user_kernel::{CpuElement, CpuKernel, CpuKernelArgs, CpuKernelFn};
pub use view::CpuView;
