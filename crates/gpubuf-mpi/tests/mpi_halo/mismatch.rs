//! Specs that disagree between ranks: `new` and `on_node` refuse them on every rank
//! (rank 0's tile a row taller, another element type or an extra quantity on rank 0,
//! another name, updaters made in opposite orders, `new` on rank 0 against `on_node` on the
//! others), and the communicator works afterwards.

use super::node::Mode;
use super::{Tile, H, NZ};
use gpubuf_core::{DType, Element, Error, Kernels, Result};
use gpubuf_halo::{Dim, QuantityHaloSpec};
use gpubuf_mpi::mpi::topology::SimpleCommunicator;
use gpubuf_mpi::HaloUpdater;

/// Records in `wrong` unless `r` is the error every rank returns when the ranks disagree.
fn refused(wrong: &mut Option<Error>, what: &str, r: Result<()>) {
    match r {
        Err(Error::InvalidArgument(m)) if m.contains("was made on no rank") => {}
        other => {
            wrong.get_or_insert(Error::invalid(format!(
                "{what}: expected the ranks' disagreement, got {other:?}"
            )));
        }
    }
}

/// Makes (and drops) an updater of `x` scalars, by `on_node` when `shared`.
fn make<B: Kernels, T: Element>(
    b: &B,
    comm: &SimpleCommunicator,
    tile: &Tile,
    x: &[QuantityHaloSpec],
    name: &str,
    shared: bool,
) -> Result<()> {
    if shared {
        HaloUpdater::<B, T>::on_node(b, comm, &tile.part, x, None, name).map(drop)
    } else {
        HaloUpdater::<B, T>::new(b, comm, &tile.part, x, None, name).map(drop)
    }
}

/// Every disagreement is an error on every rank (none returns `Ok`, none is left waiting);
/// failures are recorded, not returned at once, so every rank makes the same calls.
pub fn mismatch_case<B: Kernels>(
    b: &B,
    comm: &SimpleCommunicator,
    layout: (usize, usize),
    shared: bool,
) -> Result<()> {
    let tile = Tile::new(comm, layout, true)?;
    let odd_one = tile.me == 0;
    let spec = tile.spec.clone();
    let mut wrong = None;
    // Rank 0's tile a row taller: ny = 5 against its neighbours' 4.
    let dims = [Dim::X, Dim::Y, Dim::Z];
    let taller = QuantityHaloSpec::centered(&dims, &[tile.nxl, tile.nyl + 1, NZ], H, 0, DType::F64)?;
    let rows = if odd_one { taller } else { spec.clone() };
    refused(&mut wrong, "ny 5 against 4", make::<B, f64>(b, comm, &tile, &[rows], "m", shared));
    // Another element type on rank 0: f32 (shorter messages), i64 (as long as f64's).
    for dtype in [DType::F32, DType::I64] {
        let mut other = spec.clone();
        other.dtype = dtype;
        let r = match (odd_one, dtype) {
            (true, DType::F32) => make::<B, f32>(b, comm, &tile, &[other], "m", shared),
            (true, _) => make::<B, i64>(b, comm, &tile, &[other], "m", shared),
            (false, _) => make::<B, f64>(b, comm, &tile, std::slice::from_ref(&spec), "m", shared),
        };
        refused(&mut wrong, &format!("{dtype:?} on rank 0"), r);
    }
    // An extra quantity on rank 0.
    let count = if odd_one { 2 } else { 1 };
    let extra = vec![spec.clone(); count];
    refused(&mut wrong, "an extra quantity", make::<B, f64>(b, comm, &tile, &extra, "m", shared));
    // Another name on rank 0; two updaters made in opposite orders on even and odd ranks.
    let one = std::slice::from_ref(&spec);
    let name = if odd_one { "other" } else { "m" };
    refused(&mut wrong, "another name", make::<B, f64>(b, comm, &tile, one, name, shared));
    let order = if tile.me % 2 == 0 { ["m", "n"] } else { ["n", "m"] };
    for name in order {
        refused(&mut wrong, "opposite orders", make::<B, f64>(b, comm, &tile, one, name, shared));
    }
    // Rank 0 makes it the other way (`new` against `on_node`): matching specs, but only
    // some ranks would set up the shared window.
    let way = if odd_one { !shared } else { shared };
    refused(&mut wrong, "new against on_node", make::<B, f64>(b, comm, &tile, one, "m", way));
    // The communicator still works: the same name with matching specs.
    let mut up = if shared {
        HaloUpdater::<B, f64>::on_node(b, comm, &tile.part, one, None, "m")?
    } else {
        HaloUpdater::<B, f64>::new(b, comm, &tile.part, one, None, "m")?
    };
    let mode = if shared { Mode::Node } else { Mode::Messages };
    let mut q = mode.place(b, tile.me, tile.array(b, 0.5)?)?;
    up.update(&mut [&mut q], None)?;
    drop(up);
    tile.verify(&q, 0.5)?;
    wrong.map_or(Ok(()), Err)
}
