//! The native half of `python -m gpubuf.bench`: the same halo exchange and pool hit timed
//! inside Rust with no Python in the loop, and the cache eviction both loops share. The
//! ratio of the Python figure to these tells what the binding costs. Private (`_` names in
//! `gpubuf._gpubuf`): for the benchmark, not part of the API.

use crate::backend::PyBackend;
use crate::errors::{invalid, IntoPy};
use crate::halo_run::PyHaloDataTransformer;
use crate::pool::PyMemoryPool;
use gpubuf::{Buffer, Device};
use pyo3::prelude::*;
use std::time::Instant;

/// A scratch buffer on a device, filled with a new byte before each timed call so that
/// the call starts with cold caches (the last-level cache on the CPU, and on PoCL; the L2
/// on a GPU), as `gpubuf bench halo` does.
#[pyclass(name = "_Evictor", module = "gpubuf._gpubuf", frozen)]
pub struct PyEvictor {
    scratch: Buffer<Device>,
    round: std::sync::atomic::AtomicU8,
}

impl PyEvictor {
    /// Fills the scratch buffer with the next byte value and waits for it.
    fn evict(&self) -> gpubuf::Result<()> {
        let r = self.round.fetch_add(1, std::sync::atomic::Ordering::Relaxed).wrapping_add(1);
        self.scratch.fill(&[r])?;
        self.scratch.synchronize()
    }
}

#[pymethods]
impl PyEvictor {
    /// ``nbytes`` of scratch memory on ``backend``.
    ///
    /// Raises ``OutOfMemoryError`` when the device cannot hold it.
    #[new]
    fn new(py: Python<'_>, backend: &PyBackend, nbytes: usize) -> PyResult<Self> {
        let device = backend.device.clone();
        let scratch = py.detach(move || Buffer::zeros(&device, nbytes)).py()?;
        Ok(PyEvictor { scratch, round: 0.into() })
    }

    /// Evicts: one fill of the scratch buffer, waited for (GIL released).
    fn __call__(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.evict()).py()
    }
}

/// Seconds of each of ``reps`` packs (``unpack=False``) or unpacks of ``quantities_x``
/// (and ``quantities_y``) by ``transformer``, timed inside Rust: before each, ``evictor``
/// runs (when given), then with ``warm`` an untimed run of the same operation.
///
/// Raises as ``async_pack``/``async_unpack``, and ``InvalidArgumentError`` for numpy
/// arrays that would be uploaded rather than used in place.
///
/// # Errors
/// As the docstring says; the eviction's device errors.
#[pyfunction]
#[pyo3(signature = (transformer, quantities_x, quantities_y, unpack, reps, warm, evictor = None))]
#[allow(clippy::too_many_arguments)]
pub fn _halo_times(
    py: Python<'_>,
    transformer: &PyHaloDataTransformer,
    quantities_x: &Bound<'_, PyAny>,
    quantities_y: Option<&Bound<'_, PyAny>>,
    unpack: bool,
    reps: usize,
    warm: bool,
    evictor: Option<&PyEvictor>,
) -> PyResult<Vec<f64>> {
    let mut before = || evictor.map_or(Ok(()), PyEvictor::evict);
    transformer.time_in_rust(py, quantities_x, quantities_y, unpack, reps, warm, &mut before)
}

/// Nanoseconds per pool hit (an ``allocate(size)`` whose block is dropped at once) over
/// ``iters`` hits in Rust, after one allocation that fills the size class.
///
/// Raises ``OutOfMemoryError`` when the pool cannot provide the block,
/// ``InvalidArgumentError`` for ``iters == 0``.
///
/// # Errors
/// As the docstring says.
#[pyfunction]
pub fn _pool_hit_ns(py: Python<'_>, pool: &PyMemoryPool, size: usize, iters: usize) -> PyResult<f64> {
    if iters == 0 {
        return Err(invalid("iters is at least 1"));
    }
    let pool = pool.pool().clone();
    py.detach(move || {
        drop(pool.allocate(size)?);
        let t0 = Instant::now();
        for _ in 0..iters {
            drop(pool.allocate(size)?);
        }
        Ok::<_, gpubuf::Error>(t0.elapsed().as_secs_f64() * 1e9 / iters as f64)
    })
    .py()
}
