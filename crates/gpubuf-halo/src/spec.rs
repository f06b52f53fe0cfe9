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
    /// [`Error::ShapeMismatch`] when `dims` and `extent` differ in length;
    /// [`Error::InvalidArgument`] when a horizontal axis is narrower than the halo (the
    /// points sent would include halo points: `n_halo <= extent`, one point less on an
    /// interface axis, whose last point is shared) or when the array's size or byte span
    /// overflows.
    pub fn centered(dims: &[Dim], extent: &[usize], n_halo: usize, pad: usize, dtype: DType) -> Result<Self> {
        if dims.len() != extent.len() {
            return Err(Error::ShapeMismatch { expected: vec![dims.len()], got: vec![extent.len()] });
        }
        let too_big =
            || Error::invalid(format!("extent {extent:?} with halo {n_halo} and pad {pad} overflows"));
        let origin: Vec<usize> = dims.iter().map(|d| if d.is_horizontal() { n_halo } else { 0 }).collect();
        let mut shape = Vec::with_capacity(dims.len());
        for (&e, &o) in extent.iter().zip(&origin) {
            let n = o.checked_mul(2).and_then(|h| h.checked_add(e)).and_then(|n| n.checked_add(pad));
            shape.push(n.ok_or_else(too_big)?);
        }
        // C-order strides over every axis (an empty axis counts as one point, so the
        // strides stay valid whatever the other axes hold).
        let mut strides = vec![0isize; shape.len()];
        let mut acc: isize = 1;
        for ax in (0..shape.len()).rev() {
            strides[ax] = acc;
            let n = isize::try_from(shape[ax].max(1)).map_err(|_| too_big())?;
            acc = acc.checked_mul(n).ok_or_else(too_big)?;
        }
        let spec = QuantityHaloSpec {
            n_halo,
            strides,
            shape,
            dtype,
            origin,
            extent: extent.to_vec(),
            dims: dims.to_vec(),
        };
        spec.layout()?;
        for (ax, &dim) in dims.iter().enumerate() {
            spec.check_halo_fits(ax, dim)?;
        }
        Ok(spec)
    }

    /// Checks that the halo fits inside the compute domain of horizontal axis `ax`: the
    /// `n_halo` points sent across an edge must all be compute points (NDSL never sends
    /// halo points), so `n_halo <= extent`, or `n_halo + 1 <= extent` on an interface axis.
    fn check_halo_fits(&self, ax: usize, dim: Dim) -> Result<()> {
        if !dim.is_horizontal() || self.n_halo == 0 {
            return Ok(());
        }
        let need = self.n_halo.checked_add(usize::from(dim.is_interface()));
        if need.is_none_or(|n| n > self.extent[ax]) {
            return Err(Error::invalid(format!(
                "a halo of {} points on axis {ax} ({dim:?}) needs a compute domain of at least {} points, not {}",
                self.n_halo,
                self.n_halo.saturating_add(usize::from(dim.is_interface())),
                self.extent[ax]
            )));
        }
        Ok(())
    }

    /// The array's layout (offset 0), after checking the spec: matching lengths, positive
    /// strides, the compute domain inside the array, and a byte span (counting an empty axis
    /// as one point) that fits in `isize`, so no index arithmetic on the spec can overflow.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for inconsistent lengths, non-positive strides or an
    /// overflowing span; [`Error::OutOfBounds`] for a compute domain outside the array.
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
            let end = self.origin[ax].checked_add(self.extent[ax]);
            if end.is_none_or(|end| end > self.shape[ax]) {
                return Err(Error::OutOfBounds {
                    what: format!("compute domain on axis {ax}"),
                    start: self.origin[ax],
                    end: end.unwrap_or(usize::MAX),
                    len: self.shape[ax],
                });
            }
        }
        // One axis reaches at most (usize::MAX - 1) * isize::MAX < 2^127: each product fits
        // in i128, the sum and the byte count are checked.
        let bytes = self
            .shape
            .iter()
            .zip(&self.strides)
            .try_fold(1i128, |acc, (&n, &s)| acc.checked_add((n.max(1) as i128 - 1) * s as i128))
            .and_then(|elements| elements.checked_mul(self.dtype.size() as i128));
        if bytes.is_none_or(|b| b > isize::MAX as i128) {
            return Err(Error::invalid(format!(
                "spec of shape {:?} and strides {:?} spans more than isize::MAX bytes",
                self.shape, self.strides
            )));
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
    /// As [`QuantityHaloSpec::layout`]; [`Error::InvalidArgument`] when a horizontal axis
    /// at the boundary is narrower than the halo (see [`QuantityHaloSpec::centered`]);
    /// [`Error::OutOfBounds`] when the boundary region leaves the array.
    pub fn boundary_slices(&self, boundary: Boundary, interior: bool) -> Result<Vec<Range<usize>>> {
        self.layout()?;
        let mut out = Vec::with_capacity(self.dims.len());
        for (ax, &dim) in self.dims.iter().enumerate() {
            let (o, e, n) = (self.origin[ax], self.extent[ax], self.n_halo);
            let overlap = usize::from(dim.is_interface());
            let at_start = if dim.is_horizontal() { boundary.at_start(dim) } else { None };
            if at_start.is_some() {
                self.check_halo_fits(ax, dim)?;
            }
            let end = o.checked_add(e);
            let (start, stop) = match (at_start, interior) {
                (None, _) => (Some(o), end),
                (Some(true), true) => {
                    (o.checked_add(overlap), o.checked_add(overlap).and_then(|s| s.checked_add(n)))
                }
                (Some(true), false) => (o.checked_sub(n), Some(o)),
                (Some(false), true) => (
                    end.and_then(|x| x.checked_sub(overlap)).and_then(|x| x.checked_sub(n)),
                    end.and_then(|x| x.checked_sub(overlap)),
                ),
                (Some(false), false) => (end, end.and_then(|x| x.checked_add(n))),
            };
            match (start, stop) {
                (Some(start), Some(stop)) if start <= stop && stop <= self.shape[ax] => out.push(start..stop),
                _ => {
                    return Err(Error::OutOfBounds {
                        what: format!("{boundary:?} boundary on axis {ax} ({dim:?})"),
                        start: start.unwrap_or(0),
                        end: stop.unwrap_or(usize::MAX),
                        len: self.shape[ax],
                    })
                }
            }
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
    /// The exchange with the neighbour across `boundary`: pack the interior (send) slices
    /// of `boundary`, unpack what arrives into the halo (receive) slices of the *same*
    /// `boundary` (the neighbour sends its facing edge back). For one rank whose opposite
    /// edges are neighbours (a periodic domain), use [`HaloExchangeSpec::periodic`]; for
    /// any other pair of edges, [`HaloExchangeSpec::between`].
    ///
    /// # Errors
    /// As [`QuantityHaloSpec::boundary_slices`].
    pub fn for_boundary(specification: QuantityHaloSpec, boundary: Boundary, rotation: i32) -> Result<Self> {
        Self::between(specification, boundary, boundary, rotation)
    }

    /// Packs the interior of `send` (rotated `rotation` clockwise quarter turns on the way)
    /// and unpacks what arrives into the halo of `receive`.
    ///
    /// # Errors
    /// As [`QuantityHaloSpec::boundary_slices`].
    pub fn between(
        specification: QuantityHaloSpec,
        send: Boundary,
        receive: Boundary,
        rotation: i32,
    ) -> Result<Self> {
        let pack_slices = specification.boundary_slices(send, true)?;
        let unpack_slices = specification.boundary_slices(receive, false)?;
        Ok(HaloExchangeSpec { specification, pack_slices, pack_clockwise_rotation: rotation, unpack_slices })
    }

    /// The periodic wrap of one array onto itself across `boundary`: pack the interior of
    /// `boundary`, unpack into the halo of the opposite boundary (no rotation), so the east
    /// interior fills the west halo, the north-east corner the south-west one, and so on.
    /// With [`HaloDataTransformer::loopback`](crate::HaloDataTransformer::loopback) between
    /// pack and unpack this is a periodic halo update on one rank.
    ///
    /// ```
    /// use gpubuf_core::DType;
    /// use gpubuf_halo::{Boundary, Dim, HaloExchangeSpec, QuantityHaloSpec};
    ///
    /// let q = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[4, 4], 1, 0, DType::F64)?;
    /// let east = HaloExchangeSpec::periodic(q.clone(), Boundary::East)?;
    /// assert_eq!(east.pack_slices, q.boundary_slices(Boundary::East, true)?);
    /// assert_eq!(east.unpack_slices, q.boundary_slices(Boundary::West, false)?);
    /// # Ok::<(), gpubuf_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`QuantityHaloSpec::boundary_slices`].
    pub fn periodic(specification: QuantityHaloSpec, boundary: Boundary) -> Result<Self> {
        Self::between(specification, boundary, boundary.opposite(), 0)
    }

    /// Elements packed (NDSL's `pack_buffer_size`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the product of the slice lengths overflows.
    pub fn pack_size(&self) -> Result<usize> {
        slices_size(&self.pack_slices)
    }

    /// Elements unpacked.
    ///
    /// # Errors
    /// As [`HaloExchangeSpec::pack_size`].
    pub fn unpack_size(&self) -> Result<usize> {
        slices_size(&self.unpack_slices)
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

/// The number of points in a box of `slices` (an empty or reversed range holds none).
fn slices_size(slices: &[Range<usize>]) -> Result<usize> {
    slices
        .iter()
        .try_fold(1usize, |acc, r| acc.checked_mul(r.end.saturating_sub(r.start)))
        .ok_or_else(|| Error::invalid(format!("slices {slices:?} hold more than usize::MAX points")))
}
