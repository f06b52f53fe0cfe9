//! gpubuf-bufferizer: dolphin's `Bufferizer` on every backend — a fixed-capacity batch
//! buffer filled element by element or batch by batch, with lifecycle hooks, all-or-nothing
//! appends and double buffering.
//!
//! ```
//! use gpubuf_bufferizer::{Bufferizer, Input};
//! use gpubuf_cpu::CpuBackend;
//! use ndarray::Array2;
//! use std::sync::{Arc, Mutex};
//!
//! let cpu = CpuBackend::new();
//! let fulls = Arc::new(Mutex::new(0));
//! let f = fulls.clone();
//! let mut b = Bufferizer::<_, f32>::builder(&cpu, &[2, 2], 3)
//!     .on_full(move |_| *f.lock().unwrap() += 1)
//!     .build()?;
//! let frame = Array2::<f32>::ones((2, 2));
//! b.append(frame.view())?;                      // one element
//! b.append(ndarray::Array3::<f32>::zeros((2, 2, 2)).view())?; // a batch of two
//! assert!(b.is_full());
//! assert_eq!(*fulls.lock().unwrap(), 1);
//! assert!(b.append(frame.view()).is_err());     // full: a typed error, nothing copied
//! let batch = b.take_batch()?;                  // the consumer's array; appends go elsewhere
//! assert_eq!(batch.shape(), &[3, 2, 2]);
//! assert!(b.is_empty() && !b.aliases(&batch));
//! # let _ = Input::<CpuBackend, f32>::Host(frame.view().into_dyn());
//! # Ok::<(), gpubuf_core::Error>(())
//! ```

mod append;
mod bufferizer;
mod builder;
mod hooks;
mod input;

pub use bufferizer::Bufferizer;
pub use builder::Builder;
pub use hooks::Hook;
pub use input::Input;
