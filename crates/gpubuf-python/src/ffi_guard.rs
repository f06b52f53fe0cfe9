//! What the functions C calls (DLPack deleters, capsule destructors) and the drops they
//! reach need to be safe whenever they run: no panic unwinds out of an `extern "C"`
//! function (Rust would abort the process there), and no Python object is touched once
//! the interpreter is finalizing.
//!
//! At exit Python frees the objects still alive (a module-level numpy view of a gpubuf
//! array, a capsule nobody consumed) while it finalizes its modules, with the interpreter
//! already marked as not initialised: their deleters run then, and attaching to the
//! interpreter (PyO3's `Python::attach`) would panic. A deleter that finds the interpreter
//! finalizing, or gone (a consumer deleting from its own thread after exit), leaks what it
//! owns instead: the process is ending, and its memory goes with it (docs/python.md).

use pyo3::prelude::*;

/// Whether the interpreter is running: initialised and not finalizing, so a thread may
/// attach to it and touch Python objects.
pub fn python_alive() -> bool {
    // SAFETY: Py_IsInitialized only reads a flag of the runtime; CPython allows the call at
    // any time, before, during and after the interpreter's life, with or without the GIL.
    unsafe { pyo3::ffi::Py_IsInitialized() != 0 }
}

/// Runs `f` and stops any panic it raises: the panic hook has reported it, and what `f`
/// had not released yet is leaked with the panic's payload (dropping a payload may panic
/// again). For the bodies of `extern "C"` functions and of drops they reach.
pub fn no_unwind(f: impl FnOnce()) {
    if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        std::mem::forget(payload);
    }
}

/// Drops `value` attached to the interpreter, so that the Python objects it holds are
/// released now whichever thread this is; leaks it when the interpreter is finalizing or
/// gone.
pub fn drop_attached<T>(value: T) {
    if python_alive() {
        Python::attach(|_py| drop(value));
    } else {
        std::mem::forget(value);
    }
}
