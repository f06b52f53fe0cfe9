//! [`HaloFields`]: the halo update of many fields at once, every boundary, compiled once.
//!
//! A program with several fields (three 3-d scalars, a wind vector) describes each once
//! ([`HaloField`]: its [`QuantityHaloSpec`], scalar or vector pair) and chooses how its
//! boundaries connect: [`HaloFields::periodic`] (one rank whose every boundary wraps onto
//! the opposite side of the same array) or [`HaloFields::partitioned`] (a rank of a
//! [`Partitioner`]: one link per neighbour rank, as the MPI `HaloUpdater` builds them).
//! The exchange specs of every field across every boundary are made and compiled into one
//! [`HaloDataTransformer`] per neighbour (two when scalars and vectors are mixed: a
//! transformer is either) at construction; each step is then
//! [`HaloFields::update`] (periodic) or the per-neighbour [`HaloFields::pack`] /
//! [`HaloFields::unpack`] around the caller's own messages (`neighbor` submodule).
//!
//! Corners are exchanged as pace-util and NDSL exchange them: as boundaries of their own
//! (north-east, north-west, south-east, south-west), with the diagonal neighbour, in the
//! same single pass as the edges. On a periodic rank the north-east interior corner fills
//! the south-west halo corner and so on, which is numpy's `np.pad(interior, mode="wrap")`
//! over the horizontal axes (on an interface axis the shared last point is not sent: the
//! period is one point less than the extent).

mod links;
mod neighbor;

pub use links::{neighbor_links, periodic_link, NeighborLink};
pub use neighbor::LinkTransformers;

use crate::partition::Partitioner;
use crate::spec::{HaloExchangeSpec, QuantityHaloSpec};
use crate::transformer::HaloDataTransformer;
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{Allocator, Element, Error, Kernels, Result};
use gpubuf_pool::MemoryPool;

/// One field of a [`HaloFields`]: its memory and halo, a scalar or the two components of
/// a vector (rotated together across cubed-sphere edges, as NDSL's vector halo updates).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HaloField {
    /// A scalar field: one array.
    Scalar(QuantityHaloSpec),
    /// A vector field: two arrays, x component then y component.
    Vector {
        /// The x component.
        x: QuantityHaloSpec,
        /// The y component.
        y: QuantityHaloSpec,
    },
}

impl HaloField {
    /// The arrays this field takes in [`HaloFields::update`]: 1 for a scalar, 2 for a
    /// vector (x then y).
    pub fn arrays(&self) -> usize {
        match self {
            HaloField::Scalar(_) => 1,
            HaloField::Vector { .. } => 2,
        }
    }
}

/// The transformers of one neighbour: every scalar field's boundaries in one, every
/// vector field's in the other.
struct Link<B: Kernels, T: Element> {
    link: NeighborLink,
    scalar: Option<HaloDataTransformer<B, T>>,
    vector: Option<HaloDataTransformer<B, T>>,
}

impl<B: Kernels, T: Element> Link<B, T> {
    fn parts(&self) -> impl Iterator<Item = &HaloDataTransformer<B, T>> {
        self.scalar.iter().chain(self.vector.iter())
    }
    fn parts_mut(&mut self) -> impl Iterator<Item = &mut HaloDataTransformer<B, T>> {
        self.scalar.iter_mut().chain(self.vector.iter_mut())
    }
}

/// Builds one transformer from x (and y) specs: from the device or from a pool.
type Make<'m, B, T> = dyn Fn(&B, Vec<HaloExchangeSpec>, Option<Vec<HaloExchangeSpec>>) -> Result<HaloDataTransformer<B, T>>
    + 'm;

