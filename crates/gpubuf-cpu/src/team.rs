//! Parallel work in which the calling thread takes part.
//!
//! Handing a whole plan to rayon from outside its pool (`par_iter`) parks the caller until
//! a pool thread is scheduled, takes the work and finishes it. On a machine with more
//! runnable threads than cores (several ranks of an MPI job per core, or other builds) each
//! hand-over waits for the scheduler: a 1 MiB strided gather of 640-byte rows measured
//! 0.6-1.0 GB/s through the pool on this 2-core VM at a load of 11, and 4.5-5.6 GB/s when
//! the same rows were copied by the calling thread alone (`--example rows`). [`team`]
//! instead lets the caller claim tasks from a shared counter at once, while up to
//! `threads - 1` rayon helpers claim from the same counter when they get to run. A helper
//! that starts late finds nothing left and touches nothing; the caller waits only for the
//! tasks other threads have actually claimed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

struct Team<F> {
    n: usize,
    next: AtomicUsize,
    done: AtomicUsize,
    task: F,
}

impl<F: Fn(usize)> Team<F> {
    /// Claims and runs tasks until none is left.
    fn work(&self) {
        loop {
            let k = self.next.fetch_add(1, Ordering::Relaxed);
            if k >= self.n {
                return;
            }
            // Counted as done even if the task unwinds, so the caller's wait ends.
            let _done = Done(&self.done);
            (self.task)(k);
        }
    }
}

struct Done<'a>(&'a AtomicUsize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}

/// Closes a team when the caller leaves (normally or unwinding): no task is claimed after
/// it, and it waits until every claimed task has finished.
struct Close<'a, F: Fn(usize)>(&'a Team<F>);

impl<F: Fn(usize)> Drop for Close<'_, F> {
    fn drop(&mut self) {
        let t = self.0;
        // `n` more on the counter: every later claim sees at least `n` (tasks are few, far
        // from wrapping the counter).
        let claimed = t.next.fetch_add(t.n, Ordering::Relaxed).min(t.n);
        while t.done.load(Ordering::Acquire) < claimed {
            std::thread::yield_now();
        }
    }
}

/// Runs `task(k)` once for every `k` in `0..n`, on the calling thread and up to `threads -
/// 1` rayon helpers (`threads` at least 1), and returns when all have finished.
///
/// # Safety
/// Whatever `task` dereferences stays valid until this returns: every task runs, on some
/// thread, before it returns, and none after (a helper that starts later claims nothing).
/// Tasks running at the same time must not race with each other.
pub(crate) unsafe fn team<F>(n: usize, threads: usize, task: F)
where
    F: Fn(usize) + Send + Sync + 'static,
{
    let t = Arc::new(Team { n, next: AtomicUsize::new(0), done: AtomicUsize::new(0), task });
    for _ in 1..threads.min(n) {
        let helper = Arc::clone(&t);
        rayon::spawn(move || helper.work());
    }
    let close = Close(&*t);
    t.work();
    drop(close);
}

#[cfg(all(test, not(miri)))]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn every_task_runs_once_before_team_returns() {
        for (n, threads) in [(0, 2), (1, 2), (7, 1), (64, 3), (1000, 8)] {
            let hits: Arc<Vec<AtomicUsize>> = Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect());
            let h = Arc::clone(&hits);
            // SAFETY: the task touches only the shared counters it owns a handle to.
            unsafe {
                super::team(n, threads, move |k| {
                    std::thread::sleep(std::time::Duration::from_micros(50));
                    h[k].fetch_add(1, Ordering::Relaxed);
                })
            };
            assert!(hits.iter().all(|c| c.load(Ordering::Relaxed) == 1), "n = {n}, threads = {threads}");
        }
    }
}
