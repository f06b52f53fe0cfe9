//! Views and operations borrow the byte ranges they touch, not the whole allocation:
//! disjoint ranges of one allocation are used at once (nested or from two threads),
//! overlapping conflicting ones are an error on one thread and a wait across threads. A
//! CPU user kernel takes its arrays' borrows in the (allocation, byte) order whatever the
//! order of its arguments, so a launch from outside any view waits for a conflicting
//! borrow; a rayon worker never waits (the holder may be waiting for that worker).

use gpubuf_buffer::{Args, NDBuffer};
use gpubuf_core::kernel::Launch;
use gpubuf_core::{Allocator, Backend, CopyPlan, DType, Error, Kernels, Layout, MemRef, Order, Segment};
use gpubuf_cpu::{with_array, with_array_mut, CpuBackend, CpuView};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// Long enough for another thread to reach a point it can reach at all.
const PATIENCE: Duration = Duration::from_secs(10);

/// Runs `f` on another thread; fails the test if it has not returned within 30 s (a
/// deadlock, or a wait that never ends) instead of hanging the suite.
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

fn ramp(cpu: &CpuBackend, n: usize) -> NDBuffer<CpuBackend, i64> {
    let data: Vec<i64> = (0..n as i64).collect();
    NDBuffer::from_slice(cpu, &[n], &data).unwrap()
}

#[test]
fn overlapping_slices_conflict_and_disjoint_ones_nest() {
    let cpu = CpuBackend::new();
    let a = ramp(&cpu, 16);
    let (lo, mid, hi) = (a.slice(&[0..8]).unwrap(), a.slice(&[4..12]).unwrap(), a.slice(&[8..16]).unwrap());
    // Overlapping: a write and a read of elements 4..8, in both nestings, are errors that
    // name both byte ranges.
    match lo.view_mut(|_| mid.view(|v| v.sum())) {
        Ok(Err(Error::InvalidArgument(m))) => {
            assert!(m.contains("bytes 32..96") && m.contains("bytes 0..64"), "{m}")
        }
        r => panic!("{r:?}"),
    }
    assert!(matches!(mid.view(|_| lo.view_mut(|mut v| v.fill(-1))), Ok(Err(Error::InvalidArgument(_)))));
    assert!(matches!(mid.view_mut(|_| hi.view_mut(|mut v| v.fill(-1))), Ok(Err(Error::InvalidArgument(_)))));
    assert_eq!(a.to_vec().unwrap(), (0..16).collect::<Vec<i64>>(), "a refused view wrote nothing");
    // Overlapping reads nest.
    assert_eq!(lo.view(|l| mid.view(|m| l.sum() + m.sum())).unwrap().unwrap(), 28 + 60);
    // Disjoint (adjacent) slices: read one while writing the other, or write both, in
    // either nesting order.
    lo.view(|l| hi.view_mut(|mut h| h += &l)).unwrap().unwrap();
    hi.view(|h| lo.view_mut(|mut l| l -= &h)).unwrap().unwrap();
    lo.view_mut(|mut l| hi.view_mut(|mut h| std::mem::swap(&mut l[0], &mut h[0]))).unwrap().unwrap();
    // hi = 8 + 2i, then lo = i - hi = -8 - i, then the first elements swapped.
    let mut want: Vec<i64> = (0..8).map(|i| -8 - i).chain((0..8).map(|i| 8 + 2 * i)).collect();
    want.swap(0, 8);
    assert_eq!(a.to_vec().unwrap(), want);
    // The backend's own operations borrow their bytes only: inside a write view of `lo`,
    // `hi` is filled, read and copied into, and `lo` is refused.
    lo.view_mut(|_| {
        hi.fill(3).unwrap();
        assert_eq!(hi.to_vec().unwrap(), vec![3; 8]);
        hi.copy_from(&hi.flip(0).unwrap().copy().unwrap()).unwrap();
        assert!(lo.to_vec().is_err() && mid.fill(0).is_err());
    })
    .unwrap();
}

