//! `gpubuf.MemoryPool`: pyopencl's `MemoryPool` surface over gpubuf's pool, plus its
//! limit and its out-of-memory behaviour. Its blocks are `PooledBuffer`s
//! ([`crate::pooled_buffer`]), its allocators [`crate::allocators`]'s classes.

use crate::allocators::{PyDeferredAllocator, PyImmediateAllocator};
use crate::args::{bytes_arg, shape_arg};
use crate::backend::PyBackend;
use crate::cl_pooled::{finish_orphans, finish_reclaim, Loans};
use crate::dtype::{parse_dtype, with_dtype, AnyArray, Wrap};
use crate::errors::{invalid, stats_dict, IntoPy};
use crate::gil::{holding_gil, GilAllocator, GilCell};
use crate::pooled_buffer::{new_object, PoolCore};
use gpubuf::pool::{alloc_size, bin_number, Limit, PoolConfig, GRANULE};
use gpubuf::{DType, Device, MemoryPool, Order};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::{PyTraverseError, PyVisit};

/// A limit: None, an int (bytes) or a float in (0, 1] (a fraction of the device's memory).
fn limit_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Limit>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(None) };
    if obj.is_instance_of::<pyo3::types::PyBool>() {
        return Err(invalid("a limit is None, an int of bytes or a float fraction"));
    }
    if obj.is_instance_of::<pyo3::types::PyInt>() {
        return Ok(Some(Limit::Bytes(bytes_arg(obj)?)));
    }
    let f: f64 =
        obj.extract().map_err(|_| invalid("a limit is None, an int of bytes or a float fraction"))?;
    Ok(Some(Limit::Fraction(f)))
}

/// A memory pool (pyopencl's ``MemoryPool(allocator, leading_bits_in_bin_id=4)``): freed
/// blocks are kept and handed out again instead of going back to the device. A request
/// gets a block of its size class (pyopencl's ``alloc_size(bin_number(size))``, rounded
/// up to 256 bytes).
///
/// ``allocator`` is a ``Backend`` (immediate allocation), ``ImmediateAllocator`` or
/// ``DeferredAllocator``. A pool over an allocator made from a pyopencl queue or context
/// hands out ``gpubuf.pyopencl.PooledBuffer`` objects, ``pyopencl.Buffer``s that pyopencl
/// takes anywhere (kernels, copies, ``pyopencl.array`` with ``allocator=``), each block
/// an OpenCL buffer of its own as in pyopencl's pool; other pools hand out
/// ``gpubuf.PooledBuffer``. ``limit`` caps the bytes the pool holds: an int of bytes, or a
/// float fraction of the device's memory; past it ``allocate`` raises
/// ``OutOfMemoryError`` after freeing what the pool held.
#[pyclass(name = "MemoryPool", module = "gpubuf", frozen)]
pub struct PyMemoryPool {
    /// The Rust pool and the cache of blocks freed from Python, shared with the blocks.
    core: Py<PoolCore>,
    bits: u32,
    /// Made from pyopencl objects: blocks go to pyopencl as `pyopencl.Buffer` subclass
    /// objects ([`crate::cl_pooled`]).
    for_pyopencl: bool,
    /// The objects lent to pyopencl (for such a pool).
    loans: GilCell<Loans>,
}