/// The halo update of several fields of element type `T` (one `HaloFields` per element
/// type), all boundaries at once, its specs compiled once.
///
/// The arrays of a call are the fields' arrays in field order, a vector field taking two
/// (x, y). Every call checks them first (count, shape, strides, device) and queues nothing
/// when they do not match, so the object stays usable after an error.
///
/// ```
/// use gpubuf_buffer::NDBuffer;
/// use gpubuf_core::DType;
/// use gpubuf_cpu::CpuBackend;
/// use gpubuf_halo::{Dim, HaloField, HaloFields, QuantityHaloSpec};
///
/// let cpu = CpuBackend::new();
/// // Two 4x4 fields with a 1-point halo (6x6 arrays), both periodic.
/// let q = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[4, 4], 1, 0, DType::F64)?;
/// let mut halo = HaloFields::<_, f64>::periodic(&cpu, vec![HaloField::Scalar(q.clone()); 2])?;
/// let data: Vec<f64> = (0..36).map(f64::from).collect();
/// let mut a = NDBuffer::from_slice(&cpu, &[6, 6], &data)?;
/// let mut b = NDBuffer::from_slice(&cpu, &[6, 6], &data)?;
/// halo.update(&mut [&mut a, &mut b])?; // every step: no specs rebuilt
/// let out = a.to_vec()?;
/// assert_eq!(out[0], data[4 * 6 + 4]); // the south-west halo corner holds the north-east interior corner
/// assert_eq!(out[1 * 6], data[1 * 6 + 4]); // the west halo holds the east interior edge
/// assert!(halo.update(&mut [&mut a]).is_err()); // one array short: an error, nothing queued
/// halo.update(&mut [&mut a, &mut b])?; // and still usable
/// # Ok::<(), gpubuf_core::Error>(())
/// ```
pub struct HaloFields<B: Kernels, T: Element> {
    backend: B,
    fields: Vec<HaloField>,
    /// The spec of each array, in the order the calls take them.
    specs: Vec<QuantityHaloSpec>,
    /// Array indices of the scalar fields.
    scalars: Vec<usize>,
    /// Array indices of the (x, y) components of the vector fields.
    vectors: Vec<(usize, usize)>,
    links: Vec<Link<B, T>>,
    rank: usize,
}

impl<B: Kernels, T: Element> std::fmt::Debug for HaloFields<B, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HaloFields")
            .field("fields", &self.fields.len())
            .field("rank", &self.rank)
            .field("neighbors", &self.links.iter().map(|l| l.link.rank).collect::<Vec<_>>())
            .finish()
    }
}

impl<B: Kernels, T: Element> HaloFields<B, T> {
    /// Fields on one rank whose every boundary (four edges, four corners) wraps onto the
    /// opposite side of the same array; [`HaloFields::update`] does the whole exchange
    /// (pack, a copy on the device, unpack). Buffers come from the device.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no fields, a field without halo points, or a vector
    /// whose components differ in shape; [`Error::DTypeMismatch`] for a field that is not
    /// of type `T`; spec errors ([`HaloDataTransformer::new`]); allocation errors.
    pub fn periodic(backend: &B, fields: Vec<HaloField>) -> Result<Self> {
        Self::build(backend, fields, 0, vec![periodic_link()], &|b, x, y| HaloDataTransformer::new(b, x, y))
    }

    /// As [`HaloFields::periodic`], with the transformers' buffers from `pool` (returned by
    /// [`HaloFields::finalize`] or on drop).
    ///
    /// # Errors
    /// As [`HaloFields::periodic`].
    pub fn periodic_with_pool<A>(backend: &B, pool: &MemoryPool<A>, fields: Vec<HaloField>) -> Result<Self>
    where
        A: Allocator<Memory = B::Memory>,
    {
        Self::build(backend, fields, 0, vec![periodic_link()], &|b, x, y| {
            HaloDataTransformer::with_pool(b, pool, x, y)
        })
    }

    /// Fields on `rank` of `partitioner` (a [`TilePartitioner`](crate::TilePartitioner) or
    /// [`CubedSpherePartitioner`](crate::CubedSpherePartitioner)): one link per neighbour
    /// rank ([`neighbor_links`]), holding every boundary shared with it, rotations
    /// included. Exchange each neighbour's message with [`HaloFields::pack`],
    /// [`HaloFields::read_message`] / [`HaloFields::receive_message`] (or the device
    /// buffers of [`HaloFields::transformers`]) and [`HaloFields::unpack`]; a link to this
    /// rank itself is [`HaloFields::loopback`].
    ///
    /// # Errors
    /// As [`HaloFields::periodic`]; as [`neighbor_links`].
    pub fn partitioned(
        backend: &B,
        fields: Vec<HaloField>,
        partitioner: &dyn Partitioner,
        rank: usize,
    ) -> Result<Self> {
        let links = neighbor_links(partitioner, rank)?;
        Self::build(backend, fields, rank, links, &|b, x, y| HaloDataTransformer::new(b, x, y))
    }

