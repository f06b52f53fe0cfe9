//! When a borrow waits for another thread's: a CPU user kernel takes its arrays' borrows in
//! the (allocation, byte) order whatever the order of its arguments, so a launch from
//! outside any view waits for a conflicting borrow; a rayon worker never waits (the holder
//! may be waiting for that worker), it gets an error while the conflict lasts.

use gpubuf_buffer::{Args, NDBuffer};
use gpubuf_core::kernel::Launch;
use gpubuf_core::{Backend, Error};
use gpubuf_cpu::{CpuBackend, CpuView};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// Runs `f` on another thread; fails the test after 30 s instead of hanging the suite.
fn within_time(f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("the test hung"),
        r => r.expect("the test failed"),
    }
}

/// `y = x` for two arrays of one allocation, the written one given first: its bytes come
/// after the read one's, so borrowing in argument order could not wait for `x`.
#[test]
fn a_user_kernel_waits_for_a_conflicting_borrow_whatever_its_argument_order() {
    within_time(|| {
        let cpu = CpuBackend::new();
        let data: Vec<f64> = (0..16).map(f64::from).collect();
        let a = NDBuffer::<_, f64>::from_slice(&cpu, &[16], &data).unwrap();
        let (x, y) = (a.slice(&[0..8]).unwrap(), a.slice(&[8..16]).unwrap());
        let copy = cpu.user_kernel("copy", |k| {
            let mut y = k.array_mut::<f64>(0)?;
            y.assign(&k.array::<f64>(1)?);
            Ok(())
        });
        let (x, y, copy) = (&x, &y, &copy);
        let (held, holding) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let done = &AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(move || {
                x.view_mut(|mut v| {
                    held.send(()).unwrap();
                    released.recv().unwrap();
                    v.fill(7.0);
                })
                .unwrap();
            });
            holding.recv().unwrap();
            let launcher = s.spawn(move || {
                let args = Args::new().array_mut(y).array(x);
                let r = copy.launch(cpu_stream(y), &Launch::new(&[8]).unwrap(), &args).map(|_| ());
                done.store(true, Ordering::SeqCst);
                r
            });
            std::thread::sleep(Duration::from_millis(200));
            assert!(!done.load(Ordering::SeqCst), "the launch did not wait for the writer of x");
            release.send(()).unwrap();
            launcher.join().unwrap().unwrap();
        });
        assert_eq!(y.to_vec().unwrap(), vec![7.0; 8], "the kernel read x after the write");
    });
}

fn cpu_stream(a: &NDBuffer<CpuBackend, f64>) -> &gpubuf_cpu::CpuStream {
    a.backend().default_stream()
}

/// A rayon worker that meets another thread's conflicting borrow returns an error at once
/// instead of parking the worker.
#[test]
#[cfg_attr(miri, ignore = "building a rayon pool trips Stacked Borrows in crossbeam-epoch, outside gpubuf")]
fn a_rayon_worker_does_not_wait_for_another_threads_borrow() {
    within_time(|| {
        let cpu = CpuBackend::new();
        let a = NDBuffer::<_, f64>::zeros(&cpu, &[8]).unwrap();
        let a = &a;
        let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let (held, holding) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        std::thread::scope(|s| {
            s.spawn(move || {
                a.view_mut(|_| {
                    held.send(()).unwrap();
                    released.recv().unwrap();
                })
                .unwrap();
            });
            holding.recv().unwrap();
            match pool.install(|| a.view(|v| v.sum())) {
                Err(Error::InvalidArgument(m)) => assert!(m.contains("busy"), "{m}"),
                r => panic!("a rayon worker should not wait: {r:?}"),
            }
            // Off the pool, the same read waits and then succeeds.
            let reader = s.spawn(move || a.view(|v| v.sum()));
            std::thread::sleep(Duration::from_millis(100));
            release.send(()).unwrap();
            assert_eq!(reader.join().unwrap().unwrap(), 0.0);
        });
    });
}
