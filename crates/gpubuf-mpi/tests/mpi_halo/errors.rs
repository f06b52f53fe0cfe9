//! Wrong arguments on every rank or on one, and updates left in flight.

use super::{Tile, NZ};
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{DType, Error, Kernels, Result};
use gpubuf_halo::{Boundary, Partitioner};
use gpubuf_mpi::mpi::topology::{Communicator, SimpleCommunicator};
use gpubuf_mpi::HaloUpdater;

/// Expects a typed `InvalidArgument` (or `ShapeMismatch`) from a call that must not panic.
pub fn expect_invalid(what: &str, r: Result<()>) -> Result<()> {
    match r {
        Err(Error::InvalidArgument(_) | Error::ShapeMismatch { .. }) => Ok(()),
        other => Err(Error::invalid(format!("{what}: expected a typed argument error, got {other:?}"))),
    }
}

/// A partitioner that claims `total` ranks and links rank 0 with rank `total` (outside any
/// communicator of `total` ranks) across every edge, both ways.
struct Liar(usize);

impl Partitioner for Liar {
    fn total_ranks(&self) -> usize {
        self.0
    }
    fn neighbor(&self, rank: usize, _boundary: Boundary) -> Option<gpubuf_halo::Neighbor> {
        let to = if rank == self.0 { 0 } else { self.0 };
        Some(gpubuf_halo::Neighbor { rank: to, rotation: i32::MIN })
    }
}

/// Wrong arguments are typed errors that leave nothing posted and the updater usable: a
/// wrong quantity count or shape in `start` (on every rank, then on rank 0 alone while
/// the others go ahead); an update dropped before `wait`, or leaked, completes (when
/// dropped, by the next `start`, or when the updater drops); an updater dropped with an
/// update in flight completes it first.
pub fn errors_case<B: Kernels>(b: &B, comm: &SimpleCommunicator, layout: (usize, usize)) -> Result<()> {
    let tile = Tile::new(comm, layout, true)?;
    let (mut u, mut v) = (tile.array(b, 0.0)?, tile.array(b, 0.5)?);
    let mut wrong_shape = NDBuffer::<B, f64>::zeros(b, &[3, 3, NZ])?;
    let spec = std::slice::from_ref(&tile.spec);
    // Refused updaters (every rank refuses alike).
    let mut no_halo = tile.spec.clone();
    no_halo.n_halo = 0;
    let size = comm.size() as usize;
    for (what, r) in [
        ("zero halo", HaloUpdater::<B, f64>::new(b, comm, &tile.part, &[no_halo], None, "e").map(drop)),
        ("rank outside", HaloUpdater::<B, f64>::new(b, comm, &Liar(size), spec, None, "e").map(drop)),
        ("wrong size", HaloUpdater::<B, f64>::new(b, comm, &Liar(size + 1), spec, None, "e").map(drop)),
        ("no quantity", HaloUpdater::<B, f64>::new(b, comm, &tile.part, &[], None, "e").map(drop)),
        (
            "y of another length",
            HaloUpdater::<B, f64>::new(b, comm, &tile.part, spec, Some(&[]), "e").map(drop),
        ),
    ] {
        expect_invalid(what, r)?;
    }
    let mut f32_spec = tile.spec.clone();
    f32_spec.dtype = DType::F32;
    if HaloUpdater::<B, f64>::new(b, comm, &tile.part, &[f32_spec], None, "e").is_ok() {
        return Err(Error::invalid("an f64 updater took f32 specs"));
    }
    let mut up = HaloUpdater::<B, f64>::new(b, comm, &tile.part, spec, None, "errors")?;
    expect_invalid("start with two quantities", up.start(&mut [&mut u, &mut v], None).map(drop))?;
    expect_invalid("start with none", up.start(&mut [], None).map(drop))?;
    expect_invalid("start with y quantities", up.start(&mut [&mut u], Some(&mut [&mut v])).map(drop))?;
    expect_invalid("start with the wrong shape", up.start(&mut [&mut wrong_shape], None).map(drop))?;
    if up.in_flight() {
        return Err(Error::invalid("a failed start left an update in flight"));
    }
    up.update(&mut [&mut u], None)?;
    tile.verify(&u, 0.0)?;
    // Rank 0 refuses an update while the others go ahead: nobody waits, its neighbours'
    // `wait` names rank 0, the other ranks' update succeeds, and the next one works.
    refusal(&mut up, tile.me, &mut u, &mut v)?;
    tile.verify(&v, 0.5)?;
    let mut on_node = HaloUpdater::<B, f64>::on_node(b, comm, &tile.part, spec, None, "errors on node")?;
    let mut v1 = tile.array(b, 0.75)?;
    refusal(&mut on_node, tile.me, &mut u, &mut v1)?;
    tile.verify(&v1, 0.75)?;
    drop(on_node);
    // Dropped before `wait`: the update completes.
    let (mut u2, mut v2) = (tile.array(b, 0.125)?, tile.array(b, 0.375)?);
    drop(up.start(&mut [&mut u2], None)?);
    tile.verify(&u2, 0.125)?;
    // Leaked: in flight until the next `start` completes it (into the same arrays: the
    // updater holds clones of their handles).
    std::mem::forget(up.start(&mut [&mut v2], None)?);
    if !up.in_flight() {
        return Err(Error::invalid("a leaked update is not in flight"));
    }
    up.update(&mut [&mut u2], None)?;
    tile.verify(&v2, 0.375)?;
    tile.verify(&u2, 0.125)?;
    // An updater dropped with a leaked update in flight completes it first; a new one works.
    std::mem::forget(up.start(&mut [&mut u], None)?);
    drop(up);
    let mut w = tile.array(b, 0.25)?;
    HaloUpdater::<B, f64>::new(b, comm, &tile.part, spec, None, "errors")?.update(&mut [&mut w], None)?;
    tile.verify(&w, 0.25)
}

/// Rank `me` 0 starts an update with two quantities (refused), the others update `v`;
/// then every rank updates `v`.
fn refusal<B: Kernels>(
    up: &mut HaloUpdater<'_, B, f64>,
    me: usize,
    u: &mut NDBuffer<B, f64>,
    v: &mut NDBuffer<B, f64>,
) -> Result<()> {
    if me == 0 {
        let r = up.start(&mut [&mut *u, &mut *v], None).map(drop);
        expect_invalid("start with two quantities on rank 0", r)?;
    } else {
        let r = up.update(&mut [&mut *v], None);
        match (up.neighbors().contains(&0), r) {
            (true, Err(Error::InvalidArgument(m))) if m.contains("rank 0 refused") => {}
            (false, Ok(())) => {}
            (n, other) => {
                return Err(Error::invalid(format!(
                    "rank {me} (a neighbour of rank 0: {n}) after rank 0 refused its update: {other:?}"
                )))
            }
        }
    }
    if up.in_flight() {
        return Err(Error::invalid("a refused update is still in flight"));
    }
    up.update(&mut [&mut *v], None)
}
