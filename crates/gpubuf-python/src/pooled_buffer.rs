//! `gpubuf.PooledBuffer`: a block on loan from a `MemoryPool` (pyopencl's
//! `PooledBuffer`), seen as an `NDBuffer` by `as_ndbuffer`.

use crate::args::shape_arg;
use crate::backend::PyBackend;
use crate::dtype::{parse_dtype, with_dtype, AnyArray, Wrap};
use crate::errors::{invalid, IntoPy};
use crate::gil::{GilAllocator, GilCell};
use gpubuf::{DType, Device, Order, PooledBuffer};
use pyo3::prelude::*;

/// A block on loan from a ``MemoryPool``: ``size`` bytes (pyopencl's ``PooledBuffer``).
/// ``release()`` returns it (a second ``release()`` raises ``InvalidArgumentError``); so
/// does leaving a ``with`` block or dropping the last reference.
#[pyclass(name = "PooledBuffer", module = "gpubuf", frozen, freelist = 64)]
pub struct PyPooledBuffer {
    /// The block, None once released (touched only with the GIL held: a hit takes no
    /// lock here).
    pub(crate) block: GilCell<Option<PooledBuffer<GilAllocator>>>,
    pub(crate) size: usize,
    /// The `MemoryPool` it came from, whose `backend` is the block's device: a Python
    /// reference (counted without atomics, unlike a clone of the device), read through the
    /// pool's Python surface (no import of the pool's module here).
    pub(crate) pool: Py<PyAny>,
}

impl PyPooledBuffer {
    fn device(&self, py: Python<'_>) -> PyResult<Device> {
        let backend = self.pool.bind(py).getattr("backend")?;
        Ok(backend.cast::<PyBackend>()?.get().device.clone())
    }

    /// The block, taken out (None when already released).
    fn take(&self, py: Python<'_>) -> Option<PooledBuffer<GilAllocator>> {
        // SAFETY: `Option::take` moves the block out; nothing runs Python or is dropped.
        unsafe { self.block.with(py, Option::take) }
    }
}

#[pymethods]
impl PyPooledBuffer {
    /// The bytes asked for.
    #[getter]
    fn size(&self) -> usize {
        self.size
    }

    /// The block's real size (the request rounded up to its size class), or None once
    /// released.
    #[getter]
    fn block_size(&self, py: Python<'_>) -> Option<usize> {
        // SAFETY: reads a number; nothing runs Python or is dropped.
        unsafe { self.block.with(py, |b| b.as_ref().map(|b| b.block_size())) }
    }

    /// The block's OpenCL buffer handle (``cl_mem``), as pyopencl's ``int_ptr``: only for a
    /// block that starts its buffer (every block of a pool made from pyopencl objects).
    ///
    /// Raises ``InvalidArgumentError`` once released, for a block carved from inside a
    /// larger buffer, and ``DeviceMismatchError`` off OpenCL.
    #[getter]
    fn int_ptr(&self, py: Python<'_>) -> PyResult<usize> {
        // SAFETY: reads the block's offset and its OpenCL handle (plain Rust); the Python
        // errors are built after `with` returns.
        let block = unsafe {
            self.block.with(py, |b| b.as_ref().map(|b| (b.offset(), crate::pyopencl::raw_cl_mem(b.memory()))))
        };
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
        // SAFETY: reads a flag; nothing runs Python or is dropped.
        unsafe { self.block.with(py, |b| b.is_none()) }
    }

    /// The backend of the pool the block came from.
    #[getter]
    fn backend(&self, py: Python<'_>) -> PyResult<PyBackend> {
        Ok(PyBackend::new(self.device(py)?))
    }

    /// Returns the block to the pool now.
    ///
    /// Raises ``InvalidArgumentError`` when it was already released.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        // Taken out, then dropped (back to the pool) outside the cell.
        match self.take(py) {
            Some(b) => {
                b.release();
                Ok(())
            }
            None => Err(invalid("the pooled buffer was already released")),
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
        if need.is_none_or(|n| n > self.size) {
            return Err(crate::errors::to_py(gpubuf::Error::byte_length(
                "pooled buffer",
                need.unwrap_or(usize::MAX),
                self.size,
                Some(d),
            )));
        }
        let device = self.device(py)?;
        let block = self.take(py).ok_or_else(|| invalid("the pooled buffer was already released"))?;
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
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        drop(self.take(py));
        false
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        match self.block_size(py) {
            Some(b) => format!("gpubuf.PooledBuffer(size={}, block_size={b})", self.size),
            None => format!("gpubuf.PooledBuffer(size={}, released)", self.size),
        }
    }
}
