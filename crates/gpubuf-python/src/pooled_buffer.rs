//! `gpubuf.PooledBuffer`: a block on loan from a `MemoryPool` (pyopencl's
//! `PooledBuffer`), seen as an `NDBuffer` by `as_ndbuffer`; and [`PoolCore`], the part of a
//! `MemoryPool` its blocks point back to.
//!
//! A hit from Python (`allocate`, then `release()`) takes neither the pool's lock nor a
//! new Python object: `release()` puts the object, block and all, in its pool's cache
//! ([`CACHED`] of them at most), and the next request of the same size class gets the
//! same object back when nothing else refers to it any more (else its block, in a new
//! object). Cached blocks count as active in the pool; everything that reads the pool's
//! counters or hands memory back ([`PoolCore::flush`]) returns them first, and so does a
//! request the cache cannot serve, before the pool may grow: the cache never makes the
//! pool hold more than it would without it.

use crate::args::shape_arg;
use crate::backend::PyBackend;
use crate::dtype::{parse_dtype, with_dtype, AnyArray, Wrap};
use crate::errors::{invalid, IntoPy};
use crate::gil::{sole_reference, GilAllocator, GilCell};
use gpubuf::pool::bin_number;
use gpubuf::{DType, Device, MemoryPool, Order, PooledBuffer};
use pyo3::prelude::*;

/// Released objects a pool keeps for its next requests: enough for the temporaries of an
/// array expression, few enough to scan on every request.
pub const CACHED: usize = 8;

/// What a `PooledBuffer` holds (touched only with the GIL held).
struct Slot {
    /// The block; None once it went back to the pool or to an array.
    block: Option<PooledBuffer<GilAllocator>>,
    /// The bytes asked for.
    size: usize,
    /// On loan (not released). A released object may still hold its block while it
    /// waits in its pool's cache.
    live: bool,
}

/// A block on loan from a ``MemoryPool``: ``size`` bytes (pyopencl's ``PooledBuffer``).
/// ``release()`` returns it (a second ``release()`` raises ``InvalidArgumentError``); so
/// does leaving a ``with`` block or dropping the last reference.
#[pyclass(name = "PooledBuffer", module = "gpubuf", frozen)]
pub struct PyPooledBuffer {
    slot: GilCell<Slot>,
    /// The core of the `MemoryPool` it came from: a Python reference, counted without
    /// atomics.
    core: Py<PoolCore>,
}

/// A cached released object and the size class of its block.
struct Entry {
    bin: usize,
    object: Py<PyPooledBuffer>,
}

/// The cache of released objects.
#[derive(Default)]
struct Cache {
    /// Newest last.
    entries: Vec<Entry>,
    /// Requests served from the cache since the last flush (pool hits).
    hits: u64,
    /// No caching: the pool stopped holding, or its `MemoryPool` object is gone.
    off: bool,
}

/// A `MemoryPool`'s Rust pool and its cache of released blocks (a Python object so that a
/// block's reference to it is counted without atomics; never seen from Python).
#[pyclass(module = "gpubuf", frozen)]
pub struct PoolCore {
    /// The pool.
    pub pool: MemoryPool<GilAllocator>,
    /// The pool's `leading_bits_in_bin_id`.
    bits: u32,
    cache: GilCell<Cache>,
}

impl PoolCore {
    /// The core of `pool` (of `leading_bits_in_bin_id` `bits`), its cache empty.
    pub fn new(pool: MemoryPool<GilAllocator>, bits: u32) -> Self {
        let cache = Cache { entries: Vec::with_capacity(CACHED), ..Cache::default() };
        PoolCore { pool, bits, cache: GilCell::new(cache) }
    }

    /// A cached object of the size class of `bytes`, on loan again for `bytes` bytes (or
    /// a new object over its block when the old one is still referred to), or None.
    pub fn take(&self, py: Python<'_>, core: &Py<PoolCore>, bytes: usize) -> Option<PyResult<Py<PyAny>>> {
        let bin = bin_number(bytes.max(1), self.bits);
        // SAFETY: moves an entry out of the cache; nothing runs Python or is dropped.
        let entry = unsafe {
            self.cache.with(py, |c| {
                let i = c.entries.iter().rposition(|e| e.bin == bin)?;
                Some(c.entries.swap_remove(i))
            })
        }?;
        let object = entry.object;
        let alone = sole_reference(&object);
        // SAFETY: only the slot's fields change and the block may move out; nothing runs
        // Python or is dropped.
        let out = unsafe {
            object.get().slot.with(py, |s| {
                if !s.block.as_mut().is_some_and(|b| b.reuse(bytes)) {
                    return Err(s.block.take());
                }
                // Only the cache refers to the object: it goes out again as it is.
                if alone {
                    (s.size, s.live) = (bytes, true);
                    return Ok(None);
                }
                Ok(s.block.take())
            })
        };
        if out.is_ok() {
            // SAFETY: counts a hit.
            unsafe { self.cache.with(py, |c| c.hits = c.hits.wrapping_add(1)) };
        }
        match out {
            Ok(None) => Some(Ok(object.into_any())),
            // Another reference to the released object remains: the block goes out in a
            // new object.
            Ok(Some(block)) => {
                drop(object);
                Some(new_object(py, core, block, bytes))
            }
            // Not expected (only reusable blocks are kept): back to the pool.
            Err(block) => {
                drop((object, block));
                None
            }
        }
    }

