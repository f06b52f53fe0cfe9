//! The backend traits on every backend: transfers, fills, copies, streams, events, memory.

use gpubuf::{DeviceMemory, Error, Kernels, MemRef, Result};
use gpubuf_testkit::backend_tests;
use gpubuf_testkit::exec::{download, upload};
use gpubuf_testkit::strategies::bytes;

fn transfers_at_offsets<B: Kernels>(b: &B) -> Result<()> {
    let s = b.default_stream();
    let m = b.allocate(1000)?;
    assert_eq!(m.len(), 1000);
    let data = bytes(600, 1);
    b.write(s, &m, 300, &data)?;
    let mut back = vec![0u8; 600];
    b.read(s, &m, 300, &mut back)?;
    assert_eq!(back, data);
    assert!(matches!(b.write(s, &m, 500, &data), Err(Error::OutOfBounds { .. })));
    assert!(matches!(b.read(s, &m, 999, &mut [0u8; 2]), Err(Error::OutOfBounds { .. })));
    // Large transfers (past any staging threshold) round-trip too.
    let big = bytes(9 << 20, 2);
    let mb = upload(b, &big)?;
    assert_eq!(download(b, &mb)?, big);
    Ok(())
}

fn fills_and_copies<B: Kernels>(b: &B) -> Result<()> {
    let s = b.default_stream();
    let m = upload(b, &[0u8; 96])?;
    for pattern in [&[7u8][..], &[1, 2], &[1, 2, 3, 4], &[9, 8, 7, 6, 5, 4, 3, 2], &[5, 6, 7]] {
        b.fill(s, MemRef::new(&m, 24, 48)?, pattern)?;
        let v = download(b, &m)?;
        assert!(v[..24].iter().all(|&x| x == 0) && v[72..].iter().all(|&x| x == 0));
        let want: Vec<u8> = pattern.iter().copied().cycle().take(48).collect();
        assert_eq!(&v[24..72], &want[..], "pattern {pattern:?}");
        b.fill(s, MemRef::whole(&m), &[0])?;
    }
    assert!(b.fill(s, MemRef::new(&m, 0, 10)?, &[1, 2, 3, 4]).is_err());
    assert!(b.fill(s, MemRef::whole(&m), &[]).is_err());
    assert!(MemRef::new(&m, 90, 10).is_err());
    let src = upload(b, &bytes(64, 3))?;
    b.copy(s, MemRef::new(&src, 8, 32)?, &m, 40)?;
    assert_eq!(&download(b, &m)?[40..72], &bytes(64, 3)[8..40]);
    assert!(b.copy(s, MemRef::new(&m, 0, 32)?, &m, 16).is_err(), "overlap refused");
    assert!(b.copy(s, MemRef::new(&m, 0, 32)?, &m, 32).is_ok(), "adjacent is fine");
    assert!(b.copy(s, MemRef::new(&src, 0, 64)?, &m, 40).is_err(), "past the end");
    Ok(())
}

fn streams_and_events<B: Kernels>(b: &B) -> Result<()> {
    let s1 = b.new_stream()?;
    let s2 = b.new_stream()?;
    let n = 4 << 20;
    let a = b.allocate(n)?;
    let c = b.allocate(n)?;
    let data = bytes(n, 4);
    b.write(&s1, &a, 0, &data)?;
    let ev = b.record_event(&s1)?;
    b.stream_wait(&s2, &ev)?;
    b.copy(&s2, MemRef::whole(&a), &c, 0)?;
    let done = b.record_event(&s2)?;
    b.wait_event(&done)?;
    assert!(b.event_complete(&done)?);
    let mut back = vec![0u8; n];
    b.read(&s2, &c, 0, &mut back)?;
    assert!(back == data);
    b.synchronize(&s1)?;
    b.synchronize(b.default_stream())?;
    Ok(())
}

fn allocation_edges<B: Kernels>(b: &B) -> Result<()> {
    let z = b.allocate(0)?;
    assert!(z.is_empty());
    let s = b.default_stream();
    b.write(s, &z, 0, &[])?;
    let imm = b.allocate_immediate(1 << 20)?;
    assert_eq!(imm.len(), 1 << 20);
    match b.allocate(1usize << 52) {
        Err(Error::OutOfMemory { requested, .. }) => assert_eq!(requested, 1usize << 52),
        other => panic!("a 4 PiB allocation must fail with OutOfMemory, got {other:?}"),
    }
    assert!(Error::OutOfMemory { requested: 1, available: None, pool: None }.is_retryable());
    let info = b.info();
    assert!(!info.name.is_empty());
    assert_eq!(info.backend, B::KIND);
    assert!(b.same_device(&b.clone()));
    Ok(())
}

backend_tests!(transfers_at_offsets, fills_and_copies, streams_and_events, allocation_edges);

/// A kernel that does not compile is an error carrying the compiler's log.
#[cfg(feature = "opencl")]
mod opencl_build_log {
    #[test]
    fn opencl() {
        let Some(cl) = gpubuf_testkit::opencl() else { return };
        match cl.build_program("__kernel void broken(__global float* x) { x[0] = undeclared_name; }") {
            Err(gpubuf::Error::Build { log, .. }) => {
                assert!(log.contains("undeclared_name"), "the log names the error: {log}")
            }
            other => panic!("expected a build error, got {:?}", other.map(|_| "a program")),
        }
        assert!(cl.build_kernels(4).is_ok(), "the plan kernels build");
    }
}
