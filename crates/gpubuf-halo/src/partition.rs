//! Partitioners: which rank sits across each edge and corner of a subdomain, and how many
//! clockwise quarter turns data makes on the way (NDSL's `TilePartitioner` and
//! `CubedSpherePartitioner`).

use crate::spec::Boundary;
use gpubuf_core::{Error, Result};

/// The rank across a boundary and the clockwise quarter turns from this rank's axes to its.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Neighbor {
    /// The neighbouring rank.
    pub rank: usize,
    /// Clockwise quarter turns (0..4).
    pub rotation: i32,
}

/// A domain decomposition.
pub trait Partitioner: Send + Sync {
    /// Ranks the decomposition needs.
    fn total_ranks(&self) -> usize;
    /// The neighbour of `rank` across `boundary`, or `None` (a non-periodic edge, or a
    /// cube corner where no neighbour exists).
    fn neighbor(&self, rank: usize, boundary: Boundary) -> Option<Neighbor>;
}

/// The boundary one clockwise quarter turn from `b` (N -> E -> S -> W, NE -> SE -> SW -> NW).
pub fn rotate_boundary(b: Boundary, turns: i32) -> Boundary {
    let ring_e = [Boundary::North, Boundary::East, Boundary::South, Boundary::West];
    let ring_c = [Boundary::NorthEast, Boundary::SouthEast, Boundary::SouthWest, Boundary::NorthWest];
    let t = turns.rem_euclid(4) as usize;
    for ring in [ring_e, ring_c] {
        if let Some(i) = ring.iter().position(|&x| x == b) {
            return ring[(i + t) % 4];
        }
    }
    b
}

/// The boundary of the receiving rank whose halo gets what the sender packs at `sent` with
/// `rotation` turns: the direction back to the sender, seen in the receiver's axes. Data
/// turns `rotation` times clockwise on the way, so the receiver's axes are the sender's
/// turned the other way: the sender's direction `sent` is `sent` turned `-rotation` times
/// in the receiver's frame, and the receiver faces the sender across its opposite.
pub fn receiving_boundary(sent: Boundary, rotation: i32) -> Boundary {
    // -rotation mod 4 without negating (i32::MIN has no negation).
    rotate_boundary(sent, (4 - rotation.rem_euclid(4)) % 4).opposite()
}

/// A tile of `layout = (ny, nx)` ranks, rank `j * nx + i` at row `j` (south to north) and
/// column `i` (west to east), wrapping around when `periodic`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TilePartitioner {
    layout: (usize, usize),
    periodic: bool,
}

impl TilePartitioner {
    /// A tile partitioner.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a layout with a zero, or with more ranks than
    /// `isize::MAX`.
    pub fn new(layout: (usize, usize), periodic: bool) -> Result<Self> {
        if layout.0 == 0 || layout.1 == 0 {
            return Err(Error::invalid(format!("layout {layout:?} has no ranks")));
        }
        if layout.0.checked_mul(layout.1).is_none_or(|n| n > isize::MAX as usize) {
            return Err(Error::invalid(format!("layout {layout:?} has more than isize::MAX ranks")));
        }
        Ok(TilePartitioner { layout, periodic })
    }

    /// Ranks along y and x.
    pub fn layout(&self) -> (usize, usize) {
        self.layout
    }

    /// Whether edges wrap around (NDSL's tile partitioner always does).
    pub fn periodic(&self) -> bool {
        self.periodic
    }

    /// `(j, i)` of a rank within its tile (ranks past the tile wrap around).
    pub fn subtile_index(&self, rank: usize) -> (usize, usize) {
        let within = rank % self.total_ranks();
        (within / self.layout.1, within % self.layout.1)
    }

    fn edge(&self, rank: usize, b: Boundary) -> Option<usize> {
        let (ny, nx) = self.layout;
        let (j, i) = self.subtile_index(rank);
        let wrap = self.periodic;
        match b {
            Boundary::West if i == 0 => wrap.then(|| rank + nx - 1),
            Boundary::West => Some(rank - 1),
            Boundary::East if i == nx - 1 => wrap.then(|| rank + 1 - nx),
            Boundary::East => Some(rank + 1),
            Boundary::North if j == ny - 1 => wrap.then(|| rank - (ny - 1) * nx),
            Boundary::North => Some(rank + nx),
            Boundary::South if j == 0 => wrap.then(|| rank + (ny - 1) * nx),
            Boundary::South => Some(rank - nx),
            _ => None,
        }
    }

    /// Rank position after a counter-clockwise quarter turn of the tile (numpy rot90 of the
    /// rank array), NDSL's `rotate_subtile_rank(.., 1)`.
    fn rotate_rank(&self, rank: usize) -> usize {
        let (m, n) = self.layout;
        let (j, i) = (rank / n, rank % n);
        let (r0, r1) = (n - 1 - i, j);
        r0 * m + r1
    }