#[test]
fn a_strided_view_borrows_its_span() {
    let cpu = CpuBackend::new();
    let a = ramp(&cpu, 16);
    let m = a.reshape(&[4, 4]).unwrap();
    let (even, odd) = (m.slice(&[0..4, 0..1]).unwrap(), m.slice(&[0..4, 1..2]).unwrap());
    // Interleaved columns share no element but their spans overlap: refused, not aliased.
    assert!(matches!(even.view(|_| odd.view_mut(|_| ())), Ok(Err(Error::InvalidArgument(_)))));
    // The last row lies past the first column's span.
    let last = m.slice(&[3..4, 1..4]).unwrap();
    even.view(|e| last.view_mut(|mut l| l.fill(e[[0, 0]] - 1))).unwrap().unwrap();
    assert_eq!(a.to_vec().unwrap()[12..], [12, -1, -1, -1]);
}

#[test]
fn two_threads_write_disjoint_blocks_of_one_allocation_at_once() {
    within_time(|| {
        let cpu = CpuBackend::new();
        let a = ramp(&cpu, 64);
        let (lo, hi) = (a.slice(&[0..32]).unwrap(), a.slice(&[32..64]).unwrap());
        let (lo, hi) = (&lo, &hi);
        let (lo_in, lo_seen) = mpsc::channel();
        let (hi_in, hi_seen) = mpsc::channel();
        let (fill_done, filled) = mpsc::channel();
        std::thread::scope(|s| {
            // Each thread enters its write view, then waits inside it until the other one is
            // inside its own: only possible when neither borrow excludes the other.
            let t = s.spawn(move || {
                lo.view_mut(|mut v| {
                    lo_in.send(()).unwrap();
                    let met = hi_seen.recv_timeout(PATIENCE).is_ok();
                    v.fill(1);
                    met
                })
            });
            let met = hi
                .view_mut(|mut v| {
                    hi_in.send(()).unwrap();
                    let met = lo_seen.recv_timeout(PATIENCE).is_ok();
                    v.fill(2);
                    met
                })
                .unwrap();
            assert!(met, "the second thread's view did not run while the first one's did");
            assert!(
                t.join().unwrap().unwrap(),
                "the first thread's view did not run while the second one's did"
            );
            // A backend fill of `hi` from a thread while another holds a write view of `lo`.
            let (lo_in, lo_seen) = mpsc::channel();
            let t = s.spawn(move || {
                lo.view_mut(|_| {
                    lo_in.send(()).unwrap();
                    filled.recv_timeout(PATIENCE).is_ok()
                })
            });
            lo_seen.recv().unwrap();
            hi.fill(5).unwrap();
            fill_done.send(()).unwrap();
            assert!(t.join().unwrap().unwrap(), "the fill waited for the other thread's view");
        });
        let got = a.to_vec().unwrap();
        assert!(got[..32].iter().all(|&x| x == 1) && got[32..].iter().all(|&x| x == 5), "{got:?}");
    });
}

#[test]
fn a_thread_waits_for_an_overlapping_range_and_proceeds_after_release() {
    within_time(|| {
        let cpu = CpuBackend::new();
        let a = ramp(&cpu, 16);
        let (lo, mid) = (a.slice(&[0..8]).unwrap(), a.slice(&[4..12]).unwrap());
        let (lo, mid) = (&lo, &mid);
        let (held, holding) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let done = &AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(move || {
                lo.view_mut(|mut v| {
                    held.send(()).unwrap();
                    released.recv().unwrap();
                    v.fill(7);
                })
                .unwrap();
            });
            holding.recv().unwrap();
            let waiter = s.spawn(move || {
                // Holds nothing: waits for the writer instead of failing.
                let r = mid.view(|v| v.iter().copied().collect::<Vec<i64>>());
                done.store(true, Ordering::SeqCst);
                r
            });
            std::thread::sleep(Duration::from_millis(200));
            assert!(!done.load(Ordering::SeqCst), "the reader did not wait for the overlapping writer");
            release.send(()).unwrap();
            let seen = waiter.join().unwrap().unwrap();
            assert_eq!(seen, vec![7, 7, 7, 7, 8, 9, 10, 11], "the reader saw the write complete");
        });
    });
}

