//! `gpubuf.PooledBuffer`: a block on loan from a `MemoryPool` (pyopencl's
//! `PooledBuffer`), seen as an `NDBuffer` by `as_ndbuffer`.

use crate::args::shape_arg;
use crate::backend::PyBackend;
use crate::dtype::{parse_dtype, with_dtype, AnyArray, Wrap};
use crate::errors::{invalid, IntoPy};
use crate::gil::GilAllocator;
use gpubuf::{DType, Device, Order, PooledBuffer};
use parking_lot::Mutex;
use pyo3::prelude::*;

/// A block on loan from a ``MemoryPool``: ``size`` bytes (pyopencl's ``PooledBuffer``).
/// ``release()`` returns it (a second ``release()`` raises ``InvalidArgumentError``); so
/// does leaving a ``with`` block or dropping the last reference.
#[pyclass(name = "PooledBuffer", module = "gpubuf", frozen, freelist = 64)]
pub struct PyPooledBuffer {
    pub(crate) block: Mutex<Option<PooledBuffer<GilAllocator>>>,
    pub(crate) size: usize,
    pub(crate) device: Device,
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
    fn block_size(&self) -> Option<usize> {
        self.block.lock().as_ref().map(|b| b.block_size())
    }

    /// The block's OpenCL buffer handle (``cl_mem``), as pyopencl's ``int_ptr``: only for a
    /// block that starts its buffer (every block of a pool made from pyopencl objects).
    ///
    /// Raises ``InvalidArgumentError`` once released, for a block carved from inside a
    /// larger buffer, and ``DeviceMismatchError`` off OpenCL.
    #[getter]
    fn int_ptr(&self) -> PyResult<usize> {
        let guard = self.block.lock();
        let block = guard.as_ref().ok_or_else(|| invalid("the pooled buffer was already released"))?;
        if block.offset() != 0 {
            return Err(invalid(format!(
                "this block starts {} bytes into its OpenCL buffer: it has no cl_mem of its own \
                 (pools made from pyopencl objects give every block its own)",
                block.offset()
            )));
        }
        crate::pyopencl::cl_mem(block.memory())
    }

    /// Whether the block went back to the pool.
    #[getter]
    fn released(&self) -> bool {
        self.block.lock().is_none()
    }

    /// The backend of the pool the block came from.
    #[getter]
    fn backend(&self) -> PyBackend {
        PyBackend::new(self.device.clone())
    }

    /// Returns the block to the pool now.
    ///
    /// Raises ``InvalidArgumentError`` when it was already released.
    fn release(&self) -> PyResult<()> {
        let block = self.block.lock().take();
        match block {
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
    fn as_ndbuffer(&self, shape: &Bound<'_, PyAny>, dtype: Option<&Bound<'_, PyAny>>) -> PyResult<AnyArray> {
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
        let mut guard = self.block.lock();
        let block = guard.take().ok_or_else(|| invalid("the pooled buffer was already released"))?;
        let buffer = block.into_buffer(&self.device).py()?;
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
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        drop(self.block.lock().take());
        false
    }

    fn __repr__(&self) -> String {
        match self.block_size() {
            Some(b) => format!("gpubuf.PooledBuffer(size={}, block_size={b})", self.size),
            None => format!("gpubuf.PooledBuffer(size={}, released)", self.size),
        }
    }
}