    /// Rank position after a left-right flip of the tile, NDSL's `fliplr_subtile_rank`.
    fn fliplr_rank(&self, rank: usize) -> usize {
        let n = self.layout.1;
        (rank / n) * n + (n - 1 - rank % n)
    }
}

fn corner_edges(b: Boundary) -> Option<(Boundary, Boundary)> {
    match b {
        Boundary::NorthWest => Some((Boundary::West, Boundary::North)),
        Boundary::NorthEast => Some((Boundary::East, Boundary::North)),
        Boundary::SouthWest => Some((Boundary::West, Boundary::South)),
        Boundary::SouthEast => Some((Boundary::East, Boundary::South)),
        _ => None,
    }
}

impl Partitioner for TilePartitioner {
    fn total_ranks(&self) -> usize {
        self.layout.0 * self.layout.1
    }

    fn neighbor(&self, rank: usize, boundary: Boundary) -> Option<Neighbor> {
        if rank >= self.total_ranks() {
            return None;
        }
        let to = match corner_edges(boundary) {
            // A corner: first edge, then the second edge from there (NDSL's _get_corner).
            Some((e1, e2)) => self.edge(self.edge(rank, e1)?, e2)?,
            None => self.edge(rank, boundary)?,
        };
        Some(Neighbor { rank: to, rotation: 0 })
    }
}

/// NDSL's cubed sphere: six tiles of a square `layout`, rank `tile * per_tile + tile_rank`.
/// Crossing a tile edge rotates data by NDSL's rules: the west edge of an even tile 1, the
/// east edge of an odd tile 1, the north edge of an even tile 3, the south edge of an odd
/// tile 3, otherwise 0; a corner sums its two edges. Tile corners have no neighbour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CubedSpherePartitioner {
    tile: TilePartitioner,
}

impl CubedSpherePartitioner {
    /// A cubed sphere of square `layout` per face.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty layout, or one with more than `isize::MAX`
    /// ranks over the six faces.
    pub fn new(layout: usize) -> Result<Self> {
        let tile = TilePartitioner::new((layout, layout), true)?;
        if tile.total_ranks().checked_mul(6).is_none_or(|n| n > isize::MAX as usize) {
            return Err(Error::invalid(format!(
                "a cube of {layout}x{layout} faces has more than isize::MAX ranks"
            )));
        }
        Ok(CubedSpherePartitioner { tile })
    }

    /// The partitioner of one face (periodic, as NDSL's).
    pub fn tile(&self) -> &TilePartitioner {
        &self.tile
    }

    fn per_tile(&self) -> usize {
        self.tile.total_ranks()
    }

    fn tile_index(&self, rank: usize) -> usize {
        rank / self.per_tile()
    }

    fn cross(&self, rank: usize, to_tile: isize) -> usize {
        let to_tile = to_tile.rem_euclid(6) as usize;
        let tile_rank = rank % self.per_tile();
        to_tile * self.per_tile() + self.tile.fliplr_rank(self.tile.rotate_rank(tile_rank))
    }

    fn edge(&self, rank: usize, b: Boundary) -> Option<Neighbor> {
        let n = self.per_tile();
        let t = self.tile_index(rank) as isize;
        let (j, i) = self.tile.subtile_index(rank);
        let (ny, nx) = self.tile.layout;
        let even = t % 2 == 0;
        let within = |r: usize| Neighbor { rank: r, rotation: 0 };
        // One tile forward or back around the six; 7n fits (new() bounds 6n by isize::MAX).
        let shift = |r: usize, by: isize| if by > 0 { (r + n) % (6 * n) } else { (r + 5 * n) % (6 * n) };
        let plain = self.tile.edge(rank, b)?;
        Some(match b {
            Boundary::West if i == 0 && even => Neighbor { rank: self.cross(rank, t - 2), rotation: 1 },
            Boundary::West if i == 0 => within(shift(plain, -1)),
            Boundary::East if i == nx - 1 && !even => Neighbor { rank: self.cross(rank, t + 2), rotation: 1 },
            Boundary::East if i == nx - 1 => within(shift(plain, 1)),
            Boundary::North if j == ny - 1 && even => Neighbor { rank: self.cross(rank, t + 2), rotation: 3 },
            Boundary::North if j == ny - 1 => within(shift(plain, 1)),
            Boundary::South if j == 0 && !even => Neighbor { rank: self.cross(rank, t - 2), rotation: 3 },
            Boundary::South if j == 0 => within(shift(plain, -1)),
            _ => within(plain),
        })
    }
}

impl Partitioner for CubedSpherePartitioner {
    fn total_ranks(&self) -> usize {
        6 * self.per_tile()
    }