#[pymethods]
impl PyMemoryPool {
    #[new]
    #[pyo3(signature = (allocator, leading_bits_in_bin_id = None, limit = None))]
    fn new(
        allocator: &Bound<'_, PyAny>,
        leading_bits_in_bin_id: Option<&Bound<'_, PyAny>>,
        limit: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let leading_bits_in_bin_id = match leading_bits_in_bin_id {
            None => 4,
            Some(b) => {
                u32::try_from(bytes_arg(b)?).map_err(|_| invalid("leading_bits_in_bin_id is too large"))?
            }
        };
        let (device, immediate, from_cl) = if let Ok(b) = allocator.cast::<PyBackend>() {
            (b.get().device.clone(), true, false)
        } else if let Ok(a) = allocator.cast::<PyImmediateAllocator>() {
            (a.get().device.clone(), true, a.get().pyopencl)
        } else if let Ok(a) = allocator.cast::<PyDeferredAllocator>() {
            (a.get().device.clone(), false, a.get().pyopencl)
        } else {
            return Err(invalid(
                "the allocator is a Backend, ImmediateAllocator or DeferredAllocator (gpubuf's, over a \
                 backend or a pyopencl queue or context)",
            ));
        };
        // Blocks past `small_max` get allocations of their own, of exactly their size class
        // (pyopencl's bins); a pool for pyopencl has every block so, since pyopencl takes
        // the allocation's handle for the block.
        let config = PoolConfig {
            leading_bits_in_bin_id,
            immediate,
            limit: limit_arg(limit)?,
            large_round: GRANULE,
            whole_blocks: from_cl,
            ..PoolConfig::default()
        };
        let pool = MemoryPool::with_config(GilAllocator { device }, config).py()?;
        let core = Py::new(allocator.py(), PoolCore::new(pool, leading_bits_in_bin_id))?;
        let loans = GilCell::new(Loans::default());
        Ok(PyMemoryPool { core, bits: leading_bits_in_bin_id, for_pyopencl: from_cl, loans })
    }

    /// A block of at least ``size`` bytes (pyopencl's ``allocate``), returned to the pool by
    /// ``release()``, at the end of a ``with`` block, or when garbage collected.
    ///
    /// Raises ``OutOfMemoryError`` when neither the pool nor the device has the memory (or the
    /// limit is reached); ``InvalidArgumentError`` for a negative size.
    ///
    /// A block released from Python (the same object when nothing else refers to it) or
    /// one the pool holds is handed out with the GIL kept; the GIL is released while the
    /// pool allocates from the device.
    fn allocate(&self, py: Python<'_>, size: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.allocate_for(py, size)
    }

    /// ``pool(size)`` is ``pool.allocate(size)``.
    fn __call__(&self, py: Python<'_>, size: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.allocate_for(py, size)
    }

