//! Backend calls from inside a `with_array` / `with_bytes` closure: an error where waiting
//! could deadlock, never a hang; the allocation stays usable afterwards.

use gpubuf_core::{Allocator, Backend, DeviceMemory, Error, Layout, MemRef, Order};
use gpubuf_cpu::{with_array, with_array_mut, CpuBackend, CpuMemory};
use std::sync::mpsc;
use std::time::Duration;

/// Runs `f` on another thread; fails the test if it has not returned within 20 s (a
/// deadlock) instead of hanging the suite.
fn within_time<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20)).expect("the call deadlocked")
}

fn filled(cpu: &CpuBackend, n: usize) -> CpuMemory {
    let mem = cpu.allocate(n).unwrap();
    let bytes: Vec<u8> = (0..n as u8).collect();
    cpu.write(cpu.default_stream(), &mem, 0, &bytes).unwrap();
    mem
}

#[test]
fn reentrant_calls_on_the_same_allocation_are_errors() {
    within_time(|| {
        let cpu = CpuBackend::new();
        let s = cpu.default_stream();
        let mem = filled(&cpu, 16);
        let all = Layout::contiguous(&[16], Order::C).unwrap();
        // Write into, fill and copy into the bytes a read view borrows; read the bytes a
        // mutable view borrows.
        let r = with_array::<u8, _>(&mem, &all, |_| cpu.write(s, &mem, 0, &[9])).unwrap();
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        let r = with_array_mut::<u8, _>(&mem, &all, |_| cpu.read(s, &mem, 0, &mut [0u8; 4])).unwrap();
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        let r = with_array_mut::<u8, _>(&mem, &all, |_| cpu.fill(s, MemRef::whole(&mem), &[1])).unwrap();
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        let other = cpu.allocate(16).unwrap();
        let r = with_array::<u8, _>(&mem, &all, |_| cpu.copy(s, MemRef::whole(&other), &mem, 0)).unwrap();
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        // A nested mutable view of the bytes a read view borrows, and the other way round;
        // the message names both ranges.
        let r = with_array::<u8, _>(&mem, &all, |_| with_array_mut::<u8, _>(&mem, &all, |v| v.len()));
        assert!(matches!(r, Ok(Err(Error::InvalidArgument(_)))), "{r:?}");
        let r = with_array_mut::<u8, _>(&mem, &all, |_| with_array::<u8, _>(&mem, &all, |v| v.sum()));
        match r {
            Ok(Err(Error::InvalidArgument(m))) => {
                assert!(m.contains("re-entrant") && m.matches("bytes 0..16").count() == 2, "{m}")
            }
            r => panic!("{r:?}"),
        }
        // Reads nest: a read of bytes a read view borrows is no conflict.
        let r = with_array::<u8, _>(&mem, &all, |_| cpu.read(s, &mem, 0, &mut [0u8; 4])).unwrap();
        assert!(r.is_ok(), "{r:?}");
        let r = with_array::<u8, _>(&mem, &all, |v| with_array::<u8, _>(&mem, &all, |w| v.sum() == w.sum()));
        assert!(matches!(r, Ok(Ok(true))), "{r:?}");
        // Nothing was written, and the allocation is usable again.
        let want: Vec<u8> = (0..16).collect();
        assert_eq!(
            with_array::<u8, _>(&mem, &all, |v| v.iter().copied().collect::<Vec<u8>>()).unwrap(),
            want
        );
        cpu.write(s, &mem, 0, &[9]).unwrap();
        let mut back = [0u8; 2];
        cpu.read(s, &mem, 0, &mut back).unwrap();
        assert_eq!(back, [9, 1]);
    });
}

#[test]
fn calls_on_other_allocations_work_inside_a_closure() {
    within_time(|| {
        let cpu = CpuBackend::new();
        let s = cpu.default_stream();
        let (a, b) = (filled(&cpu, 16), filled(&cpu, 16));
        let all = Layout::contiguous(&[16], Order::C).unwrap();
        // Whichever of the two is ordered first, a call on the other one succeeds when no
        // other thread holds it.
        for (outer, inner) in [(&a, &b), (&b, &a)] {
            let r = with_array::<u8, _>(outer, &all, |v| cpu.write(s, inner, 0, &[v[3]])).unwrap();
            assert!(r.is_ok(), "{r:?}");
            let mut back = [0u8; 1];
            cpu.read(s, inner, 0, &mut back).unwrap();
            assert_eq!(back, [3]);
        }
    });
}

