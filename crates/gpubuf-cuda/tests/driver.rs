//! The CUDA backend's driver-level contract: listing devices without contexts, requests
//! past the device's memory, memory and streams of another device, and allocations
//! ordered on the stream that asked for them. Without a driver every call is a typed
//! error; the tests that need a GPU are skipped (a failure when `GPUBUF_REQUIRE` names
//! cuda).

use gpubuf_core::{Allocator, Backend, Error, MemRef};
use gpubuf_cuda::{device_list, devices, CudaBackend};

/// A backend of device `ordinal`, or `None` (skipped) without a driver or that device.
fn gpu(ordinal: usize) -> Option<CudaBackend> {
    let required = std::env::var("GPUBUF_REQUIRE").map(|v| v.contains("cuda")).unwrap_or(false);
    match CudaBackend::with_ordinal(ordinal) {
        Ok(b) => Some(b),
        Err(e) if required && ordinal == 0 => panic!("CUDA required (GPUBUF_REQUIRE) but unavailable: {e}"),
        Err(e) => {
            eprintln!("cuda device {ordinal} skipped: {e}");
            None
        }
    }
}

#[test]
fn listing_is_typed_with_or_without_a_driver() {
    match (devices(), device_list()) {
        (Ok(list), Ok(entries)) => {
            assert_eq!(list.len(), entries.len(), "one line per ordinal");
            for (i, (ordinal, entry)) in entries.iter().enumerate() {
                assert_eq!(*ordinal, i);
                match entry {
                    Ok(info) => {
                        assert_eq!(&list[i], info);
                        assert!(info.total_memory > 0 && info.compute_units > 0, "{info:?}");
                        assert!(info.version.starts_with("compute capability "), "{info:?}");
                    }
                    Err(e) => assert!(list[i].name.contains(&e.to_string()), "{:?}", list[i]),
                }
            }
        }
        (Err(a), Err(b)) => {
            assert!(matches!(a, Error::BackendUnavailable { .. } | Error::Driver { .. }), "{a:?}");
            assert_eq!(a, b);
            let reason = a.to_string();
            assert_eq!(reason.matches("unavailable").count(), 1, "said once: {reason}");
            assert!(CudaBackend::new().is_err());
            assert!(CudaBackend::with_ordinal(usize::MAX).is_err());
        }
        other => panic!("devices and device_list disagree: {other:?}"),
    }
}

#[test]
fn an_ordinal_past_the_devices_is_an_error() {
    if gpu(0).is_none() {
        return;
    }
    let n = devices().expect("listed").len();
    for ordinal in [n, n + 1, usize::MAX] {
        assert!(CudaBackend::with_ordinal(ordinal).is_err(), "{ordinal}");
    }
}

#[test]
fn requests_past_the_device_are_out_of_memory_and_the_backend_stays_usable() {
    let Some(b) = gpu(0) else { return };
    let total = b.info().total_memory;
    let stream = b.new_stream().expect("stream");
    let over = usize::try_from(total).unwrap_or(usize::MAX).saturating_add(1);
    for bytes in [over, 1 << 60, (1 << 60) + 12345, usize::MAX / 2 + 1, usize::MAX] {
        for r in [b.allocate(bytes), b.allocate_immediate(bytes), b.allocate_on(&stream, bytes)] {
            match r {
                Err(e @ Error::OutOfMemory { requested, available, .. }) => {
                    assert_eq!(requested, bytes);
                    assert_eq!(available.map(|a| a as u64), Some(total.min(usize::MAX as u64)));
                    assert!(e.is_retryable());
                }
                other => panic!("{bytes} bytes: expected OutOfMemory, got {other:?}"),
            }
        }
    }
    let m = b.allocate(4096).expect("a small allocation after the refusals");
    b.write(b.default_stream(), &m, 0, &[7u8; 4096]).expect("write");
    let mut back = [0u8; 4096];
    b.read(b.default_stream(), &m, 0, &mut back).expect("read");
    assert!(back.iter().all(|&x| x == 7));
}

