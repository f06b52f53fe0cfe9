//! Blocks of a pool made from pyopencl objects, handed to pyopencl as
//! `gpubuf.pyopencl.PooledBuffer` objects: a `pyopencl.Buffer` over the block's `cl_mem`
//! (each block of such a pool is an OpenCL buffer of its own), whose class is then set to
//! that subclass so that its `__del__` gives the block back.
//!
//! The block itself stays here, in a table keyed by the object's address, from
//! [`hand_out`] until [`_pyopencl_give_back`] (the object's `release()` or `__del__`,
//! which runs before its memory is freed, so an address is never found for another
//! object). `to_gpubuf` turns the entry into a uint8 gpubuf array owning the block
//! ([`_pyopencl_block_array`]), shared with the views it makes; the block then returns to
//! the pool when the object and every such view are gone.

use crate::dtype::{AnyArray, Wrap};
use crate::errors::IntoPy;
use crate::gil::GilAllocator;
use gpubuf::{Device, NDBuffer, Order, PooledBuffer};
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use std::collections::HashMap;

/// What a handed-out object holds.
enum Lent {
    /// The block, its device and the bytes asked for.
    Block(PooledBuffer<GilAllocator>, Device, usize),
    /// The block as a uint8 array of the bytes asked for.
    Array(AnyArray),
}

static LENT: Mutex<Option<HashMap<usize, Lent>>> = Mutex::new(None);

/// `pyopencl.Buffer.from_int_ptr` and `gpubuf.pyopencl.PooledBuffer`, looked up once.
static NAMES: PyOnceLock<(Py<PyAny>, Py<PyAny>)> = PyOnceLock::new();

fn names(py: Python<'_>) -> PyResult<&(Py<PyAny>, Py<PyAny>)> {
    NAMES.get_or_try_init(py, || {
        let from_int_ptr = py.import("pyopencl")?.getattr("Buffer")?.getattr("from_int_ptr")?.unbind();
        let class = py.import("gpubuf.pyopencl")?.getattr("PooledBuffer")?.unbind();
        Ok((from_int_ptr, class))
    })
}

/// `block` (of `size` bytes asked for, the whole OpenCL buffer of its own) as a
/// `gpubuf.pyopencl.PooledBuffer`.
///
/// # Errors
/// `ImportError` without pyopencl; `DeviceMismatchError` off OpenCL; pyopencl's errors.
pub fn hand_out(
    py: Python<'_>,
    block: PooledBuffer<GilAllocator>,
    device: Device,
    size: usize,
) -> PyResult<Py<PyAny>> {
    let handle = crate::pyopencl::cl_mem(block.memory())?;
    let (from_int_ptr, class) = names(py)?;
    // pyopencl retains the handle for its object; the pool keeps its own reference.
    let buf = from_int_ptr.call1(py, (handle, true))?;
    buf.bind(py).setattr("__class__", class.bind(py))?;
    LENT.lock()
        .get_or_insert_with(HashMap::new)
        .insert(buf.as_ptr() as usize, Lent::Block(block, device, size));
    Ok(buf)
}

/// Gives back the block a handed-out object holds (its ``release()`` and ``__del__``);
/// whether it held one (False once given back).
#[pyfunction]
pub fn _pyopencl_give_back(buf: &Bound<'_, PyAny>) -> bool {
    let entry = LENT.lock().as_mut().and_then(|m| m.remove(&(buf.as_ptr() as usize)));
    // Dropped with the table unlocked: the block's return may free device memory.
    entry.is_some()
}

/// The block a handed-out object holds, as a uint8 gpubuf array of the bytes asked for,
/// sharing its memory (the first call turns the block into that array).
///
/// Raises ``InvalidArgumentError`` for an object that holds no block (given back, or not
/// one of these).
///
/// # Errors
/// As the docstring says.
#[pyfunction]
pub fn _pyopencl_block_array(buf: &Bound<'_, PyAny>) -> PyResult<AnyArray> {
    let key = buf.as_ptr() as usize;
    let mut lent = LENT.lock();
    let table = lent.get_or_insert_with(HashMap::new);
    let entry = table.remove(&key).ok_or_else(|| crate::errors::invalid("the pooled buffer was released"))?;
    let array = match entry {
        Lent::Array(a) => a,
        Lent::Block(block, device, size) => {
            let made = block
                .into_buffer(&device)
                .and_then(|b| NDBuffer::<Device, u8>::from_buffer(b, &[size], Order::C))
                .map(u8::wrap);
            match made {
                Ok(a) => a,
                Err(e) => return Err(e).py(),
            }
        }
    };
    table.insert(key, Lent::Array(array.clone()));
    Ok(array)
}