    /// An array of ``shape`` and ``dtype`` (default float64) in a block of this pool; the
    /// block returns when the array and every view of it are gone. Uninitialised.
    #[pyo3(signature = (shape, dtype = None))]
    fn empty(
        &self,
        py: Python<'_>,
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<AnyArray> {
        self.array(py, shape, dtype, false)
    }

    /// As ``empty``, filled with zeros.
    #[pyo3(signature = (shape, dtype = None))]
    fn zeros(
        &self,
        py: Python<'_>,
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<AnyArray> {
        self.array(py, shape, dtype, true)
    }

    /// Free blocks kept for reuse.
    #[getter]
    fn held_blocks(&self, py: Python<'_>) -> usize {
        self.settle(py);
        self.pool().held_blocks()
    }

    /// Blocks handed out and not yet returned.
    #[getter]
    fn active_blocks(&self, py: Python<'_>) -> usize {
        self.settle(py);
        self.pool().active_blocks()
    }

    /// Bytes the pool holds from the device, active and held.
    #[getter]
    fn managed_bytes(&self, py: Python<'_>) -> usize {
        self.settle(py);
        self.pool().managed_bytes()
    }

    /// Bytes of the blocks handed out (block sizes, after rounding to the size class).
    #[getter]
    fn active_bytes(&self, py: Python<'_>) -> usize {
        self.settle(py);
        self.pool().active_bytes()
    }

    /// Bytes of the held blocks.
    #[getter]
    fn held_bytes(&self, py: Python<'_>) -> usize {
        self.settle(py);
        self.pool().held_bytes()
    }

    /// The limit in bytes, or None.
    #[getter]
    fn limit(&self) -> Option<usize> {
        self.pool().stats().limit
    }

    /// Sets the limit (None, bytes, or a float fraction of the device's memory); held
    /// blocks are freed at once if it is exceeded.
    ///
    /// Raises ``InvalidArgumentError`` for a fraction outside (0, 1] or one the device
    /// cannot resolve (the limit is then unchanged).
    #[pyo3(signature = (limit))]
    fn set_limit(&self, py: Python<'_>, limit: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let limit = limit_arg(limit)?;
        self.settle(py);
        self.pool().set_limit(limit).py()
    }

    /// The counters: blocks and bytes active and held, managed bytes, their peaks, hits,
    /// misses and the limit.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.settle(py);
        stats_dict(py, &self.pool().stats())
    }

    /// Returns every wholly free segment to the device.
    fn free_held(&self, py: Python<'_>) {
        self.settle(py);
        let pool = self.pool().clone();
        py.detach(move || pool.free_held());
    }

    /// Frees what is held, and from now on returns freed memory to the device: a block
    /// lent to pyopencl goes back when its buffer object ends (or is released), as in
    /// pyopencl's pool.
    fn stop_holding(&self, py: Python<'_>) {
        self.reclaim(py);
        // SAFETY: `stop` sets a flag and moves the loans out; the objects are handled after
        // `with` returns.
        let lent = unsafe { self.loans.with(py, Loans::stop) };
        finish_orphans(py, lent);
        self.core.get().stop_caching(py);
        let pool = self.pool().clone();
        py.detach(move || pool.stop_holding());
    }

    /// The size class of a request of ``size`` bytes.
    fn bin_number(&self, size: &Bound<'_, PyAny>) -> PyResult<usize> {
        Ok(bin_number(bytes_arg(size)?, self.bits))
    }

    /// The largest request size of size class ``bin``.
    fn alloc_size(&self, bin: &Bound<'_, PyAny>) -> PyResult<usize> {
        Ok(alloc_size(bytes_arg(bin)?, self.bits))
    }

    /// The backend the pool allocates from.
    #[getter]
    fn backend(&self) -> PyBackend {
        PyBackend::new(self.pool().allocator().device.clone())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // SAFETY: the collector holds the GIL, and runs only where a Python object is made,
        // which no `with` closure of this cell does.
        for object in unsafe { self.loans.peek() }.objects() {
            visit.call(object)?;
        }
        Ok(())
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        self.settle(py);
        let pool = self.pool();
        format!(
            "gpubuf.MemoryPool({:?}, active_blocks={}, held_blocks={}, managed_bytes={})",
            pool.allocator().device.kind().name(),
            pool.active_blocks(),
            pool.held_blocks(),
            pool.managed_bytes()
        )
    }
}

impl Drop for PyMemoryPool {
    /// The released objects cached for this pool refer to its core: they go now (their
    /// blocks back to the pool), and blocks released later go straight back to the pool.
    fn drop(&mut self) {
        let (core, loans) = (&self.core, self.loans.get_mut());
        let orphans = loans.orphan();
        Python::attach(|py| {
            core.get().stop_caching(py);
            if !orphans.is_empty() {
                // A pool may end while an exception is being raised (a temporary argument
                // of a call that failed): the Python calls here must not lose it.
                let pending = PyErr::take(py);
                finish_orphans(py, orphans);
                if let Some(e) = pending {
                    e.restore(py);
                }
            }
        });
    }
}

impl PyMemoryPool {
    /// The Rust pool.
    pub(crate) fn pool(&self) -> &MemoryPool<GilAllocator> {
        &self.core.get().pool
    }

    /// The pool's device.
    pub(crate) fn device(&self) -> Device {
        self.pool().allocator().device.clone()
    }

    /// Brings the pool up to date before its counters are read or its memory handed
    /// back: the blocks cached for Python, and those of lent pyopencl objects that only
    /// the pool refers to any more, go back to it.
    fn settle(&self, py: Python<'_>) {
        self.core.get().flush(py);
        self.reclaim(py);
    }