    fn neighbor(&self, rank: usize, boundary: Boundary) -> Option<Neighbor> {
        if rank >= self.total_ranks() {
            return None;
        }
        let Some((_, _)) = corner_edges(boundary) else {
            return self.edge(rank, boundary);
        };
        let (j, i) = self.tile.subtile_index(rank);
        let (ny, nx) = self.tile.layout;
        let (top, bottom, left, right) = (j == ny - 1, j == 0, i == 0, i == nx - 1);
        let even = self.tile_index(rank) % 2 == 0;
        // NDSL's corner rules: no neighbour across a tile corner; otherwise two edges, the
        // second one chosen so the path stays on existing faces.
        let (first, second) = match boundary {
            Boundary::NorthWest if top && left => return None,
            Boundary::NorthWest => {
                (Boundary::West, if even && left { Boundary::West } else { Boundary::North })
            }
            Boundary::NorthEast if top && right => return None,
            Boundary::NorthEast => {
                (Boundary::North, if even && top { Boundary::South } else { Boundary::East })
            }
            Boundary::SouthWest if bottom && left => return None,
            Boundary::SouthWest => {
                (Boundary::South, if !even && bottom { Boundary::North } else { Boundary::West })
            }
            Boundary::SouthEast if bottom && right => return None,
            Boundary::SouthEast => {
                (Boundary::South, if !even && bottom { Boundary::South } else { Boundary::East })
            }
            _ => return None,
        };
        let e1 = self.edge(rank, first)?;
        let e2 = self.edge(e1.rank, second)?;
        Some(Neighbor { rank: e2.rank, rotation: (e1.rotation + e2.rotation).rem_euclid(4) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every link has a partner link back, through the boundary the data arrives at.
    fn links_are_symmetric(p: &dyn Partitioner) {
        for rank in 0..p.total_ranks() {
            for b in Boundary::ALL {
                if let Some(n) = p.neighbor(rank, b) {
                    let back = receiving_boundary(b, n.rotation);
                    let r = p
                        .neighbor(n.rank, back)
                        .unwrap_or_else(|| panic!("{rank} {b:?} -> {n:?}: no way back via {back:?}"));
                    assert_eq!(r.rank, rank, "{rank} {b:?} -> {n:?} -> back via {back:?} reaches {}", r.rank);
                    assert_eq!(
                        (r.rotation + n.rotation).rem_euclid(4),
                        0,
                        "{rank} {b:?}: rotations {} and {}",
                        n.rotation,
                        r.rotation
                    );
                }
            }
        }
    }

    #[test]
    fn tiles_are_symmetric() {
        for layout in [(1, 1), (2, 1), (1, 2), (2, 2), (3, 2), (3, 3)] {
            for periodic in [true, false] {
                links_are_symmetric(&TilePartitioner::new(layout, periodic).unwrap());
            }
        }
    }

    #[test]
    fn tile_neighbors() {
        let t = TilePartitioner::new((2, 2), true).unwrap();
        assert_eq!(t.neighbor(0, Boundary::West).unwrap().rank, 1);
        assert_eq!(t.neighbor(0, Boundary::North).unwrap().rank, 2);
        assert_eq!(t.neighbor(0, Boundary::SouthWest).unwrap().rank, 3);
        let open = TilePartitioner::new((2, 2), false).unwrap();
        assert!(open.neighbor(0, Boundary::West).is_none());
        assert_eq!(open.neighbor(0, Boundary::NorthEast).unwrap().rank, 3);
        let two = TilePartitioner::new((1, 2), true).unwrap();
        assert_eq!(two.neighbor(0, Boundary::West).unwrap().rank, 1);
        assert_eq!(two.neighbor(0, Boundary::East).unwrap().rank, 1);
        assert_eq!(two.neighbor(0, Boundary::North).unwrap().rank, 0);
    }

    #[test]
    fn cube_one_rank_per_face_matches_ndsl() {
        let c = CubedSpherePartitioner::new(1).unwrap();
        for t in 0..6usize {
            let w = c.neighbor(t, Boundary::West).unwrap();
            let e = c.neighbor(t, Boundary::East).unwrap();
            let n = c.neighbor(t, Boundary::North).unwrap();
            let s = c.neighbor(t, Boundary::South).unwrap();
            if t % 2 == 0 {
                assert_eq!((w.rank, w.rotation), ((t + 4) % 6, 1));
                assert_eq!((e.rank, e.rotation), ((t + 1) % 6, 0));
                assert_eq!((n.rank, n.rotation), ((t + 2) % 6, 3));
                assert_eq!((s.rank, s.rotation), ((t + 5) % 6, 0));
            } else {
                assert_eq!((w.rank, w.rotation), ((t + 5) % 6, 0));
                assert_eq!((e.rank, e.rotation), ((t + 2) % 6, 1));
                assert_eq!((n.rank, n.rotation), ((t + 1) % 6, 0));
                assert_eq!((s.rank, s.rotation), ((t + 4) % 6, 3));
            }
            for corner in [Boundary::NorthEast, Boundary::NorthWest, Boundary::SouthEast, Boundary::SouthWest]
            {
                assert!(c.neighbor(t, corner).is_none(), "a 1x1 face is all tile corners");
            }
        }
        links_are_symmetric(&c);
    }

    #[test]
    fn cubes_are_symmetric() {
        for layout in [2, 3] {
            links_are_symmetric(&CubedSpherePartitioner::new(layout).unwrap());
        }
    }
}
