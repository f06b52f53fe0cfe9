//! gpubuf-buffer: zarr-style [`Buffer`] (untyped bytes) and [`NDBuffer`] (typed n-d arrays)
//! on any backend.
//!
//! ```
//! use gpubuf_buffer::NDBuffer;
//! use gpubuf_core::Order;
//! use gpubuf_cpu::CpuBackend;
//!
//! let cpu = CpuBackend::new();
//! let a = NDBuffer::<_, f32>::from_slice(&cpu, &[2, 3], &[1., 2., 3., 4., 5., 6.])?;
//! let t = a.transpose(None)?; // a view: no copy
//! assert_eq!(t.to_vec()?, vec![1., 4., 2., 5., 3., 6.]);
//! let z = NDBuffer::<_, i32>::create(&cpu, &[4], Order::C, None)?;
//! assert!(z.all_equal(0)?);
//! # Ok::<(), gpubuf_core::Error>(())
//! ```

pub mod args;
mod buffer;
mod host;
mod ndbuffer;
pub mod region;
mod take;
mod view_as;

pub use args::{Arg, Args};
pub use buffer::Buffer;
pub use host::c_order_vec;
/// The ndarray crate (version 0.17) that [`NDBuffer::from_ndarray`] and
/// [`NDBuffer::to_ndarray`] speak.
pub use ndarray;
pub use ndbuffer::NDBuffer;
pub use region::RegionPlans;
