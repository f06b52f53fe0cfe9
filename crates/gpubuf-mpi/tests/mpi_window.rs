//! Shared-window halo links ([`HaloUpdater::on_node`]) between ranks whose halo specs
//! disagree. Run under `mpirun -n 2` (or any even number: ranks are paired); alone it
//! checks nothing.

use gpubuf_buffer::NDBuffer;
use gpubuf_core::{DType, Result};
use gpubuf_halo::{Dim, QuantityHaloSpec, TilePartitioner};
use gpubuf_mpi::mpi::topology::{Color, Communicator};
use gpubuf_mpi::HaloUpdater;

fn spec(ny: usize) -> Result<QuantityHaloSpec> {
    QuantityHaloSpec::centered(&[Dim::X, Dim::Y, Dim::Z], &[4, ny, 1], 1, 0, DType::F64)
}

/// A 1x2 periodic pair where rank 0's message to rank 1 is 16 bytes longer than the slot
/// rank 1 would offer for it: both ranks refuse the updater before any window is made (no
/// write past the slot), and a matching updater made afterwards under the same name works.
#[test]
fn mismatched_specs_are_refused_on_both_ranks() -> Result<()> {
    let universe = gpubuf_mpi::mpi::initialize().expect("MPI initialises");
    let world = universe.world();
    let Some(pair) = world.split_by_color(Color::with_value(world.rank() / 2)) else { return Ok(()) };
    if pair.size() != 2 {
        return Ok(());
    }
    let b = gpubuf_testkit::cpu();
    let part = TilePartitioner::new((1, 2), true)?;
    let ny = if pair.rank() == 0 { 5 } else { 4 };
    let bad = [spec(ny)?];
    let made = HaloUpdater::<_, f64>::on_node(&b, &pair, &part, &bad, None, "q");
    let err = made.err().map(|e| e.to_string());
    assert!(
        err.as_deref().is_some_and(|e| e.contains("rank 0 sends rank 1 112 bytes where rank 1 expects 96")),
        "rank {}: {err:?}",
        pair.rank()
    );
    let good = [spec(4)?];
    let mut up = HaloUpdater::<_, f64>::on_node(&b, &pair, &part, &good, None, "q")?;
    let mut q = NDBuffer::<_, f64>::zeros(&b, &good[0].shape)?;
    up.update(&mut [&mut q], None)?;
    drop(up);
    Ok(())
}
