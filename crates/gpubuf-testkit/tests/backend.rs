//! The backend traits on every backend: transfers, fills, copies, streams, events, memory.

#[cfg(feature = "opencl")]
use gpubuf::{CopyPlan, Segment};
use gpubuf::{DeviceMemory, Error, Kernels, MemRef, Result};
use gpubuf_testkit::backend_tests;
use gpubuf_testkit::exec::{download, upload};
use gpubuf_testkit::hostile::{failed, fits, length, offset, prop_err, runner};
use gpubuf_testkit::strategies::bytes;
use proptest::prelude::*;
use std::cell::Cell;

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
    // Large transfers (past any staging threshold) round-trip too; under Miri (CPU only,
    // no staging) a smaller one keeps the run short.
    let big = bytes(if cfg!(miri) { 64 << 10 } else { 9 << 20 }, 2);
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
    let n = if cfg!(miri) { 64 << 10 } else { 4 << 20 };
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
    // Not under Miri: it stops the program on an allocation it cannot back instead of
    // reporting the failure.
    if !cfg!(miri) {
        match b.allocate(1usize << 52) {
            Err(Error::OutOfMemory { requested, .. }) => assert_eq!(requested, 1usize << 52),
            other => panic!("a 4 PiB allocation must fail with OutOfMemory, got {other:?}"),
        }
    }
    assert!(Error::OutOfMemory { requested: 1, available: None, pool: None }.is_retryable());
    let info = b.info();
    assert!(!info.name.is_empty());
    assert_eq!(info.backend, B::KIND);
    assert!(b.same_device(&b.clone()));
    Ok(())
}

/// Transfers, copies and fills with extreme offsets, lengths and patterns: an error
/// exactly when a range leaves its allocation (or the pattern does not fit), no byte
/// changed by a failed call, the model's bytes after a successful one.
fn transfers_never_panic<B: Kernels>(b: &B) -> Result<()> {
    // Sizes no layout can describe; and (not under Miri, which stops the program on an
    // allocation it cannot back) sizes no machine has.
    let huge: &[usize] = if cfg!(miri) {
        &[usize::MAX, isize::MAX as usize]
    } else {
        &[usize::MAX, isize::MAX as usize, 1 << 62, (1 << 62) + 16]
    };
    for &n in huge {
        assert!(b.allocate(n).is_err(), "{n} bytes");
    }
    let s = b.default_stream();
    let m = upload(b, &bytes(64, 1))?;
    let other = upload(b, &bytes(64, 2))?;
    let args = (0usize..5, offset(), length(), offset(), prop::collection::vec(any::<u8>(), 0..=3));
    let accepted = Cell::new(0);
    runner(128)
        .run(&args, |(op, off, len, to, pattern)| {
            let before = download(b, &m).map_err(failed)?;
            let mut want = before.clone();
            let host = vec![0xA5u8; len % 65];
            let p = if pattern.is_empty() { vec![0u8; 129] } else { pattern };
            let (r, ok) = match op {
                0 => (b.write(s, &m, off, &host), fits(off, host.len(), 64)),
                1 => {
                    let mut out = host.clone();
                    let r = b.read(s, &m, off, &mut out);
                    if r.is_ok() {
                        prop_assert_eq!(&out[..], &before[off..off + out.len()]);
                    }
                    (r.map(|_| ()), fits(off, out.len(), 64))
                }
                2 => {
                    let src = MemRef { memory: &other, offset: off, len };
                    (b.copy(s, src, &m, to), fits(off, len, 64) && fits(to, len, 64))
                }
                3 => {
                    let src = MemRef { memory: &m, offset: off, len };
                    let apart = off.saturating_add(len) <= to || to.saturating_add(len) <= off || len == 0;
                    (b.copy(s, src, &m, to), fits(off, len, 64) && fits(to, len, 64) && apart)
                }
                _ => {
                    let dst = MemRef { memory: &m, offset: off, len };
                    let ok = fits(off, len, 64) && p.len() <= 128 && len % p.len() == 0;
                    (b.fill(s, dst, &p), ok)
                }
            };
            prop_assert_eq!(r.is_ok(), ok, "op {} off {} len {} to {}: {:?}", op, off, len, to, r);
            accepted.set(accepted.get() + usize::from(ok));
            if ok {
                match op {
                    0 => want[off..off + host.len()].copy_from_slice(&host),
                    2 => want[to..to + len].copy_from_slice(&bytes(64, 2)[off..off + len]),
                    3 => want.copy_within(off..off + len, to),
                    4 => want[off..off + len].iter_mut().zip(p.iter().cycle()).for_each(|(d, v)| *d = *v),
                    _ => {}
                }
            }
            prop_assert_eq!(download(b, &m).map_err(failed)?, want);
            b.write(s, &m, 0, &bytes(64, 1)).map_err(failed)?;
            Ok(())
        })
        .map_err(prop_err)?;
    let least = if cfg!(miri) { 1 } else { 16 };
    assert!(accepted.get() >= least, "the model's valid side is exercised: {}", accepted.get());
    Ok(())
}

