//! gpubuf-core: the vocabulary every gpubuf crate shares.
//!
//! * [`Backend`], [`Allocator`], [`Kernels`]: the backend traits (CPU, OpenCL, CUDA).
//! * [`DType`] and [`Element`]: element types.
//! * [`Layout`] and [`Order`]: shapes, strides and views.
//! * [`CopyPlan`] and [`Segment`]: the backend-neutral gather/scatter description that
//!   halo packing, bufferizer appends, mirror uploads and strided copies all compile to.
//! * [`Error`]: one error type whose variants say what the caller can do.
//!
//! ```
//! use gpubuf_core::{CopyPlan, Layout, Order, Segment};
//!
//! // A 3x4 C-order array; pack its transpose (a view: swapped strides) into a buffer.
//! let t = Layout::contiguous(&[3, 4], Order::C)?.transposed();
//! let segments = Segment::from_layout(0, &t, 0)?;
//! let plan = CopyPlan::new(vec![12], 12, segments)?;
//! assert_eq!(plan.total(), 12);
//! // A box reaching past its source is rejected, not executed.
//! let bad = Segment::new(0, 10, &[(4, 1)], 0)?;
//! assert!(CopyPlan::new(vec![12], 4, vec![bad]).is_err());
//! # Ok::<(), gpubuf_core::Error>(())
//! ```

mod backend;
mod dtype;
pub mod encode;
mod error;
pub mod kernel;
mod lanes;
mod layout;
mod plan;
pub mod process;
mod reshape;
mod segment;

pub use backend::{
    check_copy, check_fill, check_plan_args, check_scatter_args, Allocator, Backend, BackendKind, DeviceInfo,
    DeviceMemory, Kernels, MemRef, MemoryInfo, PreparedPlan,
};
pub use dtype::{Bool, Complex, DType, Element};
pub use error::{Error, PoolStats, Result};
pub use lanes::{lane_plan, MAX_SPLIT_SEGMENTS};
pub use layout::{checked_size, Layout, Order};
pub use plan::CopyPlan;
pub use segment::{Segment, MAX_DIMS};

/// `half::f16`, re-exported so users need not depend on `half` themselves.
pub use half::f16;
