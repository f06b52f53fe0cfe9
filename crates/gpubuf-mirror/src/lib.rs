//! gpubuf-mirror: a host array mirrored on a device that uploads only what changed, after
//! glumpy's `GPUData`, with exact dirty ranges instead of one convex hull.
//!
//! ```
//! use gpubuf_cpu::CpuBackend;
//! use gpubuf_mirror::{DirtyPolicy, Mirror};
//! use ndarray::Array1;
//!
//! let cpu = CpuBackend::new();
//! let host = Array1::<f32>::zeros(16);
//! let mut m = Mirror::new(&cpu, host.view(), DirtyPolicy::hull(), None)?;
//! let d = m.view(&[5..8])?;
//! m.fill(&d, 1.0)?;
//! assert_eq!(m.pending(), vec![20..32]); // glumpy's pending_data for d[5:8]
//! let sent = m.sync()?;
//! assert_eq!(sent.bytes, 12);
//! assert_eq!(m.device().to_vec()?[5], 1.0);
//! # Ok::<(), gpubuf_core::Error>(())
//! ```

mod arith;
mod mirror;
mod ranges;
mod transfer;
mod view;

pub use arith::Arith;
pub use mirror::Mirror;
pub use ranges::{DirtyPolicy, RangeSet};
pub use transfer::Transfer;
pub use view::View;
