//! gpubuf-pool: a device-memory pool over any gpubuf [`Allocator`](gpubuf_core::Allocator).
//!
//! pyopencl's `MemoryPool` semantics (size classes from the leading bits of the size,
//! blocks returned on drop, `held_blocks`/`active_blocks`/`managed_bytes`/`active_bytes`,
//! `free_held`, `stop_holding`, immediate and deferred allocators), plus what long-running
//! GPU programs need: an out-of-memory ladder, a memory limit, bounded held memory,
//! thread safety and stream-safe reuse.
//!
//! `NDBuffer`s come straight from a pool with [`MemoryPool::empty`] (contents unspecified:
//! a reused block holds what its last user wrote), [`MemoryPool::zeros`],
//! [`MemoryPool::full`], [`MemoryPool::from_slice`] and [`MemoryPool::from_ndarray`].
//! A pool over the backend itself uses its `allocate` (which may back memory lazily);
//! over [`ImmediateAllocator`] the memory exists when the pool gets it, so an
//! out-of-memory reaches the pool's retry ladder instead of the first kernel that touches
//! the memory (use it on OpenCL, or with a limit).
//!
//! ```
//! use gpubuf_cpu::CpuBackend;
//! use gpubuf_pool::MemoryPool;
//!
//! let pool = MemoryPool::new(CpuBackend::new());
//! let a = pool.allocate(1000)?;
//! assert!(a.block_size() >= 1000);
//! drop(a); // back to the pool
//! let b = pool.allocate(1000)?; // served from the pool, not the allocator
//! assert_eq!(pool.stats().hits, 1);
//! drop(b);
//! pool.free_held();
//! assert_eq!(pool.managed_bytes(), 0);
//! # Ok::<(), gpubuf_core::Error>(())
//! ```

mod allocators;
mod arena;
mod arrays;
mod bins;
mod block;
mod config;
mod free;
mod manage;
mod pool;
mod quick;
mod state;
mod stream;

pub use allocators::{DeferredAllocator, ImmediateAllocator};
pub use bins::{alloc_size, bin_number, block_size, GRANULE, MAX_LEADING_BITS};
pub use block::PooledBuffer;
pub use manage::BinReport;
pub use pool::{Limit, MemoryPool, PoolConfig};