#[test]
fn waiting_follows_the_byte_order_within_an_allocation() {
    within_time(|| {
        let cpu = CpuBackend::new();
        let s = cpu.default_stream().clone();
        let mem = &cpu.allocate(64).unwrap();
        let l = |off: usize| Layout::new(vec![16], vec![1], off).unwrap();
        let (held, holding) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        std::thread::scope(|scope| {
            // Another thread writes bytes 16..32.
            scope.spawn(move || {
                with_array_mut::<u8, _>(mem, &l(16), |_| {
                    held.send(()).unwrap();
                    released.recv().unwrap();
                })
                .unwrap();
            });
            holding.recv().unwrap();
            // Holding bytes 32..48, a busy range before them is tried: an error, not a wait
            // that could close a cycle.
            let (tried, attempt) = mpsc::channel();
            let (cpu2, s2) = (&cpu, &s);
            scope.spawn(move || {
                let r = with_array::<u8, _>(mem, &l(32), |_| cpu2.write(s2, mem, 20, &[9])).unwrap();
                tried.send(r).unwrap();
            });
            let r = attempt.recv_timeout(PATIENCE / 2);
            if r.is_err() {
                release.send(()).unwrap();
            }
            match r.expect("waited instead of failing") {
                Err(Error::InvalidArgument(m)) => {
                    assert!(m.contains("busy") && m.contains("bytes 16..32"), "{m}")
                }
                r => panic!("{r:?}"),
            }
            // Holding bytes 0..16, the busy range after them is waited for: released after a
            // while, the write lands.
            let waiter = scope.spawn(|| {
                with_array::<u8, _>(mem, &l(0), |_| cpu.fill(&s, MemRef::new(mem, 16, 16).unwrap(), &[4]))
                    .unwrap()
            });
            std::thread::sleep(Duration::from_millis(100));
            release.send(()).unwrap();
            assert!(waiter.join().unwrap().is_ok());
        });
        let mut back = [0u8; 64];
        cpu.read(&s, mem, 0, &mut back).unwrap();
        assert!(back[16..32].iter().all(|&b| b == 4) && back[..16].iter().all(|&b| b == 0));
    });
}

#[test]
fn disjoint_copies_and_plans_within_one_allocation_nest() {
    let cpu = CpuBackend::new();
    let s = cpu.default_stream();
    let mem = cpu.allocate(64).unwrap();
    cpu.write(s, &mem, 0, &(0..16u8).collect::<Vec<u8>>()).unwrap();
    let first = Layout::contiguous(&[16], Order::C).unwrap();
    // Inside a read view of bytes 0..16: copy them to 32..48 of the same allocation.
    with_array::<u8, _>(&mem, &first, |_| cpu.copy(s, MemRef::new(&mem, 0, 16).unwrap(), &mem, 32))
        .unwrap()
        .unwrap();
    // Into the viewed bytes: refused.
    let r = with_array::<u8, _>(&mem, &first, |_| cpu.copy(s, MemRef::new(&mem, 32, 16).unwrap(), &mem, 8));
    assert!(matches!(r, Ok(Err(Error::InvalidArgument(_)))), "{r:?}");
    let mut back = [0u8; 16];
    cpu.read(s, &mem, 32, &mut back).unwrap();
    assert_eq!(back.to_vec(), (0..16u8).collect::<Vec<u8>>());
    cpu.read(s, &mem, 0, &mut back).unwrap();
    assert_eq!(back.to_vec(), (0..16u8).collect::<Vec<u8>>(), "the refused copy wrote nothing");
    // A plan that reads elements 4..8 of the allocation (reversed) into a buffer at 48..52:
    // inside a write view of bytes 8..16 and 32..48 of the same allocation, it runs; a
    // scatter back into 4..8 while 0..8 is viewed is refused.
    let seg = Segment::new(0, 7, &[(4, -1)], 0).unwrap();
    let plan = cpu.prepare(&CopyPlan::new(vec![16], 4, vec![seg]).unwrap(), DType::U8).unwrap();
    let (whole, buffer) = (MemRef::new(&mem, 0, 16).unwrap(), MemRef::new(&mem, 48, 4).unwrap());
    let rest = Layout::new(vec![8], vec![1], 8).unwrap();
    with_array_mut::<u8, _>(&mem, &rest, |_| cpu.gather(s, &plan, &[whole], buffer)).unwrap().unwrap();
    let r = with_array::<u8, _>(&mem, &Layout::new(vec![8], vec![1], 0).unwrap(), |_| {
        cpu.scatter(s, &plan, buffer, &[whole])
    });
    assert!(matches!(r, Ok(Err(Error::InvalidArgument(_)))), "{r:?}");
    let mut back = [0u8; 4];
    cpu.read(s, &mem, 48, &mut back).unwrap();
    assert_eq!(back, [7, 6, 5, 4]);
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
