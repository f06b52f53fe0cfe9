//! The spec model: dimensions, quantities, exchanges and boundaries (NDSL's
//! `QuantityHaloSpec`, `HaloExchangeSpec`, `get_boundary_slice`).

use gpubuf_core::{DType, Error, Layout, Result};
use std::ops::Range;

/// A named array dimension, as NDSL's constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dim {
    /// Cell centres along x (`"x"`).
    X,
    /// Cell interfaces along x (`"x_interface"`): one more point, shared with the neighbour.
    XInterface,
    /// Cell centres along y.
    Y,
    /// Cell interfaces along y.
    YInterface,
    /// Cell centres along z (vertical; never rotated).
    Z,
    /// Cell interfaces along z.
    ZInterface,
}

impl Dim {
    /// An x dimension (NDSL's `I_DIMS`).
    pub fn is_x(self) -> bool {
        matches!(self, Dim::X | Dim::XInterface)
    }
    /// A y dimension (NDSL's `J_DIMS`).
    pub fn is_y(self) -> bool {
        matches!(self, Dim::Y | Dim::YInterface)
    }
    /// A horizontal dimension.
    pub fn is_horizontal(self) -> bool {
        self.is_x() || self.is_y()
    }
    /// An interface (staggered) dimension.
    pub fn is_interface(self) -> bool {
        matches!(self, Dim::XInterface | Dim::YInterface | Dim::ZInterface)
    }
}

/// The memory of one quantity and its halo (NDSL's `QuantityHaloSpec`). Strides are in
/// elements (NDSL's are in bytes) and positive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantityHaloSpec {
    /// Halo width (NDSL's `n_points`).
    pub n_halo: usize,
    /// Shape of the whole array, halo included.
    pub shape: Vec<usize>,
    /// Strides in elements.
    pub strides: Vec<isize>,
    /// Element type (its size is NDSL's `itemsize`).
    pub dtype: DType,
    /// Start of the compute domain on each axis.
    pub origin: Vec<usize>,
    /// Size of the compute domain on each axis.
    pub extent: Vec<usize>,
    /// What each axis is.
    pub dims: Vec<Dim>,
}

impl QuantityHaloSpec {
    /// A C-contiguous array: compute domain `extent` with `n_halo` halo points on each side
    /// of every horizontal axis, plus `pad` unused points at the end of every axis (padded
    /// allocations), with `dims` naming the axes.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when `dims` and `extent` differ in length.
    pub fn centered(dims: &[Dim], extent: &[usize], n_halo: usize, pad: usize, dtype: DType) -> Result<Self> {
        if dims.len() != extent.len() {
            return Err(Error::ShapeMismatch { expected: vec![dims.len()], got: vec![extent.len()] });
        }
        let origin: Vec<usize> = dims.iter().map(|d| if d.is_horizontal() { n_halo } else { 0 }).collect();
        let shape: Vec<usize> = extent.iter().zip(&origin).map(|(e, o)| e + 2 * o + pad).collect();
        let layout = Layout::contiguous(&shape, gpubuf_core::Order::C)?;
        Ok(QuantityHaloSpec {
            n_halo,
            strides: layout.strides().to_vec(),
            shape,
            dtype,
            origin,
            extent: extent.to_vec(),
            dims: dims.to_vec(),
        })
    }

    /// The array's layout (offset 0).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for inconsistent lengths or non-positive strides.
    pub fn layout(&self) -> Result<Layout> {
        let n = self.shape.len();
        if self.strides.len() != n || self.origin.len() != n || self.extent.len() != n || self.dims.len() != n
        {
            return Err(Error::invalid("spec shape, strides, origin, extent and dims differ in length"));
        }
        if self.strides.iter().any(|&s| s <= 0) {
            return Err(Error::invalid("spec strides must be positive"));
        }
        for ax in 0..n {
            if self.origin[ax] + self.extent[ax] > self.shape[ax] {
                return Err(Error::OutOfBounds {
                    what: format!("compute domain on axis {ax}"),
                    start: self.origin[ax],
                    end: self.origin[ax] + self.extent[ax],
                    len: self.shape[ax],
                });
            }
        }
        Layout::new(self.shape.clone(), self.strides.clone(), 0)
    }

    /// Elements the array spans in memory.
    ///
    /// # Errors
    /// As [`QuantityHaloSpec::layout`].
    pub fn span(&self) -> Result<usize> {
        Ok(self.layout()?.span()?.map_or(0, |r| r.end))
    }