    /// Keeps the released `object` (holding its block) for the next request of its size
    /// class, or gives its block back to the pool.
    fn keep(&self, py: Python<'_>, object: Py<PyPooledBuffer>, bin: usize) {
        // SAFETY: moves the entry in (or returns it) and moves an evicted one out, both
        // dropped after `with` returns.
        let (rest, evicted) = unsafe {
            self.cache.with(py, |c| {
                if c.off {
                    return (Some(object), None);
                }
                let evicted = (c.entries.len() >= CACHED).then(|| c.entries.remove(0));
                c.entries.push(Entry { bin, object });
                (None, evicted)
            })
        };
        for o in rest.into_iter().chain(evicted.map(|e| e.object)) {
            drop(o.get().take_block(py));
        }
    }

    /// Returns the cached blocks to the pool and counts the cache's hits in its stats.
    pub fn flush(&self, py: Python<'_>) {
        loop {
            // SAFETY: moves one entry out; it is handled after `with` returns.
            let entry = unsafe { self.cache.with(py, |c| c.entries.pop()) };
            let Some(e) = entry else { break };
            drop(e.object.get().take_block(py));
        }
        // SAFETY: reads and resets a counter.
        let hits = unsafe { self.cache.with(py, |c| std::mem::take(&mut c.hits)) };
        if hits > 0 {
            self.pool.count_hits(hits);
        }
    }

    /// Flushes the cache and caches nothing from now on (a pool that stopped holding, or
    /// whose `MemoryPool` object is gone).
    pub fn stop_caching(&self, py: Python<'_>) {
        // SAFETY: sets a flag.
        unsafe { self.cache.with(py, |c| c.off = true) };
        self.flush(py);
    }
}

/// A new `PooledBuffer` object on loan for `bytes` bytes of `block`.
///
/// # Errors
/// Python's, creating the object (the block then goes back to the pool).
pub fn new_object(
    py: Python<'_>,
    core: &Py<PoolCore>,
    block: PooledBuffer<GilAllocator>,
    bytes: usize,
) -> PyResult<Py<PyAny>> {
    let slot = Slot { block: Some(block), size: bytes, live: true };
    let object = PyPooledBuffer { slot: GilCell::new(slot), core: core.clone_ref(py) };
    Ok(object.into_pyobject(py)?.into_any().unbind())
}

impl PyPooledBuffer {
    fn device(&self) -> Device {
        self.core.get().pool.allocator().device.clone()
    }

    /// Reads the slot.
    fn read<R>(&self, py: Python<'_>, f: impl FnOnce(&Slot) -> R) -> R {
        // SAFETY: `f` gets a shared reference, so it cannot drop or move anything out, and
        // every caller's `f` only reads numbers and handles (no Python).
        unsafe { self.slot.with(py, |s| f(s)) }
    }

    /// The block, taken out whether on loan or released (the object counts as released).
    fn take_block(&self, py: Python<'_>) -> Option<PooledBuffer<GilAllocator>> {
        // SAFETY: moves the block out; nothing runs Python or is dropped.
        unsafe {
            self.slot.with(py, |s| {
                s.live = false;
                s.block.take()
            })
        }
    }

    /// `release()` and `__exit__`: ends the loan and hands the object to its pool's cache
    /// (or its block to the pool); false when it had ended already.
    fn give_back(slf: &Bound<'_, Self>) -> bool {
        let (py, this) = (slf.py(), slf.get());
        // SAFETY: sets a flag and reads numbers (`reuse` with the block's own size only
        // checks that the block may be reused); nothing runs Python or is dropped.
        let ended = unsafe {
            this.slot.with(py, |s| {
                if !std::mem::replace(&mut s.live, false) {
                    return None;
                }
                let size = s.size;
                Some(s.block.as_mut().is_some_and(|b| b.reuse(size)).then_some(size))
            })
        };
        match ended {
            None => false,
            Some(Some(size)) => {
                let core = this.core.get();
                core.keep(py, slf.clone().unbind(), bin_number(size.max(1), core.bits));
                true
            }
            Some(None) => {
                drop(this.take_block(py));
                true
            }
        }
    }
}

