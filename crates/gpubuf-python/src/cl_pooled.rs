//! Blocks of a pool made from pyopencl objects, handed to pyopencl: each block (an OpenCL
//! buffer of its own in such a pool) goes out as a `pyopencl.Buffer` over the block's own
//! `cl_mem` (with a reference of its own), whose class is then set to
//! `gpubuf.pyopencl.PooledBuffer` (pyopencl's `PooledBuffer` methods).
//!
//! The pool keeps each object it lent ([`Loans`]) and takes the block back once only the
//! pool still refers to the object (its reference count is 1): a request of the block's
//! size class then gets the same object again, with no OpenCL call and no Python object
//! made, and every other block goes back to the pool when the pool looks ([`Loans::reclaim`]:
//! before its counters are read, as the loans outgrow the live objects by a sixteenth, so
//! the pool grows by at most that much for objects nobody uses, and before a request
//! fails for want of memory). An OpenCL runtime launches kernels over a memory object it has
//! seen faster than over a new one, so pyopencl code runs on these blocks as fast as on
//! pyopencl's own pool. `release()` gives the block back at once
//! ([`_pyopencl_release`]); a pool that ends while objects are still lent sets their
//! class to one whose `__del__` gives the block back.
//!
//! The blocks on loan are kept by their `cl_mem` handle with the object that holds them:
//! `to_gpubuf` turns an entry into a uint8 gpubuf array owning the block
//! ([`_pyopencl_block_array`]), shared with the views it makes; the block then returns to
//! the pool once the pyopencl object and every such view are gone (such an object is
//! never lent again).

use crate::dtype::{AnyArray, Wrap};
use crate::errors::{invalid, IntoPy};
use crate::gil::{sole_reference, GilAllocator};
use gpubuf::pool::bin_number;
use gpubuf::{Device, MemoryPool, NDBuffer, Order, PooledBuffer};
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use std::collections::HashMap;

/// What a handed-out buffer holds.
enum Lent {
    /// The block, its device and the bytes asked for.
    Block(PooledBuffer<GilAllocator>, Device, usize),
    /// The whole block as a uint8 array, and the bytes asked for.
    Array(AnyArray, usize),
}

/// A block on loan and the address of the object it is lent to.
struct Entry {
    lent: Lent,
    owner: usize,
}

/// The blocks on loan, by `cl_mem` handle (unique while lent: the pool holds the buffer
/// until the block comes back).
static LENT: Mutex<Option<HashMap<usize, Entry>>> = Mutex::new(None);

/// `pyopencl.Buffer.from_int_ptr`, `gpubuf.pyopencl.PooledBuffer`, the class of objects
/// that outlive their pool and `pyopencl.MemoryObject.release`, looked up once.
static NAMES: PyOnceLock<[Py<PyAny>; 4]> = PyOnceLock::new();

fn names(py: Python<'_>) -> PyResult<&[Py<PyAny>; 4]> {
    NAMES.get_or_try_init(py, || {
        let cl = py.import("pyopencl")?;
        let from_int_ptr = cl.getattr("Buffer")?.getattr("from_int_ptr")?.unbind();
        let release = cl.getattr("MemoryObject")?.getattr("release")?.unbind();
        let module = py.import("gpubuf.pyopencl")?;
        let class = module.getattr("PooledBuffer")?.unbind();
        Ok([from_int_ptr, class, module.getattr("_OrphanPooledBuffer")?.unbind(), release])
    })
}

/// Takes the entry of `handle` out when it is lent to `owner` (any owner: None).
fn remove(handle: usize, owner: Option<usize>) -> Option<Lent> {
    let mut map = LENT.lock();
    let map = map.as_mut()?;
    if owner.is_some_and(|o| map.get(&handle).is_none_or(|e| e.owner != o)) {
        return None;
    }
    map.remove(&handle).map(|e| e.lent)
}

/// An object a pool lent.
struct Loan {
    bin: usize,
    handle: usize,
    object: Py<PyAny>,
}

/// The objects a pool made from pyopencl objects lent (touched with the GIL held).
#[derive(Default)]
pub struct Loans {
    /// Newest last.
    loans: Vec<Loan>,
    /// Loans past which the next request that misses reclaims them all.
    reclaim_at: usize,
    /// Requests served by a lent object again since the counters were last read.
    hits: u64,
    /// The pool stopped holding: nothing is kept, and every object lent from now on gives
    /// its block back at its own end (the class of [`Loans::stop`]).
    stopped: bool,
}