#[test]
fn allocations_are_usable_on_every_stream_and_freed_after_their_work() {
    let Some(b) = gpu(0) else { return };
    let (s1, s2) = (b.new_stream().expect("stream"), b.new_stream().expect("stream"));
    let len = 1 << 22;
    let mut back = vec![0u8; len];
    for round in 0..40u8 {
        // Allocated on one stream, filled on another, copied on a third, read on the first.
        let home = [b.default_stream(), &s1, &s2][round as usize % 3];
        let a = b.allocate_on(home, len).expect("allocate");
        let c = b.allocate(len).expect("allocate");
        b.fill(&s1, MemRef::whole(&a), &[round, round.wrapping_add(1)]).expect("fill");
        let ev = b.record_event(&s1).expect("event");
        b.stream_wait(&s2, &ev).expect("join");
        b.copy(&s2, MemRef::whole(&a), &c, 0).expect("copy");
        // Dropped while the copy may still run: the free waits for it.
        drop(a);
        let ev = b.record_event(&s2).expect("event");
        b.stream_wait(home, &ev).expect("join");
        b.read(home, &c, 0, &mut back).expect("read");
        for (i, &x) in back.iter().enumerate().step_by(4099) {
            assert_eq!(x, if i % 2 == 0 { round } else { round.wrapping_add(1) }, "round {round} byte {i}");
        }
    }
    // A stream dropped with work queued: memory it used is freed after that work.
    let s3 = b.new_stream().expect("stream");
    let m = b.allocate(len).expect("allocate");
    b.fill(&s3, MemRef::whole(&m), &[3]).expect("fill");
    drop(s3);
    drop(m);
    let m = b.allocate_immediate(len).expect("allocate");
    b.fill(&s1, MemRef::whole(&m), &[9]).expect("fill");
    b.read(&s1, &m, 0, &mut back).expect("read");
    assert!(back.iter().all(|&x| x == 9));
}

#[test]
fn memory_and_streams_of_another_device_are_refused() {
    let (Some(b0), Some(b1)) = (gpu(0), gpu(1)) else {
        eprintln!("needs two CUDA devices: skipped");
        return;
    };
    let m0 = b0.allocate(256).expect("allocate");
    let m1 = b1.allocate(256).expect("allocate");
    let s1 = b1.default_stream();
    let mismatch = |r: gpubuf_core::Result<()>, what: &str| {
        assert!(matches!(r, Err(Error::DeviceMismatch(_))), "{what}: {r:?}");
    };
    mismatch(b1.write(s1, &m0, 0, &[1; 16]), "write");
    mismatch(b1.read(s1, &m0, 0, &mut [0; 16]), "read");
    mismatch(b1.copy(s1, MemRef::whole(&m0), &m1, 0), "copy from");
    mismatch(b1.copy(s1, MemRef::whole(&m1), &m0, 0), "copy to");
    mismatch(b1.fill(s1, MemRef::whole(&m0), &[1]), "fill");
    mismatch(b1.write(b0.default_stream(), &m1, 0, &[1; 16]), "stream of device 0");
    mismatch(b1.synchronize(b0.default_stream()), "synchronize");
    assert!(matches!(b1.allocate_on(b0.default_stream(), 64), Err(Error::DeviceMismatch(_))));
    // SAFETY: a live allocation of device 0, kept alive by the guard; refused before use.
    let adopted = unsafe { b1.adopt_ptr(m0.device_ptr(), 256, Box::new(())) };
    assert!(matches!(adopted, Err(Error::DeviceMismatch(_))), "{adopted:?}");
    // Both backends still work on their own memory.
    b1.write(s1, &m1, 0, &[5; 256]).expect("write");
    let mut back = [0u8; 256];
    b1.read(s1, &m1, 0, &mut back).expect("read");
    assert_eq!(back, [5; 256]);
    b0.fill(b0.default_stream(), MemRef::whole(&m0), &[1]).expect("fill");
}
