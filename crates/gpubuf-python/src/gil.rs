//! The allocator under `gpubuf.MemoryPool`: a [`Device`] that lets the GIL go while the
//! device allocates.
//!
//! A pool hit (a held block handed out again) takes the pool's lock for well under a
//! microsecond and never calls the device, so `MemoryPool.allocate` keeps the GIL for it:
//! releasing and taking the GIL back costs several times the hit itself. Only when the pool
//! must allocate from the device (a miss: a driver call that may block) is the GIL
//! released, here, for the duration of that call. The pool never holds its lock across an
//! allocator call, so another Python thread may use the pool meanwhile.
//!
//! The GIL is released only on a thread that marked itself with [`holding_gil`] (a call
//! made from Python with the GIL held); calls from code that already released it (the
//! pool's `empty` and `zeros` run under `Python::detach`) allocate directly.

use gpubuf::{Allocator, Device, MemoryInfo, Result};
use pyo3::{Py, Python};
use std::cell::Cell;

thread_local! {
    /// Whether this thread holds the GIL inside a pool call made by [`holding_gil`].
    static HOLDING: Cell<bool> = const { Cell::new(false) };
    /// Device allocations made with the GIL released on this thread (for the tests).
    static RELEASES: Cell<u64> = const { Cell::new(0) };
}

/// Runs `f` (a pool call) with the GIL held by the caller (`_py`), marking this thread so
/// that a device allocation inside it releases the GIL.
pub fn holding_gil<R>(_py: Python<'_>, f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            HOLDING.with(|h| h.set(self.0));
        }
    }
    let _reset = Reset(HOLDING.with(|h| h.replace(true)));
    f()
}

/// How many device allocations this thread made with the GIL released by [`GilAllocator`].
pub fn releases() -> u64 {
    RELEASES.with(Cell::get)
}

/// A [`Device`] as the pool's allocator: its allocations run with the GIL released when
/// the calling thread holds it through [`holding_gil`].
#[derive(Clone, Debug)]
pub struct GilAllocator {
    /// The device allocated from.
    pub device: Device,
}

impl GilAllocator {
    fn run<R: Send>(&self, f: impl FnOnce(&Device) -> R + Send) -> R {
        if !HOLDING.with(Cell::get) {
            return f(&self.device);
        }
        RELEASES.with(|r| r.set(r.get().saturating_add(1)));
        let device = &self.device;
        // The thread holds the GIL (`holding_gil` was given a `Python` token on it), so
        // attaching is a count increment, and `detach` releases it for the allocation.
        // The mark is cleared for the detached call: should it reenter, it must not try
        // to release a GIL it does not hold.
        Python::attach(|py| {
            py.detach(|| {
                let was = HOLDING.with(|h| h.replace(false));
                let r = f(device);
                HOLDING.with(|h| h.set(was));
                r
            })
        })
    }
}

impl Allocator for GilAllocator {
    type Memory = <Device as Allocator>::Memory;

    fn allocate(&self, bytes: usize) -> Result<Self::Memory> {
        self.run(|d| d.allocate(bytes))
    }

    fn allocate_immediate(&self, bytes: usize) -> Result<Self::Memory> {
        self.run(|d| d.allocate_immediate(bytes))
    }

    fn memory_info(&self) -> Option<MemoryInfo> {
        self.device.memory_info()
    }
}

/// A value touched only with the GIL held: the cheapest mutable slot a Python object can
/// have (no lock, no atomic). For state of `frozen` classes that every method changes
/// under the GIL, such as a pooled buffer's block.
///
/// Sound because this extension is built for the stable ABI (`abi3`), which only
/// interpreters with a GIL load: every access takes a [`Python`] token, and while one
/// thread holds the GIL no other runs Python or this extension.
pub struct GilCell<T>(std::cell::UnsafeCell<T>);

// SAFETY: the value is reached only through `with` (a `Python` token, so the GIL is held:
// one thread at a time, see the type's docs) or `get_mut` (`&mut self`, exclusive); `T:
// Send` lets it be reached from whichever thread holds the GIL.
unsafe impl<T: Send> Sync for GilCell<T> {}

impl<T> GilCell<T> {
    /// A cell holding `value`.
    pub fn new(value: T) -> Self {
        GilCell(std::cell::UnsafeCell::new(value))
    }

    /// The value, through an exclusive reference (no other can exist meanwhile).
    pub fn get_mut(&mut self) -> &mut T {
        self.0.get_mut()
    }

    /// The value, read by a garbage-collector traversal (`__traverse__`, which gets no
    /// [`Python`] token).
    ///
    /// # Safety
    /// - The GIL is held (the collector holds it while it traverses).
    /// - No [`GilCell::with`] closure of this cell is running: the collector starts only
    ///   when a Python object is made, which such closures never do (see `with`).
    pub unsafe fn peek(&self) -> &T {
        // SAFETY: no mutable reference exists meanwhile (the caller's promises).
        unsafe { &*self.0.get() }
    }

    /// Runs `f` on the value with the GIL held (`_py`).
    ///
    /// # Safety
    /// - `f` must not run Python code (no calls into Python objects, no Python
    ///   exceptions built, no `Python::attach`) and must not release the GIL: either could
    ///   let another thread, or this one again, into the cell while `f` holds it. Making a
    ///   Python object counts as running Python code (it may start the garbage collector,
    ///   which reads the cell through [`GilCell::peek`]).
    /// - `f` must not drop a value whose destructor does either; move such values out
    ///   and drop them after `with` returns.
    pub unsafe fn with<R>(&self, _py: Python<'_>, f: impl FnOnce(&mut T) -> R) -> R {
        // SAFETY: the GIL is held (`_py`), and the caller keeps `f` from running Python or
        // releasing the GIL, so no other reference to the value exists while `f` runs.
        f(unsafe { &mut *self.0.get() })
    }
}

/// Whether `object` has no other reference than the one given here (its count is 1): an
/// object a cache keeps that nothing else refers to any more.
pub fn sole_reference<T>(object: &Py<T>) -> bool {
    // SAFETY: `object` is a live reference, so the object exists; reading its count runs
    // no Python and needs no more than the object's header.
    unsafe { pyo3::ffi::Py_REFCNT(object.as_ptr()) == 1 }
}