/// Loans scanned for a free object of the request's class before the pool is asked.
pub const WINDOW: usize = 8;

impl Loans {
    /// An object of the size class of `bytes` (pool bits `bits`) that only the pool
    /// refers to, lent again for `bytes` bytes; None when the newest [`WINDOW`] loans have
    /// none. Loans found there whose block went back already (`release()`) leave the list;
    /// their objects are returned in `stale`, for the caller to drop after the cell.
    pub fn take(
        &mut self,
        py: Python<'_>,
        bits: u32,
        bytes: usize,
        stale: &mut Vec<Py<PyAny>>,
    ) -> Option<Py<PyAny>> {
        if self.stopped {
            return None;
        }
        let bin = bin_number(bytes.max(1), bits);
        let mut map = LENT.lock();
        let map = map.get_or_insert_with(HashMap::new);
        let mut i = self.loans.len();
        let start = i.saturating_sub(WINDOW);
        while i > start {
            i -= 1;
            let l = &self.loans[i];
            let owner = l.object.as_ptr() as usize;
            let Some(entry) = map.get_mut(&l.handle).filter(|e| e.owner == owner) else {
                stale.push(self.loans.remove(i).object);
                continue;
            };
            if l.bin != bin || !sole_reference(&l.object) {
                continue;
            }
            let Lent::Block(block, _, size) = &mut entry.lent else { continue };
            if !block.reuse(bytes) {
                continue;
            }
            *size = bytes;
            let loan = self.loans.remove(i);
            let object = loan.object.clone_ref(py);
            self.loans.push(loan);
            self.hits = self.hits.wrapping_add(1);
            return Some(object);
        }
        None
    }

    /// Records `object`, lent with the block of `handle` (size class `bin`).
    pub fn push(&mut self, bin: usize, handle: usize, object: Py<PyAny>) {
        self.loans.push(Loan { bin, handle, object });
    }

    /// Whether the pool stopped holding ([`Loans::stop`]).
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// The pool stops holding: nothing is lent again, and the objects still lent are
    /// returned, for the caller to give the class whose `__del__` gives their block back
    /// ([`finish_orphans`], after the cell), as pyopencl's pool frees a block when its
    /// buffer ends once it stopped holding.
    pub fn stop(&mut self) -> Vec<Py<PyAny>> {
        self.stopped = true;
        self.orphan()
    }

    /// Whether a request that the loans did not serve should reclaim first (they outgrew
    /// the live objects counted at the last reclaim by a sixteenth, or by four).
    pub fn due(&self) -> bool {
        self.loans.len() >= self.reclaim_at
    }

    /// Gives back the blocks of the objects only the pool refers to, and of those whose
    /// block went back already (`release()`); returns the counted hits. The blocks and
    /// objects are dropped by the caller, after the cell.
    pub fn reclaim(&mut self) -> Reclaimed {
        let mut out = Vec::new();
        let mut map = LENT.lock();
        let mut kept = Vec::with_capacity(self.loans.len());
        for l in self.loans.drain(..) {
            let ours = map
                .as_ref()
                .and_then(|m| m.get(&l.handle))
                .is_some_and(|e| e.owner == l.object.as_ptr() as usize);
            if ours && !sole_reference(&l.object) {
                kept.push(l);
                continue;
            }
            let lent =
                if ours { map.as_mut().and_then(|m| m.remove(&l.handle)).map(|e| e.lent) } else { None };
            out.push((lent, l.object));
        }
        drop(map);
        self.loans = kept;
        self.reclaim_at = self.loans.len().saturating_add((self.loans.len() / 16).max(4));
        Reclaimed { freed: out, hits: std::mem::take(&mut self.hits) }
    }

    /// The objects lent, for the garbage collector: a cycle through one of them and the
    /// pool (an attribute of the buffer naming the pool) is then found and freed.
    pub fn objects(&self) -> impl Iterator<Item = &Py<PyAny>> {
        self.loans.iter().map(|l| &l.object)
    }

    /// The pool ends: the objects still in use get the class whose `__del__` gives their
    /// block back; returns every object, for the caller to drop after the cell.
    pub fn orphan(&mut self) -> Vec<Py<PyAny>> {
        self.loans.drain(..).map(|l| l.object).collect()
    }
}

