//! Blocks of a pool made from pyopencl objects, handed to pyopencl: each block (an OpenCL
//! buffer of its own in such a pool) goes out as an OpenCL sub-buffer covering the whole
//! block, owned by a `pyopencl.Buffer` whose class is then set to
//! `gpubuf.pyopencl.PooledBuffer` (pyopencl's `PooledBuffer` methods). The sub-buffer's
//! destructor callback reports its end, however it comes (`release()`, garbage collection,
//! pyopencl's own code), and the block goes back to the pool at the pool's next call.
//!
//! The callback may run on a thread of the OpenCL runtime, inside the runtime's release of
//! the sub-buffer: it only records the block's slot number in a list. The blocks
//! themselves are dropped by [`drain`], under the GIL, before every pool operation from
//! Python. A block is keyed by its slot, not by the sub-buffer's handle, which the runtime
//! may give to a new object as soon as the old one is deleted.
//!
//! `to_gpubuf` turns an entry into a uint8 gpubuf array owning the block
//! ([`_pyopencl_block_array`]), shared with the views it makes; the block then returns to
//! the pool once the sub-buffer and every such view are gone.

use crate::dtype::{AnyArray, Wrap};
use crate::errors::{invalid, to_py, IntoPy};
use crate::gil::GilAllocator;
use gpubuf::opencl::opencl3::error_codes::error_text;
use gpubuf::opencl::opencl3::memory as clmem;
use gpubuf::opencl::opencl3::types::{cl_buffer_region, cl_mem};
use gpubuf::{Device, Error, NDBuffer, Order, PooledBuffer};
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

/// What a handed-out sub-buffer holds.
enum Lent {
    /// The block, its device and the bytes asked for.
    Block(PooledBuffer<GilAllocator>, Device, usize),
    /// The block as a uint8 array of the bytes asked for.
    Array(AnyArray),
}

/// The blocks handed out, each in a slot with its sub-buffer's handle; free slots are
/// reused. A slot's number is the serial its sub-buffer's callback reports: the callback
/// fires once, and the slot is freed only by [`drain`] after it did (or where no callback
/// was registered), so a number never names two live sub-buffers.
#[derive(Default)]
struct Table {
    slots: Vec<Option<(Lent, usize)>>,
    free: Vec<usize>,
}

impl Table {
    fn insert(&mut self, entry: (Lent, usize)) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(entry);
                i
            }
            None => {
                self.slots.push(Some(entry));
                self.slots.len() - 1
            }
        }
    }

    fn remove(&mut self, i: usize) -> Option<(Lent, usize)> {
        let entry = self.slots.get_mut(i)?.take()?;
        self.free.push(i);
        Some(entry)
    }
}

static TABLE: Mutex<Table> = Mutex::new(Table { slots: Vec::new(), free: Vec::new() });
/// Slot numbers of sub-buffers the runtime deleted, not yet drained.
static ENDED: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static ANY_ENDED: AtomicBool = AtomicBool::new(false);

/// The sub-buffer destructor callback: records the slot number given at registration.
extern "C" fn ended(_mem: cl_mem, slot: *mut c_void) {
    ENDED.lock().push(slot as usize);
    ANY_ENDED.store(true, Ordering::Release);
}

/// Gives back the blocks of the sub-buffers that ended (with the GIL held; each block is
/// dropped with no lock of this module held).
pub fn drain() {
    if !ANY_ENDED.swap(false, Ordering::AcqRel) {
        return;
    }
    loop {
        let Some(slot) = ENDED.lock().pop() else { break };
        let entry = TABLE.lock().remove(slot);
        drop(entry);
    }
}

/// `pyopencl.Buffer.from_int_ptr` and `gpubuf.pyopencl.PooledBuffer`, looked up once.
static NAMES: PyOnceLock<(Py<PyAny>, Py<PyAny>)> = PyOnceLock::new();

fn names(py: Python<'_>) -> PyResult<&(Py<PyAny>, Py<PyAny>)> {
    NAMES.get_or_try_init(py, || {
        let from_int_ptr = py.import("pyopencl")?.getattr("Buffer")?.getattr("from_int_ptr")?.unbind();
        let class = py.import("gpubuf.pyopencl")?.getattr("PooledBuffer")?.unbind();
        Ok((from_int_ptr, class))
    })
}