    /// As [`HaloFields::partitioned`], with the transformers' buffers from `pool`.
    ///
    /// # Errors
    /// As [`HaloFields::partitioned`].
    pub fn partitioned_with_pool<A>(
        backend: &B,
        pool: &MemoryPool<A>,
        fields: Vec<HaloField>,
        partitioner: &dyn Partitioner,
        rank: usize,
    ) -> Result<Self>
    where
        A: Allocator<Memory = B::Memory>,
    {
        let links = neighbor_links(partitioner, rank)?;
        Self::build(backend, fields, rank, links, &|b, x, y| HaloDataTransformer::with_pool(b, pool, x, y))
    }

    fn build(
        backend: &B,
        fields: Vec<HaloField>,
        rank: usize,
        links: Vec<NeighborLink>,
        make: &Make<'_, B, T>,
    ) -> Result<Self> {
        if fields.is_empty() {
            return Err(Error::invalid("halo fields: no fields given"));
        }
        let (mut specs, mut scalars, mut vectors) = (Vec::new(), Vec::new(), Vec::new());
        for (i, f) in fields.iter().enumerate() {
            let parts: Vec<&QuantityHaloSpec> = match f {
                HaloField::Scalar(s) => vec![s],
                HaloField::Vector { x, y } => vec![x, y],
            };
            for s in &parts {
                if s.n_halo == 0 {
                    return Err(Error::invalid(format!("halo field {i} has no halo points")));
                }
                if s.dtype != T::DTYPE {
                    return Err(Error::DTypeMismatch { expected: T::DTYPE, got: s.dtype });
                }
                // The boundaries are the x and y edges: a field has exactly one axis of each
                // (a missing one left the plan writing halos twice, a repeated one wrote
                // halos on an axis no boundary describes).
                let (nx, ny) =
                    (s.dims.iter().filter(|d| d.is_x()).count(), s.dims.iter().filter(|d| d.is_y()).count());
                if nx != 1 || ny != 1 {
                    return Err(Error::invalid(format!(
                        "halo field {i} has dims {:?}: a field has one x axis and one y axis (x or x_interface, y or y_interface)",
                        s.dims
                    )));
                }
                s.layout()?;
            }
            if let [x, y] = parts[..] {
                if x.shape != y.shape || x.dims != y.dims || x.n_halo != y.n_halo {
                    return Err(Error::invalid(format!(
                        "vector field {i}: components of shapes {:?} and {:?} (dims {:?}, {:?}; halos {}, {})",
                        x.shape, y.shape, x.dims, y.dims, x.n_halo, y.n_halo
                    )));
                }
                vectors.push((specs.len(), specs.len() + 1));
            } else {
                scalars.push(specs.len());
            }
            specs.extend(parts.into_iter().cloned());
        }
        let pick = |idx: &mut dyn Iterator<Item = usize>| idx.map(|i| specs[i].clone()).collect::<Vec<_>>();
        let scalar_specs = pick(&mut scalars.iter().copied());
        let vx = pick(&mut vectors.iter().map(|v| v.0));
        let vy = pick(&mut vectors.iter().map(|v| v.1));
        let mut built = Vec::with_capacity(links.len());
        for link in links {
            let scalar = match scalar_specs.is_empty() {
                true => None,
                false => Some(make(backend, link.exchange_specs(&scalar_specs)?, None)?),
            };
            let vector = match vx.is_empty() {
                true => None,
                false => Some(make(backend, link.exchange_specs(&vx)?, Some(link.exchange_specs(&vy)?))?),
            };
            built.push(Link { link, scalar, vector });
        }
        Ok(HaloFields { backend: backend.clone(), fields, specs, scalars, vectors, links: built, rank })
    }

    /// The fields, in the order given.
    pub fn fields(&self) -> &[HaloField] {
        &self.fields
    }

    /// The arrays each call takes (one per scalar field, two per vector field).
    pub fn array_count(&self) -> usize {
        self.specs.len()
    }

    /// This rank (0 for a periodic set).
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The links, one per neighbour rank, by increasing rank; indices into this list name
    /// a neighbour in the per-neighbour calls.
    pub fn links(&self) -> Vec<&NeighborLink> {
        self.links.iter().map(|l| &l.link).collect()
    }

    /// Elements packed for all neighbours together (each way).
    pub fn buffer_len(&self) -> usize {
        self.links.iter().flat_map(|l| l.parts()).map(|t| t.buffer_len()).sum()
    }