    /// Takes back the blocks of lent pyopencl objects that only the pool refers to.
    fn reclaim(&self, py: Python<'_>) {
        // SAFETY: `reclaim` reads reference counts and moves loans out; the objects and
        // blocks are dropped after `with` returns.
        let freed = unsafe { self.loans.with(py, Loans::reclaim) };
        finish_reclaim(self.pool(), freed);
    }

    /// `allocate` and `__call__`.
    fn allocate_for(&self, py: Python<'_>, size: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let bytes = bytes_arg(size)?;
        let core = self.core.get();
        if self.for_pyopencl {
            let mut stale = Vec::new();
            // SAFETY: `take` reads reference counts, moves loans and counts a reference (an
            // increment): no Python runs, and what leaves the list is dropped after `with`.
            let lent = unsafe { self.loans.with(py, |l| l.take(py, self.bits, bytes, &mut stale)) };
            drop(stale);
            if let Some(object) = lent {
                crate::cl_pooled::forget_attributes(object.bind(py));
                return Ok(object);
            }
            // SAFETY: reads two numbers.
            if unsafe { self.loans.with(py, |l| l.due()) } {
                self.reclaim(py);
            }
            // Out of memory (the limit or the device): the blocks of objects dropped since the
            // pool last looked go back first, and the request is tried once more.
            let block = match self.held_or_new(py, bytes) {
                // `OutOfMemoryError` is a `MemoryError`.
                Err(e) if e.is_instance_of::<pyo3::exceptions::PyMemoryError>(py) => {
                    self.reclaim(py);
                    self.held_or_new(py, bytes)?
                }
                r => r?,
            };
            let bin = gpubuf::pool::bin_number(bytes.max(1), self.bits);
            // SAFETY: `stopped` reads a flag.
            let stopped = unsafe { self.loans.with(py, |l| l.stopped()) };
            // SAFETY: `push` moves a loan in; no Python runs and nothing is dropped.
            let record =
                |bin, handle, object| unsafe { self.loans.with(py, |l| l.push(bin, handle, object)) };
            return crate::cl_pooled::hand_out(py, record, block, self.device(), bytes, bin, stopped);
        }
        // A block released from Python first (no lock), then one the pool holds, then the
        // device (after the cache went back to the pool).
        if let Some(object) = core.take(py, &self.core, bytes) {
            return object;
        }
        core.flush(py);
        let block = self.held_or_new(py, bytes)?;
        new_object(py, &self.core, block, bytes)
    }

    /// A block the pool holds (no device call, so no GIL bookkeeping), else a new one
    /// with the GIL released while the device allocates.
    fn held_or_new(&self, py: Python<'_>, bytes: usize) -> PyResult<gpubuf::PooledBuffer<GilAllocator>> {
        match self.pool().allocate_held(bytes) {
            Some(b) => Ok(b),
            None => holding_gil(py, || self.pool().allocate(bytes)).py(),
        }
    }

    fn array(
        &self,
        py: Python<'_>,
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
        zero: bool,
    ) -> PyResult<AnyArray> {
        let d = dtype.map_or(Ok(DType::F64), parse_dtype)?;
        let shape = shape_arg(shape)?;
        self.settle(py);
        let pool = self.pool().clone();
        let array = py
            .detach(move || {
                let device = pool.allocator().device.clone();
                with_dtype!(d, T => {
                    let a = if zero {
                        pool.zeros::<Device, T>(&device, &shape)
                    } else {
                        pool.empty::<Device, T>(&device, &shape, Order::C)
                    };
                    a.map(T::wrap)
                })
            })
            .py()?;
        Ok(array)
    }
}

/// How many device allocations of ``MemoryPool.allocate`` this thread made with the GIL
/// released (a pool hit makes none).
#[pyfunction]
pub fn _pool_gil_releases() -> u64 {
    crate::gil::releases()
}