/// Clears the attributes a previous borrower set on an object lent again, so that every
/// request gets an object as fresh as pyopencl's (a new object for every request). The
/// object's dictionary is made once (if it had none) and kept, so a reuse pays a lookup
/// and a size check.
pub fn forget_attributes(object: &Bound<'_, PyAny>) {
    use pyo3::ffi;
    // SAFETY: a live object, the GIL held; `PyObject_GenericGetDict` returns a new
    // reference to the instance dictionary (made if missing), or NULL with an exception
    // set (an object without one: nothing to forget), which is cleared; the reference is
    // released once. Clearing may run Python code (values' finalizers): no cell is held.
    unsafe {
        let d = ffi::PyObject_GenericGetDict(object.as_ptr(), std::ptr::null_mut());
        if d.is_null() {
            ffi::PyErr_Clear();
            return;
        }
        if ffi::PyDict_Size(d) > 0 {
            ffi::PyDict_Clear(d);
        }
        ffi::Py_DECREF(d);
    }
}

/// What [`Loans::reclaim`] took back: blocks and objects to drop outside the cell, and the
/// hits to count.
pub struct Reclaimed {
    freed: Vec<(Option<Lent>, Py<PyAny>)>,
    hits: u64,
}

/// Drops what [`Loans::reclaim`] returned and counts the hits in `pool`'s stats.
pub fn finish_reclaim(pool: &MemoryPool<GilAllocator>, r: Reclaimed) {
    drop(r.freed);
    if r.hits > 0 {
        pool.count_hits(r.hits);
    }
}

/// Gives the objects of an ended pool (from [`Loans::orphan`]), or of one that stopped
/// holding ([`Loans::stop`]), the class whose `__del__` gives their block back, unless only
/// the pool refers to them (their block goes back now).
pub fn finish_orphans(py: Python<'_>, objects: Vec<Py<PyAny>>) {
    if objects.is_empty() {
        return;
    }
    let class = names(py).ok().map(|n| n[2].clone_ref(py));
    for object in objects {
        let handle = object.bind(py).getattr("int_ptr").ok().and_then(|h| h.extract::<usize>().ok());
        if sole_reference(&object) || class.is_none() {
            if let Some(h) = handle {
                drop(remove(h, Some(object.as_ptr() as usize)));
            }
        } else if let Some(class) = &class {
            set_class(object.bind(py), class.bind(py));
        }
        drop(object);
    }
}

/// Gives `object` the class `class` past `PooledBuffer.__setattr__` (which refuses it to
/// users); an object that cannot take it keeps its own.
fn set_class(object: &Bound<'_, PyAny>, class: &Bound<'_, PyAny>) {
    use pyo3::ffi;
    let name = pyo3::types::PyString::new(object.py(), "__class__");
    // SAFETY: live objects under the GIL; the generic setter is what `object.__setattr__`
    // runs (it checks the layouts agree and raises otherwise, an error cleared here).
    unsafe {
        if ffi::PyObject_GenericSetAttr(object.as_ptr(), name.as_ptr(), class.as_ptr()) != 0 {
            ffi::PyErr_Clear();
        }
    }
}

/// `block` (of `size` bytes asked for; an OpenCL buffer of its own; of size class `bin`)
/// as a `gpubuf.pyopencl.PooledBuffer` over the block's `cl_mem`, recorded in `loans`;
/// for a pool that `stopped` holding, of the subclass whose `__del__` gives the block back.
///
/// # Errors
/// `ImportError` without pyopencl; `DeviceMismatchError` off OpenCL; pyopencl's errors.
/// The block goes back to the pool on an error.
pub fn hand_out(
    py: Python<'_>,
    loans: impl FnOnce(usize, usize, Py<PyAny>),
    block: PooledBuffer<GilAllocator>,
    device: Device,
    size: usize,
    bin: usize,
    stopped: bool,
) -> PyResult<Py<PyAny>> {
    let handle = crate::pyopencl::cl_mem(block.memory())?;
    if block.offset() != 0 {
        return Err(invalid("a block of a pool for pyopencl starts inside its buffer (not expected)"));
    }
    let [from_int_ptr, kept, ended, _] = names(py)?;
    let class = if stopped { ended } else { kept };
    // pyopencl takes a reference of its own (retain=True): the pool's stays with the block.
    let buf = from_int_ptr.call1(py, (handle, true))?;
    buf.bind(py).setattr("__class__", class.bind(py))?;
    let entry = Entry { lent: Lent::Block(block, device, size), owner: buf.as_ptr() as usize };
    // A handle is lent once at a time: nothing is replaced.
    let old = LENT.lock().get_or_insert_with(HashMap::new).insert(handle, entry);
    drop(old);
    if !stopped {
        loans(bin, handle, buf.clone_ref(py));
    }
    Ok(buf)
}