/// Releases the reference gpubuf holds to `sub` (its callback then reports it).
fn release(sub: cl_mem) {
    // SAFETY: `sub` is a sub-buffer this module created and still holds the reference of.
    let _ = unsafe { clmem::release_mem_object(sub) };
}

/// `block` (of `size` bytes asked for; an OpenCL buffer of its own) as a
/// `gpubuf.pyopencl.PooledBuffer` over a sub-buffer of the whole block.
///
/// # Errors
/// `ImportError` without pyopencl; `DeviceMismatchError` off OpenCL; driver errors
/// creating the sub-buffer; pyopencl's errors. The block goes back to the pool on an error.
pub fn hand_out(
    py: Python<'_>,
    block: PooledBuffer<GilAllocator>,
    device: Device,
    size: usize,
) -> PyResult<Py<PyAny>> {
    drain();
    let parent = crate::pyopencl::cl_mem(block.memory())?;
    if block.offset() != 0 {
        return Err(invalid("a block of a pool for pyopencl starts inside its buffer (not expected)"));
    }
    let region = cl_buffer_region { origin: 0, size: block.block_size() };
    // SAFETY: `parent` is the live buffer of the block (the pool holds it while the block
    // is lent); the region lies inside it and starts at 0, which every device's base
    // address alignment allows; flags 0 inherit the parent's read-write access.
    let sub = unsafe {
        clmem::create_sub_buffer(
            parent as cl_mem,
            0,
            clmem::CL_BUFFER_CREATE_TYPE_REGION,
            (&raw const region).cast::<c_void>(),
        )
    }
    .map_err(|c| to_py(Error::invalid(format!("clCreateSubBuffer failed: {}", error_text(c)))))?;
    let slot = TABLE.lock().insert((Lent::Block(block, device, size), sub as usize));
    // SAFETY: `sub` is live; `ended` only records the number it is given.
    if let Err(c) = unsafe { clmem::set_mem_object_destructor_callback(sub, ended, slot as *mut c_void) } {
        // No callback: take the entry back here and release the sub-buffer.
        let entry = TABLE.lock().remove(slot);
        release(sub);
        drop(entry);
        return Err(to_py(Error::invalid(format!(
            "clSetMemObjectDestructorCallback failed: {}",
            error_text(c)
        ))));
    }
    let (from_int_ptr, class) = names(py)?;
    // pyopencl takes gpubuf's reference over (retain=False): its object's end is the
    // sub-buffer's, which the callback reports.
    let buf = match from_int_ptr.call1(py, (sub as usize, false)) {
        Ok(b) => b,
        Err(e) => {
            release(sub);
            return Err(e);
        }
    };
    buf.bind(py).setattr("__class__", class.bind(py))?;
    Ok(buf)
}

/// The block a handed-out buffer holds, as a uint8 gpubuf array of the bytes asked for,
/// sharing its memory (the first call turns the block into that array).
///
/// Raises ``InvalidArgumentError`` for a buffer that holds no block of a gpubuf pool
/// (released, or not one of these).
///
/// # Errors
/// As the docstring says.
#[pyfunction]
pub fn _pyopencl_block_array(buf: &Bound<'_, PyAny>) -> PyResult<AnyArray> {
    drain();
    let handle = crate::pyopencl::buffer_handle(buf)?;
    let mut t = TABLE.lock();
    let slot = t
        .slots
        .iter()
        .position(|e| e.as_ref().is_some_and(|(_, h)| *h == handle))
        .ok_or_else(|| invalid("the buffer holds no block of a gpubuf pool (or was released)"))?;
    let Some((entry, handle)) = t.remove(slot) else {
        return Err(invalid("the pooled buffer was released"));
    };
    // `into_buffer` fails only for a backend of another memory type, which the pool's own
    // device never is.
    let array = match entry {
        Lent::Array(a) => a,
        Lent::Block(block, device, size) => block
            .into_buffer(&device)
            .and_then(|b| NDBuffer::<Device, u8>::from_buffer(b, &[size], Order::C))
            .map(u8::wrap)
            .py()?,
    };
    // Back into the same slot, which its sub-buffer's callback names.
    t.free.retain(|&i| i != slot);
    t.slots[slot] = Some((Lent::Array(array.clone()), handle));
    Ok(array)
}
