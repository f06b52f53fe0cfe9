//! gpubuf-halo: NDSL's halo data transformer on every backend.
//!
//! The spec model ([`QuantityHaloSpec`], [`HaloExchangeSpec`], [`Boundary`] slices) and
//! rotation rules ([`rotate_scalar`], [`vector_blocks`]) follow NDSL exactly; every spec
//! compiles into the core copy plan (a rotation is an axis swap plus a negated stride, a
//! vector rotation a choice of source plus a sign), so packing and unpacking are each one
//! launch, with no index arrays.
//!
//! [`HaloExchangeSpec::for_boundary`] exchanges across one edge with a neighbour (pack and
//! unpack the same edge); [`HaloExchangeSpec::periodic`] wraps an array onto itself (pack
//! an edge, unpack into the opposite one), and [`HaloDataTransformer::loopback`] hands the
//! pack buffer to the unpack buffer on the device, so a periodic domain on one rank is
//! pack, loopback, unpack.
//!
//! ```
//! use gpubuf_core::{DType, Order};
//! use gpubuf_buffer::NDBuffer;
//! use gpubuf_cpu::CpuBackend;
//! use gpubuf_halo::{Boundary, Dim, HaloDataTransformer, HaloExchangeSpec, QuantityHaloSpec};
//!
//! let cpu = CpuBackend::new();
//! // A 4x4 compute domain with a 1-point halo: a 6x6 array.
//! let spec = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[4, 4], 1, 0, DType::F64)?;
//! let west = HaloExchangeSpec::for_boundary(spec, Boundary::West, 0)?;
//! let mut t = HaloDataTransformer::<_, f64>::new(&cpu, vec![west], None)?;
//! let data: Vec<f64> = (0..36).map(f64::from).collect();
//! let q = NDBuffer::from_slice(&cpu, &[6, 6], &data)?;
//! t.async_pack(&[&q], None)?;
//! let packed = t.pack_buffer()?.to_vec()?;
//! assert_eq!(packed.len(), 4 * 8); // x = 1, y = 1..5
//! # Ok::<(), gpubuf_core::Error>(())
//! ```

pub mod cache;
mod compile;
mod fields;
mod ndsl;
mod partition;
mod rotate;
mod spec;
mod transformer;

pub use cache::{AdoptionCache, AdoptionCall};
pub use compile::{compile, Compiled};
pub use fields::{neighbor_links, periodic_link, HaloField, HaloFields, LinkTransformers, NeighborLink};
pub use ndsl::NdslSpec;
pub use partition::{
    receiving_boundary, rotate_boundary, CubedSpherePartitioner, Neighbor, Partitioner, TilePartitioner,
};
pub use rotate::{rotate_scalar, vector_blocks};
pub use spec::{Boundary, Dim, HaloExchangeSpec, QuantityHaloSpec};
pub use transformer::HaloDataTransformer;