    /// Checks `arrays` against the fields, as every call does first: one array per scalar
    /// field and two per vector field, in field order, each of its spec's shape and
    /// strides, on this set's device.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] (unit `"arrays"`) for another number of arrays;
    /// [`Error::ShapeMismatch`]; [`Error::InvalidArgument`] for other strides;
    /// [`Error::DeviceMismatch`] for an array on another device.
    pub fn check(&self, arrays: &[&NDBuffer<B, T>]) -> Result<()> {
        if arrays.len() != self.specs.len() {
            return Err(Error::LengthMismatch {
                what: format!("halo field arrays (for {} fields)", self.fields.len()),
                unit: "arrays",
                expected: self.specs.len(),
                got: arrays.len(),
                elements: None,
            });
        }
        for (k, (a, s)) in arrays.iter().zip(&self.specs).enumerate() {
            if a.shape() != s.shape.as_slice() {
                return Err(Error::ShapeMismatch { expected: s.shape.clone(), got: a.shape().to_vec() });
            }
            if a.strides() != s.strides.as_slice() {
                return Err(Error::invalid(format!(
                    "halo field array {k} has strides {:?}, its field {:?}",
                    a.strides(),
                    s.strides
                )));
            }
            if !a.backend().same_device(&self.backend) {
                return Err(Error::DeviceMismatch(format!("halo field array {k} lives on another device")));
            }
        }
        Ok(())
    }

    /// The halo update of every field across every boundary of a periodic set (every link
    /// leads back to this rank): packs, copies each pack buffer to its unpack buffer on the
    /// device, unpacks; queued on the device, returning once queued (read the arrays, or
    /// [`HaloFields::synchronize`], to wait).
    ///
    /// # Errors
    /// As [`HaloFields::check`], with nothing queued; [`Error::InvalidArgument`] when a
    /// link leads to another rank (exchange those messages per neighbour), or after
    /// [`HaloFields::finalize`]; driver errors.
    pub fn update(&mut self, arrays: &mut [&mut NDBuffer<B, T>]) -> Result<()> {
        let arrays: Vec<&NDBuffer<B, T>> = arrays.iter().map(|a| &**a).collect();
        self.check(&arrays)?;
        if let Some(l) = self.links.iter().find(|l| l.link.rank != self.rank) {
            return Err(Error::invalid(format!(
                "rank {} has neighbour rank {}: exchange its message with pack/unpack per neighbour",
                self.rank, l.link.rank
            )));
        }
        if !self.ready() {
            return Err(Error::invalid("halo fields finalized"));
        }
        for k in 0..self.links.len() {
            self.queue(k, &arrays, true)?;
        }
        for l in &mut self.links {
            for t in l.parts_mut() {
                t.loopback()?;
            }
        }
        for k in 0..self.links.len() {
            self.queue(k, &arrays, false)?;
        }
        Ok(())
    }

    /// Queues the pack (or unpack) of link `k`, the arrays already checked.
    fn queue(&mut self, k: usize, arrays: &[&NDBuffer<B, T>], pack: bool) -> Result<()> {
        let l = self.links.get_mut(k).ok_or_else(|| Error::invalid(format!("no neighbour link {k}")))?;
        let m = l.link.sends.len();
        let repeat = |idx: &mut dyn Iterator<Item = usize>| -> Vec<&NDBuffer<B, T>> {
            idx.flat_map(|i| std::iter::repeat_n(arrays[i], m)).collect()
        };
        if let Some(t) = &mut l.scalar {
            let x = repeat(&mut self.scalars.iter().copied());
            if pack {
                t.async_pack(&x, None)?
            } else {
                t.async_unpack(&x, None)?
            }
        }
        if let Some(t) = &mut l.vector {
            let x = repeat(&mut self.vectors.iter().map(|v| v.0));
            let y = repeat(&mut self.vectors.iter().map(|v| v.1));
            if pack {
                t.async_pack(&x, Some(&y))?
            } else {
                t.async_unpack(&x, Some(&y))?
            }
        }
        Ok(())
    }

    /// Whether the buffers exist (until [`HaloFields::finalize`]).
    pub fn ready(&self) -> bool {
        self.links.iter().flat_map(|l| l.parts()).all(|t| t.ready())
    }

    /// Waits for the queued packs, copies and unpacks.
    ///
    /// # Errors
    /// Driver errors.
    pub fn synchronize(&self) -> Result<()> {
        self.links.iter().flat_map(|l| l.parts()).try_for_each(|t| t.synchronize())
    }

    /// Waits for queued work and releases every buffer (to its pool, if any).
    ///
    /// # Errors
    /// Driver errors.
    pub fn finalize(&mut self) -> Result<()> {
        self.links.iter_mut().flat_map(|l| l.parts_mut()).try_for_each(|t| t.finalize())
    }
}
