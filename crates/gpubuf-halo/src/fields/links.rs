//! Which boundaries a rank exchanges with each neighbour, from a [`Partitioner`], and the
//! exchange specs of a list of quantities across them: the same construction, in the
//! same order, as the MPI `HaloUpdater`'s links, so that the two sides of a link agree on
//! the layout of their messages without talking.

use crate::partition::{receiving_boundary, Partitioner};
use crate::spec::{Boundary, HaloExchangeSpec, QuantityHaloSpec};
use gpubuf_core::{Error, Result};
use std::collections::BTreeMap;

/// The boundaries a rank shares with one neighbour rank.
///
/// Part `k` of a message is the interior of `sends[k].0`, turned `sends[k].1` clockwise
/// quarter turns on its way; what the neighbour sends back fills the halos `fills`, part
/// `k` into `fills[k]`. Both lists follow [`Boundary::ALL`] (the sender's boundaries, for
/// `fills` the neighbour's), so the message this rank packs for the neighbour has the
/// layout the neighbour unpacks, and the other way round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeighborLink {
    /// The neighbouring rank (this rank itself for a periodic edge of a one-rank tile).
    pub rank: usize,
    /// The boundaries packed for the neighbour and the rotation of each.
    pub sends: Vec<(Boundary, i32)>,
    /// The halos filled by the parts of the neighbour's message, in order.
    pub fills: Vec<Boundary>,
}

impl NeighborLink {
    /// The exchange specs of `specs` (one quantity each) across this link: for each
    /// quantity in order, one spec per part of the message (pack `sends[k]`, unpack into
    /// `fills[k]`).
    ///
    /// # Errors
    /// As [`QuantityHaloSpec::boundary_slices`].
    pub fn exchange_specs(&self, specs: &[QuantityHaloSpec]) -> Result<Vec<HaloExchangeSpec>> {
        let mut out = Vec::with_capacity(specs.len().saturating_mul(self.sends.len()));
        for s in specs {
            for (&(b, r), &fill) in self.sends.iter().zip(&self.fills) {
                out.push(HaloExchangeSpec {
                    specification: s.clone(),
                    pack_slices: s.boundary_slices(b, true)?,
                    pack_clockwise_rotation: r,
                    unpack_slices: s.boundary_slices(fill, false)?,
                });
            }
        }
        Ok(out)
    }
}

/// The links of `rank` of `partitioner`, one per neighbour rank, by increasing rank.
///
/// # Errors
/// [`Error::InvalidArgument`] when `rank` is not a rank of the partitioner, or when the
/// partitioner is not symmetric (a neighbour that does not send back as many parts as it
/// receives, or names a rank outside the partitioner).
pub fn neighbor_links(partitioner: &dyn Partitioner, rank: usize) -> Result<Vec<NeighborLink>> {
    let total = partitioner.total_ranks();
    if rank >= total {
        return Err(Error::invalid(format!("rank {rank} of a partitioner of {total} ranks")));
    }
    let mut out: BTreeMap<usize, Vec<(Boundary, i32)>> = BTreeMap::new();
    for b in Boundary::ALL {
        if let Some(n) = partitioner.neighbor(rank, b) {
            if n.rank >= total {
                return Err(Error::invalid(format!(
                    "the partitioner puts rank {} across {b:?} of rank {rank}, of {total} ranks",
                    n.rank
                )));
            }
            out.entry(n.rank).or_default().push((b, n.rotation.rem_euclid(4)));
        }
    }
    let mut links = Vec::with_capacity(out.len());
    for (n, sends) in out {
        // What the neighbour sends here, in the order of *its* boundaries, and which of
        // this rank's halos each part fills.
        let fills: Vec<Boundary> = Boundary::ALL
            .iter()
            .filter_map(|&bs| {
                let back = partitioner.neighbor(n, bs).filter(|nb| nb.rank == rank)?;
                Some(receiving_boundary(bs, back.rotation))
            })
            .collect();
        if fills.len() != sends.len() {
            return Err(Error::invalid(format!(
                "rank {rank} sends {} parts to {n} but gets {}",
                sends.len(),
                fills.len()
            )));
        }
        links.push(NeighborLink { rank: n, sends, fills });
    }
    Ok(links)
}

/// The link of a single rank whose every boundary wraps onto the opposite side of the
/// same array (a periodic one-rank tile): all eight boundaries, corners included.
pub fn periodic_link() -> NeighborLink {
    let sends: Vec<(Boundary, i32)> = Boundary::ALL.iter().map(|&b| (b, 0)).collect();
    let fills = Boundary::ALL.iter().map(|b| b.opposite()).collect();
    NeighborLink { rank: 0, sends, fills }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::TilePartitioner;

    #[test]
    fn one_periodic_rank_is_the_periodic_link() {
        let tile = TilePartitioner::new((1, 1), true).unwrap();
        assert_eq!(neighbor_links(&tile, 0).unwrap(), vec![periodic_link()]);
    }

    #[test]
    fn bad_rank_is_an_error() {
        let tile = TilePartitioner::new((2, 2), true).unwrap();
        assert!(neighbor_links(&tile, 4).is_err());
        let links = neighbor_links(&tile, 0).unwrap();
        assert_eq!(links.iter().map(|l| l.rank).collect::<Vec<_>>(), vec![1, 2, 3]);
        // Rank 1 is across both the west and the east edge of rank 0.
        assert_eq!(links[0].sends, vec![(Boundary::East, 0), (Boundary::West, 0)]);
        assert_eq!(links[0].fills, vec![Boundary::West, Boundary::East]);
    }
}