#[test]
fn a_lock_ordered_before_and_busy_is_an_error_not_a_deadlock() {
    within_time(|| {
        let cpu = CpuBackend::new();
        let s = cpu.default_stream().clone();
        let pair = [filled(&cpu, 16), filled(&cpu, 16)];
        let (low, high) =
            if pair[0].id() < pair[1].id() { (&pair[0], &pair[1]) } else { (&pair[1], &pair[0]) };
        let all = Layout::contiguous(&[16], Order::C).unwrap();
        let (held_tx, held_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        std::thread::scope(|scope| {
            // Another thread holds `low` until told to let go.
            let first = all.clone();
            scope.spawn(move || {
                with_array::<u8, _>(low, &first, |_| {
                    held_tx.send(()).unwrap();
                    release_rx.recv().unwrap();
                })
                .unwrap();
            });
            held_rx.recv().unwrap();
            // This thread holds `high`; waiting for `low` could close a cycle: an error.
            let r = with_array::<u8, _>(high, &all, |_| cpu.write(&s, low, 0, &[7])).unwrap();
            assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
            release_tx.send(()).unwrap();
        });
        // Both are usable again, and nothing was written.
        let mut back = [0u8; 1];
        cpu.read(&s, low, 0, &mut back).unwrap();
        assert_eq!(back, [0]);
        let r = with_array::<u8, _>(high, &all, |_| cpu.write(&s, low, 0, &[7])).unwrap();
        assert!(r.is_ok(), "{r:?}");
    });
}

#[test]
fn calls_from_rayon_workers_inside_par_chunks_mut_are_errors() {
    use gpubuf_buffer::NDBuffer;
    use gpubuf_cpu::interop;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let refused = within_time(|| {
        let cpu = CpuBackend::new();
        let out = NDBuffer::<_, f32>::zeros(&cpu, &[64, 4]).unwrap();
        let out2 = out.clone();
        let refused = AtomicUsize::new(0);
        interop::view_mut(&out, |o| {
            interop::par_chunks_mut(o, 0, 1, |_, mut row| {
                if matches!(out2.get(&[0, 0]), Err(Error::InvalidArgument(_))) {
                    refused.fetch_add(1, Ordering::Relaxed);
                }
                row.fill(1.0);
            })
        })
        .unwrap()
        .unwrap();
        // Still usable, and every chunk ran.
        assert!(out.all_equal(1.0).unwrap());
        refused.into_inner()
    });
    assert_eq!(refused, 64, "every worker's call back into the viewed array is refused");
}

#[test]
fn views_of_partial_element_allocations_and_far_empty_views() {
    use gpubuf_buffer::{Buffer, NDBuffer};
    use gpubuf_cpu::interop;
    let cpu = CpuBackend::new();
    // Nine bytes viewed as two i32: the trailing byte is never addressed.
    let buf = Buffer::zeros(&cpu, 9).unwrap();
    let nd = NDBuffer::<_, i32>::from_buffer(buf.slice(0..8).unwrap(), &[2], Order::C).unwrap();
    assert_eq!(interop::view(&nd, |v| v.len()).unwrap(), 2);
    // An empty view at a huge offset inside a buffer that does not start at byte 0.
    let whole = Buffer::zeros(&cpu, 64).unwrap();
    let far = Layout::new(vec![0], vec![1], usize::MAX).unwrap();
    let nd = NDBuffer::<_, f32>::from_buffer_layout(whole.slice(60..64).unwrap(), far).unwrap();
    assert_eq!(interop::view(&nd, |v| v.len()).unwrap(), 0);
    assert_eq!(interop::view_mut(&nd, |v| v.len()).unwrap(), 0);
}