    /// The slices of `boundary` (NDSL's `get_boundary_slice`): `interior` gives the points
    /// to send, otherwise the halo points to receive.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the boundary region leaves the array.
    pub fn boundary_slices(&self, boundary: Boundary, interior: bool) -> Result<Vec<Range<usize>>> {
        self.layout()?;
        let mut out = Vec::with_capacity(self.dims.len());
        for (ax, &dim) in self.dims.iter().enumerate() {
            let (o, e, n) = (self.origin[ax], self.extent[ax], self.n_halo);
            let overlap = usize::from(dim.is_interface());
            let at_start = if dim.is_horizontal() { boundary.at_start(dim) } else { None };
            let (start, stop) = match (at_start, interior) {
                (None, _) => (o as isize, (o + e) as isize),
                (Some(true), true) => ((o + overlap) as isize, (o + overlap + n) as isize),
                (Some(true), false) => (o as isize - n as isize, o as isize),
                (Some(false), true) => {
                    ((o + e) as isize - overlap as isize - n as isize, (o + e - overlap) as isize)
                }
                (Some(false), false) => ((o + e) as isize, (o + e + n) as isize),
            };
            if start < 0 || stop > self.shape[ax] as isize {
                return Err(Error::OutOfBounds {
                    what: format!("{boundary:?} boundary on axis {ax} ({dim:?})"),
                    start: start.max(0) as usize,
                    end: stop.max(0) as usize,
                    len: self.shape[ax],
                });
            }
            out.push(start as usize..stop as usize);
        }
        Ok(out)
    }
}

/// An edge or corner of a subdomain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Boundary {
    /// The north edge (end of y).
    North,
    /// The south edge (start of y).
    South,
    /// The east edge (end of x).
    East,
    /// The west edge (start of x).
    West,
    /// The north-east corner.
    NorthEast,
    /// The north-west corner.
    NorthWest,
    /// The south-east corner.
    SouthEast,
    /// The south-west corner.
    SouthWest,
}

impl Boundary {
    /// Every boundary: edges, then corners.
    pub const ALL: [Boundary; 8] = [
        Boundary::North,
        Boundary::South,
        Boundary::East,
        Boundary::West,
        Boundary::NorthEast,
        Boundary::NorthWest,
        Boundary::SouthEast,
        Boundary::SouthWest,
    ];

    /// Whether this boundary lies at the start (`Some(true)`) or end of `dim`, or does not
    /// align with it (`None`).
    pub fn at_start(self, dim: Dim) -> Option<bool> {
        let x = match self {
            Boundary::West | Boundary::NorthWest | Boundary::SouthWest => Some(true),
            Boundary::East | Boundary::NorthEast | Boundary::SouthEast => Some(false),
            _ => None,
        };
        let y = match self {
            Boundary::South | Boundary::SouthEast | Boundary::SouthWest => Some(true),
            Boundary::North | Boundary::NorthEast | Boundary::NorthWest => Some(false),
            _ => None,
        };
        if dim.is_x() {
            x
        } else if dim.is_y() {
            y
        } else {
            None
        }
    }

    /// The boundary on the other side (what a neighbour calls the same edge when no
    /// rotation is involved).
    pub fn opposite(self) -> Boundary {
        match self {
            Boundary::North => Boundary::South,
            Boundary::South => Boundary::North,
            Boundary::East => Boundary::West,
            Boundary::West => Boundary::East,
            Boundary::NorthEast => Boundary::SouthWest,
            Boundary::SouthWest => Boundary::NorthEast,
            Boundary::NorthWest => Boundary::SouthEast,
            Boundary::SouthEast => Boundary::NorthWest,
        }
    }
}

/// One exchange (NDSL's `HaloExchangeSpec`): what to pack (slices and the clockwise
/// rotation the data undergoes on its way) and where to unpack what arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HaloExchangeSpec {
    /// The quantity's memory.
    pub specification: QuantityHaloSpec,
    /// One range per dimension to pack.
    pub pack_slices: Vec<Range<usize>>,
    /// Clockwise quarter turns from this rank's axes to the receiver's.
    pub pack_clockwise_rotation: i32,
    /// One range per dimension to unpack into.
    pub unpack_slices: Vec<Range<usize>>,
}

impl HaloExchangeSpec {
    /// The exchange for `boundary`: pack its interior (send) slices, unpack into its halo
    /// (receive) slices.
    ///
    /// # Errors
    /// As [`QuantityHaloSpec::boundary_slices`].
    pub fn for_boundary(specification: QuantityHaloSpec, boundary: Boundary, rotation: i32) -> Result<Self> {
        let pack_slices = specification.boundary_slices(boundary, true)?;
        let unpack_slices = specification.boundary_slices(boundary, false)?;
        Ok(HaloExchangeSpec { specification, pack_slices, pack_clockwise_rotation: rotation, unpack_slices })
    }

    /// Elements packed (NDSL's `pack_buffer_size`).
    pub fn pack_size(&self) -> usize {
        self.pack_slices.iter().map(|r| r.len()).product()
    }

    /// Elements unpacked.
    pub fn unpack_size(&self) -> usize {
        self.unpack_slices.iter().map(|r| r.len()).product()
    }

    /// Checks the slices against the array.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for the wrong number of slices; [`Error::OutOfBounds`] for a
    /// slice outside the array.
    pub fn check(&self) -> Result<()> {
        let layout = self.specification.layout()?;
        for slices in [&self.pack_slices, &self.unpack_slices] {
            layout.sliced(slices)?;
        }
        Ok(())
    }
}
