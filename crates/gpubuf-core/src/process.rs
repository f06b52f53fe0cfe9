//! Forks: a device opened in one process cannot be used by a child made with `fork()`.
//!
//! A forked child has a copy of its parent's memory but only the thread that forked: the
//! driver's threads (PoCL's workers, CUDA's) are gone and its locks may be held forever,
//! so the first call on a context inherited from the parent can hang, as can opening the
//! driver again (its process-wide state came along). Backends record [`generation`] when
//! they first reach the driver and open a device, and call [`check_same_process`] before
//! they use either: in a child the generation has moved on, and the call is refused with
//! an error that says what to do (start workers with `spawn` or `forkserver`, or fork
//! before opening the backend) instead of a hang.

use crate::{BackendKind, Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

/// Incremented in every child of a `fork()` (after the first [`generation`] call).
static GENERATION: AtomicU64 = AtomicU64::new(0);
static HOOK: Once = Once::new();

extern "C" fn in_child() {
    // An atomic add: async-signal-safe, as a fork handler must be.
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// The fork generation of this process, to record when a device is opened: 0 in a
/// process that has not forked from one that called this, one more in each forked child.
/// The first call registers the fork handler (`pthread_atfork`).
pub fn generation() -> u64 {
    HOOK.call_once(|| {
        #[cfg(unix)]
        // SAFETY: `in_child` is a plain `extern "C"` function with no arguments that only
        // does an atomic add (async-signal-safe); the prepare and parent handlers are none.
        unsafe {
            libc::pthread_atfork(None, None, Some(in_child));
        }
    });
    GENERATION.load(Ordering::Relaxed)
}

/// Refuses the use of a device of `backend` opened at fork generation `opened` in a
/// forked child.
///
/// # Errors
/// [`Error::BackendUnavailable`] in a child forked after the device was opened: a retry
/// does not help; start worker processes with the `spawn` or `forkserver` method.
pub fn check_same_process(backend: BackendKind, opened: u64) -> Result<()> {
    if GENERATION.load(Ordering::Relaxed) == opened {
        return Ok(());
    }
    Err(Error::BackendUnavailable {
        backend,
        reason: "the driver was opened before this process forked, and a forked child cannot \
                 use it (its threads did not survive the fork, and its first call may hang): start \
                 worker processes with the 'spawn' or 'forkserver' method, or fork before opening \
                 the backend"
            .into(),
    })
}

#[cfg(all(test, unix, not(miri)))]
mod tests {
    use super::*;

    #[test]
    fn a_forked_child_is_refused_and_the_parent_is_not() {
        let opened = generation();
        assert!(check_same_process(BackendKind::OpenCl, opened).is_ok());
        // SAFETY: the child runs an atomic load, builds the error (allocation: glibc's
        // malloc takes its locks around fork, so the child's allocator is consistent) and
        // leaves with _exit; it touches no other state of the parent's threads.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let code = match check_same_process(BackendKind::OpenCl, opened) {
                Err(Error::BackendUnavailable { .. }) => 0,
                _ => 1,
            };
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked; `status` is a valid out pointer.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(waited, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child status {status}");
        assert!(check_same_process(BackendKind::OpenCl, opened).is_ok(), "the parent is unchanged");
    }
}