#[pymethods]
impl PyPooledBuffer {
    /// The bytes asked for.
    #[getter]
    fn size(&self, py: Python<'_>) -> usize {
        self.read(py, |s| s.size)
    }

    /// The block's real size (the request rounded up to its size class), or None once
    /// released.
    #[getter]
    fn block_size(&self, py: Python<'_>) -> Option<usize> {
        self.read(py, |s| s.block.as_ref().filter(|_| s.live).map(PooledBuffer::block_size))
    }

    /// The block's OpenCL buffer handle (``cl_mem``), as pyopencl's ``int_ptr``: only for a
    /// block that starts its buffer (every block of a pool made from pyopencl objects).
    ///
    /// Raises ``InvalidArgumentError`` once released, for a block carved from inside a
    /// larger buffer, and ``DeviceMismatchError`` off OpenCL.
    #[getter]
    fn int_ptr(&self, py: Python<'_>) -> PyResult<usize> {
        // The Python errors are built after the slot is read.
        let block = self.read(py, |s| {
            let b = s.block.as_ref().filter(|_| s.live)?;
            Some((b.offset(), crate::pyopencl::raw_cl_mem(b.memory())))
        });
        let (offset, cl_mem) = block.ok_or_else(|| invalid("the pooled buffer was already released"))?;
        if offset != 0 {
            return Err(invalid(format!(
                "this block starts {offset} bytes into its OpenCL buffer: it has no cl_mem of its own \
                 (pools made from pyopencl objects give every block its own)"
            )));
        }
        cl_mem.ok_or_else(crate::pyopencl::not_opencl)
    }

    /// Whether the block went back to the pool.
    #[getter]
    fn released(&self, py: Python<'_>) -> bool {
        self.read(py, |s| !s.live)
    }

    /// The backend of the pool the block came from.
    #[getter]
    fn backend(&self) -> PyBackend {
        PyBackend::new(self.device())
    }

    /// Returns the block to the pool now.
    ///
    /// Raises ``InvalidArgumentError`` when it was already released.
    fn release(slf: &Bound<'_, Self>) -> PyResult<()> {
        if Self::give_back(slf) {
            Ok(())
        } else {
            Err(invalid("the pooled buffer was already released"))
        }
    }

    /// The block as an array of ``shape`` and ``dtype`` (default uint8) over its first bytes;
    /// the block then belongs to the array (this object counts as released) and returns to
    /// the pool when the array and its views are gone.
    ///
    /// Raises ``LengthMismatchError`` when the array needs more bytes than were asked for,
    /// ``InvalidArgumentError`` when the block was released; the block is unchanged then.
    #[pyo3(signature = (shape, dtype = None))]
    fn as_ndbuffer(
        &self,
        py: Python<'_>,
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<AnyArray> {
        let d = dtype.map_or(Ok(DType::U8), parse_dtype)?;
        let shape = shape_arg(shape)?;
        let need = gpubuf::checked_size(&shape).py()?.checked_mul(d.size());
        let (size, live) = self.read(py, |s| (s.size, s.live));
        if !live {
            return Err(invalid("the pooled buffer was already released"));
        }
        if need.is_none_or(|n| n > size) {
            return Err(crate::errors::to_py(gpubuf::Error::byte_length(
                "pooled buffer",
                need.unwrap_or(usize::MAX),
                size,
                Some(d),
            )));
        }
        let device = self.device();
        let block = self.take_block(py).ok_or_else(|| invalid("the pooled buffer was already released"))?;
        let buffer = block.into_buffer(&device).py()?;
        let array = with_dtype!(d, T => {
            gpubuf::NDBuffer::<Device, T>::from_buffer(buffer, &shape, Order::C).map(T::wrap)
        })
        .py()?;
        Ok(array)
    }

    /// pyopencl's ``bind_to_queue``: a no-op (gpubuf's blocks are not bound to a queue).
    fn bind_to_queue(&self, _queue: &Bound<'_, PyAny>) {}

    /// pyopencl's ``unbind_from_queue``: a no-op.
    fn unbind_from_queue(&self) {}

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// Releases the block (if still held) at the end of a ``with`` block.
    #[pyo3(signature = (*_args))]
    fn __exit__(slf: &Bound<'_, Self>, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        Self::give_back(slf);
        false
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let size = self.size(py);
        match self.block_size(py) {
            Some(b) => format!("gpubuf.PooledBuffer(size={size}, block_size={b})"),
            None => format!("gpubuf.PooledBuffer(size={size}, released)"),
        }
    }
}
