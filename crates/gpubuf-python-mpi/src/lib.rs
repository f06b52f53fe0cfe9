//! `gpubuf._mpi`, the native half of `gpubuf.mpi`: gpubuf's MPI halo updater
//! ([`gpubuf_mpi::HaloUpdater`]) over a duplicate of an mpi4py communicator, on host
//! (numpy) quantities, and arrays in node-shared memory.
//!
//! A module of its own, beside `gpubuf._gpubuf`, because it links the MPI library: `import
//! gpubuf` works on machines without MPI, and only `import gpubuf.mpi` loads it. Python
//! objects cross as plain values (numpy arrays, tuples of ints and names), so the two
//! modules share no Rust type; gpubuf's errors are raised as `gpubuf._gpubuf`'s classes.
//! The modules form a DAG: `lib` over `updater` over `quantity`, `spec`, `node`, `comm`,
//! all over `errors`.

mod comm;
mod errors;
mod node;
mod quantity;
mod spec;
mod updater;

use pyo3::prelude::*;

/// The MPI library this module is linked with (`MPI_Get_library_version`), to compare with
/// mpi4py's `MPI.Get_library_version()`.
#[pyfunction]
fn library_version() -> String {
    comm::library_version()
}

/// The neighbours of `rank` under `partitioner` (a tuple as `HaloUpdater` takes):
/// `(boundary name, neighbour rank, quarter turns)` for each boundary that has one.
///
/// # Errors
/// `InvalidArgumentError` for a bad partitioner tuple or a rank outside it.
#[pyfunction]
fn neighbors(partitioner: &Bound<'_, PyAny>, rank: usize) -> PyResult<Vec<(String, usize, i32)>> {
    let p = spec::partitioner(partitioner)?;
    if rank >= p.total_ranks() {
        return Err(errors::invalid(format!("rank {rank} of a partitioner of {} ranks", p.total_ranks())));
    }
    Ok(gpubuf_halo::Boundary::ALL
        .iter()
        .filter_map(|&b| p.neighbor(rank, b).map(|n| (format!("{b:?}").to_lowercase(), n.rank, n.rotation)))
        .collect())
}

/// The module.
#[pymodule]
fn _mpi(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<updater::PyHaloUpdater>()?;
    m.add_class::<node::NodeArray>()?;
    m.add_function(wrap_pyfunction!(node::node_array, m)?)?;
    m.add_function(wrap_pyfunction!(library_version, m)?)?;
    m.add_function(wrap_pyfunction!(neighbors, m)?)?;
    Ok(())
}