backend_tests!(
    transfers_at_offsets,
    fills_and_copies,
    streams_and_events,
    allocation_edges,
    transfers_never_panic
);

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

/// `GPUBUF_CL_CHUNK=0` (or any value outside 1..=65536) is a typed error when a plan
/// program is built, never a division by zero. Runs in a child process so the variable
/// cannot reach other tests.
#[cfg(feature = "opencl")]
#[test]
fn opencl_chunk_setting_is_checked() {
    if gpubuf_testkit::opencl().is_none() {
        return;
    }
    for value in ["0", "65537", "x", "128"] {
        let out = gpubuf_testkit::child_test("opencl_chunk_child")
            .env(gpubuf::opencl::CHUNK_ENV, value)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{}={value}: {text}", gpubuf::opencl::CHUNK_ENV);
        assert!(text.contains("1 passed"), "the child ran: {text}");
    }
}

/// The child of [`opencl_chunk_setting_is_checked`]: a fresh backend under the variable
/// its parent set.
#[cfg(feature = "opencl")]
#[test]
#[ignore = "run by opencl_chunk_setting_is_checked with the variable set"]
fn opencl_chunk_child() {
    use gpubuf::{Allocator, Backend, DType, Kernels, MemRef};
    let value = std::env::var(gpubuf::opencl::CHUNK_ENV).unwrap_or_default();
    // The chunk is the per-work-item shape's setting (CPU devices default to rows).
    let cl =
        gpubuf::opencl::OpenClBackend::new().unwrap().with_plan_kernel(gpubuf::opencl::PlanKernel::Items);
    let seg = Segment::new(0, 3, &[(4, -1)], 0).unwrap();
    let plan = CopyPlan::new(vec![4], 4, vec![seg]).unwrap();
    let valid = value.parse::<usize>().is_ok_and(|c| (1..=gpubuf::opencl::MAX_CHUNK).contains(&c));
    match (cl.chunk(), cl.prepare(&plan, DType::I32)) {
        (Err(Error::InvalidArgument(m)), Err(Error::InvalidArgument(_))) if !valid => {
            assert!(m.contains(gpubuf::opencl::CHUNK_ENV), "{m}")
        }
        (Ok(c), Ok(p)) if valid => {
            assert!(c == 1 || c.to_string() == value);
            let s = cl.default_stream();
            let src =
                gpubuf_testkit::exec::upload(&cl, &[1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0]).unwrap();
            let dst = cl.allocate(16).unwrap();
            cl.gather(s, &p, &[MemRef::whole(&src)], MemRef::whole(&dst)).unwrap();
            let back = gpubuf_testkit::exec::download(&cl, &dst).unwrap();
            assert_eq!(back, [4, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0]);
        }
        (c, p) => panic!("{value:?}: chunk {c:?}, prepare {p:?}"),
    }
}
