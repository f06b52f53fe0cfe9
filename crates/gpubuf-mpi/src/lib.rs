//! gpubuf-mpi: halo exchange across MPI ranks ([`HaloUpdater`]), built on the halo
//! transformer and the partitioners of `gpubuf-halo`.
//!
//! ```no_run
//! use gpubuf_core::DType;
//! use gpubuf_cpu::CpuBackend;
//! use gpubuf_halo::{Dim, QuantityHaloSpec, TilePartitioner};
//! use gpubuf_mpi::HaloUpdater;
//!
//! let universe = mpi::initialize().expect("MPI");
//! let world = universe.world();
//! let cpu = CpuBackend::new();
//! let spec = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[64, 64], 1, 0, DType::F64)?;
//! let tiles = TilePartitioner::new((2, 2), true)?; // mpirun -n 4
//! let mut halo = HaloUpdater::<_, f64>::new(&cpu, &world, &tiles, &[spec], None, "temperature")?;
//! # Ok::<(), gpubuf_core::Error>(())
//! ```

mod aware;
mod comm;
mod datatypes;
mod direct;
mod fault;
mod hostplan;
mod negation;
mod node;
mod phases;
mod pull;
mod requests;
mod runs;
mod shm;
mod staging;
mod tags;
mod updater;

pub use aware::{cuda_aware, CudaAware, CUDA_AWARE_ENV};
pub use comm::Comm;
pub use datatypes::DATATYPES_ENV;
pub use mpi;
pub use node::node_buffer;
pub use phases::Phases;
pub use updater::{HaloUpdate, HaloUpdater};