/// ``release()`` of a `gpubuf.pyopencl.PooledBuffer` (and the end of one whose pool
/// ended): gives its block back to the pool, then releases the object's own reference to
/// the buffer with pyopencl's ``MemoryObject.release``: the object then holds no reference
/// to the block's buffer, and a second ``release()`` fails. As with pyopencl's own pooled
/// buffers, a released object must not be used again (pyopencl still passes its old handle
/// to OpenCL).
///
/// Raises ``InvalidArgumentError`` for any other object, and pyopencl's ``LogicError`` for
/// one released already (its block went back the first time). An object whose own
/// reference pyopencl's base class released (`pyopencl.MemoryObject.release(obj)`) still
/// holds its block, which the pool keeps alive: the first ``release()`` gives it back.
///
/// # Errors
/// As the docstring says.
#[pyfunction]
pub fn _pyopencl_release(buf: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = buf.py();
    // Only objects of those very classes (made by `hand_out`, whose `int_ptr` is pyopencl's
    // own descriptor).
    let names = names(py)?;
    let t = buf.get_type();
    if !(t.is(names[1].bind(py)) || t.is(names[2].bind(py))) {
        return Err(invalid("not a buffer of a gpubuf pool"));
    }
    let handle = buf.getattr(pyo3::intern!(py, "int_ptr")).ok().and_then(|h| h.extract::<usize>().ok());
    let gave_back = handle.and_then(|h| remove(h, Some(buf.as_ptr() as usize))).is_some();
    match names[3].call1(py, (buf,)) {
        // The object's own reference went already, through pyopencl's base class
        // (`pyopencl.MemoryObject.release(obj)`): its block (which the pool kept alive) has
        // now gone back, and this first `release()` of gpubuf's succeeds.
        Err(e) if gave_back && is_logic_error(py, &e) => Ok(()),
        r => r.map(drop),
    }
}

/// Whether `e` is pyopencl's `LogicError`.
fn is_logic_error(py: Python<'_>, e: &PyErr) -> bool {
    py.import("pyopencl")
        .and_then(|cl| cl.getattr("LogicError"))
        .is_ok_and(|t| e.get_type(py).is_subclass(&t).unwrap_or(false))
}

/// The block a handed-out buffer holds, as a uint8 gpubuf array of the whole block (the
/// buffer's ``size``: the request padded to its size class), sharing its memory, and the
/// bytes asked for (the first call turns the block into that array).
///
/// Raises ``InvalidArgumentError`` for a buffer that holds no block of a gpubuf pool
/// (released, or not one of these).
///
/// # Errors
/// As the docstring says.
#[pyfunction]
pub fn _pyopencl_block_array(buf: &Bound<'_, PyAny>) -> PyResult<(AnyArray, usize)> {
    let handle = crate::pyopencl::buffer_handle(buf)?;
    let owner = buf.as_ptr() as usize;
    let no_block = || invalid("the buffer holds no block of a gpubuf pool (or was released)");
    let lent = remove(handle, Some(owner)).ok_or_else(no_block)?;
    // `into_buffer` fails only for a backend of another memory type, which the pool's own
    // device never is.
    let (array, asked) = match lent {
        Lent::Array(a, asked) => (a, asked),
        Lent::Block(block, device, asked) => {
            let whole = block.block_size();
            let array = block
                .into_block_buffer(&device)
                .and_then(|b| NDBuffer::<Device, u8>::from_buffer(b, &[whole], Order::C))
                .map(u8::wrap)
                .py()?;
            (array, asked)
        }
    };
    let entry = Entry { lent: Lent::Array(array.clone(), asked), owner };
    let old = LENT.lock().get_or_insert_with(HashMap::new).insert(handle, entry);
    drop(old);
    Ok((array, asked))
}
