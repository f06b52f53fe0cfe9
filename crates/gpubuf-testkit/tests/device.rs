//! `gpubuf::Device`: generic bodies run through it on CPU and OpenCL, random plans give the
//! same bytes through it as through the concrete backend, an object of another backend is
//! `DeviceMismatch`, and a backend compiled out is `BackendUnavailable`.

use gpubuf::bufferizer::Input;
use gpubuf::halo::{Boundary, Dim, HaloDataTransformer, HaloExchangeSpec, QuantityHaloSpec};
use gpubuf::mirror::DirtyPolicy;
use gpubuf::{
    Allocator, Backend, BackendKind, Bufferizer, DType, Device, Error, Kernels, MemoryPool, Mirror, NDBuffer,
    Result,
};
use gpubuf_testkit::exec;
use gpubuf_testkit::strategies::{bytes, plan_case, PlanCase};
use ndarray::{s, Array3, ArrayD, IxDyn};
use proptest::prelude::*;

/// A CPU device over the test binary's shared CPU backend.
fn device_cpu() -> Device {
    Device::from(gpubuf_testkit::cpu())
}

/// An OpenCL device over the shared OpenCL backend (programs build once), if available.
#[cfg(feature = "opencl")]
fn device_opencl() -> Option<Device> {
    gpubuf_testkit::opencl().map(Device::from)
}

/// One `#[test]` per backend running `body` through a [`Device`] holding it.
macro_rules! device_tests {
    ($($name:ident),+ $(,)?) => {
        $(
            mod $name {
                #[test]
                fn cpu() {
                    let d = super::device_cpu();
                    assert_eq!(d.kind(), gpubuf::BackendKind::Cpu);
                    if let Err(e) = super::$name(&d) {
                        panic!("through a cpu Device: {e}");
                    }
                }
                #[cfg(feature = "opencl")]
                #[test]
                fn opencl() {
                    let Some(d) = super::device_opencl() else { return };
                    assert_eq!(d.kind(), gpubuf::BackendKind::OpenCl);
                    if let Err(e) = super::$name(&d) {
                        panic!("through an opencl Device: {e}");
                    }
                }
            }
        )+
    };
}

fn arrays_and_views<B: Kernels>(b: &B) -> Result<()> {
    let data: Vec<f64> = (0..12).map(f64::from).collect();
    let a = NDBuffer::<B, f64>::from_slice(b, &[3, 4], &data)?;
    assert_eq!(a.transpose(None)?.copy()?.to_vec()?, [0., 4., 8., 1., 5., 9., 2., 6., 10., 3., 7., 11.]);
    assert_eq!(a.flip(1)?.slice(&[1..2, 0..4])?.to_vec()?, [7., 6., 5., 4.]);
    let z = NDBuffer::<B, f64>::zeros(b, &[4, 3])?;
    z.slice(&[0..4, 1..2])?.copy_from(&a.slice(&[0..1, 0..4])?.reshape(&[4, 1])?)?;
    assert_eq!(z.to_vec()?, [0., 0., 0., 0., 1., 0., 0., 2., 0., 0., 3., 0.]);
    z.fill(2.5)?;
    assert!(z.all_equal(2.5)?);
    Ok(())
}

fn pool_hits_on_its_stream<B: Kernels>(b: &B) -> Result<()> {
    let pool = MemoryPool::new(b.clone());
    let s = b.new_stream()?;
    drop(pool.allocate_on(4096, b, &s)?);
    let again = pool.allocate_on(4096, b, &s)?;
    let stats = pool.stats();
    assert_eq!((stats.hits, stats.misses, stats.active_blocks), (1, 1, 1));
    let buf = again.into_buffer(b)?;
    buf.fill(&[7])?;
    assert!(buf.to_vec()?.iter().all(|&x| x == 7));
    drop(buf);
    b.synchronize(&s)?;
    assert_eq!(pool.active_blocks(), 0);
    Ok(())
}

/// Every boundary of one field sent to itself: each halo receives the opposite interior
/// edge (a periodic domain on one rank).
fn periodic_specs(spec: &QuantityHaloSpec) -> Result<Vec<HaloExchangeSpec>> {
    Boundary::ALL.iter().map(|&bd| HaloExchangeSpec::periodic(spec.clone(), bd)).collect()
}

fn halo_periodic_self_exchange<B: Kernels>(b: &B) -> Result<()> {
    let (nx, ny, nz, h) = (10, 9, 3, 2);
    let spec = QuantityHaloSpec::centered(&[Dim::X, Dim::Y, Dim::Z], &[nx, ny, nz], h, 0, DType::F64)?;
    let shape = spec.shape.clone();
    let host = ArrayD::from_shape_fn(IxDyn(&shape), |i| (i[0] * 1000 + i[1] * 10 + i[2]) as f64);
    let u = NDBuffer::<B, f64>::from_ndarray(b, host.view())?;
    let pool = MemoryPool::new(b.clone());
    let mut t = HaloDataTransformer::<B, f64>::with_pool(b, &pool, periodic_specs(&spec)?, None)?;
    let fields = [&u; Boundary::ALL.len()];
    t.async_pack(&fields, None)?;
    let sent = t.pack_buffer()?.clone();
    t.receive(&sent)?;
    t.async_unpack(&fields, None)?;
    t.finalize()?;
    let got = u.to_ndarray()?;
    let (x0, y0) = (h as isize, h as isize);
    let (x1, y1) = (x0 + nx as isize, y0 + ny as isize);
    // West halo = east interior edge, south halo = north interior edge, and corners.
    assert_eq!(got.slice(s![0..x0, y0..y1, ..]), host.slice(s![x1 - x0..x1, y0..y1, ..]));
    assert_eq!(got.slice(s![x1..x1 + x0, y0..y1, ..]), host.slice(s![x0..2 * x0, y0..y1, ..]));
    assert_eq!(got.slice(s![x0..x1, 0..y0, ..]), host.slice(s![x0..x1, y1 - y0..y1, ..]));
    assert_eq!(got.slice(s![0..x0, 0..y0, ..]), host.slice(s![x1 - x0..x1, y1 - y0..y1, ..]));
    assert_eq!(got.slice(s![x0..x1, y0..y1, ..]), host.slice(s![x0..x1, y0..y1, ..]));
    Ok(())
}

fn bufferizer_and_mirror<B: Kernels>(b: &B) -> Result<()> {
    let mut batch = Bufferizer::<B, f32>::new(b, &[2, 3], 4, None)?;
    let frame = NDBuffer::<B, f32>::from_slice(b, &[3, 2], &[1., 2., 3., 4., 5., 6.])?;
    batch.append(&frame.transpose(None)?)?;
    batch.append(Input::Host(ndarray::Array2::from_elem((2, 3), 9f32).into_dyn().view()))?;
    assert_eq!(batch.filled()?.to_vec()?, [1., 3., 5., 2., 4., 6., 9., 9., 9., 9., 9., 9.]);

    let host = Array3::<f64>::zeros((4, 5, 6)).into_dyn();
    let mut m = Mirror::new(b, host.view(), DirtyPolicy::exact(), None)?;
    let col = m.view(&[0..4, 2..3, 1..2])?;
    m.fill(&col, 3.0)?;
    let sent = m.sync()?;
    assert_eq!(sent.bytes, 4 * 8);
    assert_eq!(m.device().to_ndarray()?, m.host());
    Ok(())
}

device_tests!(arrays_and_views, pool_hits_on_its_stream, halo_periodic_self_exchange, bufferizer_and_mirror);

/// A plan gather and a scatter give the same bytes through `device` as through `concrete`.
fn same_through_device<B: Kernels>(
    concrete: &B,
    device: &Device,
    case: &PlanCase,
) -> std::result::Result<(), TestCaseError> {
    let fail = |e: Error| TestCaseError::fail(e.to_string());
    let initial = vec![0xA5u8; case.plan.buffer_len() * case.dtype.size()];
    let packed = exec::gather(concrete, case, &initial).map_err(fail)?;
    prop_assert_eq!(&exec::gather(device, case, &initial).map_err(fail)?, &packed);
    let buffer = bytes(initial.len(), 7);
    let targets = exec::scatter(concrete, case, &buffer, &case.sources).map_err(fail)?;
    prop_assert_eq!(exec::scatter(device, case, &buffer, &case.sources).map_err(fail)?, targets);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_plans_same_through_device_on_cpu(case in plan_case(10, 6, true)) {
        let concrete = gpubuf_testkit::cpu();
        same_through_device(&concrete, &Device::from(concrete.clone()), &case)?;
    }

    #[cfg(feature = "opencl")]
    #[test]
    fn random_plans_same_through_device_on_opencl(case in plan_case(10, 6, true)) {
        if let Some(concrete) = gpubuf_testkit::opencl() {
            same_through_device(&concrete, &Device::from(concrete.clone()), &case)?;
        }
    }
}

/// More sources than `Device` narrows on the stack: 40 one-element sources gathered in
/// reverse order, then scattered back into fresh targets.
fn many_sources<B: Kernels>(b: &B) -> Result<()> {
    use gpubuf::{CopyPlan, Segment};
    const N: usize = 40;
    let segments = (0..N).map(|i| Segment::new(N - 1 - i, 0, &[(1, 1)], i)).collect::<Result<Vec<_>>>()?;
    let plan = CopyPlan::new(vec![1; N], N, segments)?;
    let sources: Vec<Vec<u8>> = (0..N).map(|i| (i as u32).to_ne_bytes().to_vec()).collect();
    let case = PlanCase { dtype: DType::U32, sources, plan };
    let packed = exec::gather(b, &case, &[0; N * 4])?;
    let want: Vec<u8> = (0..N as u32).rev().flat_map(u32::to_ne_bytes).collect();
    assert_eq!(packed, want);
    let zeros = vec![vec![0u8; 4]; N];
    assert_eq!(exec::scatter(b, &case, &packed, &zeros)?, case.sources);
    Ok(())
}

device_tests!(many_sources);

#[test]
fn constructors_and_accessors() -> Result<()> {
    let d = Device::cpu();
    assert_eq!((d.kind(), d.info().backend), (BackendKind::Cpu, BackendKind::Cpu));
    assert!(d.as_cpu().is_some());
    assert!(d.same_device(&d.clone()));
    assert!(!d.same_device(&Device::cpu()), "two cpu() calls are two devices, as CpuBackend::new");
    assert_eq!("CPU".parse::<Device>()?.kind(), BackendKind::Cpu);
    assert_eq!(Device::new(BackendKind::Cpu)?.kind(), BackendKind::Cpu);
    assert!(matches!("metal".parse::<Device>(), Err(Error::InvalidArgument(_))));
    let m = d.allocate(16)?;
    assert_eq!((m.kind(), m.as_cpu().map(gpubuf::DeviceMemory::len)), (BackendKind::Cpu, Some(16)));
    let s = d.new_stream()?;
    assert_ne!(d.stream_id(&s), d.stream_id(d.default_stream()));
    // The CPU's work is done when queued: no event to wait for, through the device too.
    assert!(d.record_pending(&s)?.is_none());
    let g = gpubuf_testkit::gated::Gated::new(d.clone());
    let gs = g.new_stream()?;
    let pending = g.record_pending(&gs)?.ok_or_else(|| Error::invalid("a gated event is pending"))?;
    g.complete(&gs)?;
    assert!(
        g.event_complete(&pending)?
            && g.record_pending(&gs)?.is_some_and(|e| !g.event_complete(&e).unwrap_or(true))
    );
    Ok(())
}

/// Generic code asks the value which backend it is (`Backend::kind`): through a `Device`
/// that is the backend it holds, not the type's constant.
#[test]
fn generic_code_sees_the_backend_a_device_holds() -> Result<()> {
    fn kind_of<B: Backend>(b: &B) -> BackendKind {
        b.kind()
    }
    assert_eq!(kind_of(&Device::cpu()), BackendKind::Cpu);
    #[cfg(feature = "opencl")]
    if let Some(cl) = device_opencl() {
        assert_eq!(kind_of(&cl), BackendKind::OpenCl);
        let a = gpubuf::NDBuffer::<Device, f32>::zeros(&cl, &[2])?;
        assert!(format!("{a:?}").contains("OpenCl"), "{a:?}");
    }
    Ok(())
}

/// Asking for a backend whose feature is off names the feature, through every constructor.
#[cfg(not(all(feature = "cuda", feature = "opencl")))]
fn assert_compiled_out(kind: BackendKind, open: fn() -> Result<Device>) {
    let feature = format!("`{}` feature", kind.name());
    for r in [open(), Device::new(kind), kind.name().parse::<Device>()] {
        match r {
            Err(Error::BackendUnavailable { backend, reason }) => {
                assert_eq!(backend, kind);
                assert!(reason.contains(&feature), "{reason}");
            }
            other => panic!("{kind} compiled out gave {other:?}"),
        }
    }
}

#[cfg(not(feature = "cuda"))]
#[test]
fn cuda_compiled_out_is_backend_unavailable() {
    assert_compiled_out(BackendKind::Cuda, Device::cuda);
}

#[cfg(not(feature = "opencl"))]
#[test]
fn opencl_compiled_out_is_backend_unavailable() {
    assert_compiled_out(BackendKind::OpenCl, Device::opencl);
}

/// Memory, streams, events and plans of one backend given to a device of another.
#[cfg(feature = "opencl")]
#[test]
fn another_backends_objects_are_device_mismatch() -> Result<()> {
    use gpubuf::{CopyPlan, MemRef, Segment};
    fn mismatch<T: std::fmt::Debug>(r: Result<T>) {
        assert!(matches!(r, Err(Error::DeviceMismatch(_))), "expected DeviceMismatch, got {r:?}");
    }
    let Some(cl) = device_opencl() else { return Ok(()) };
    let cpu = device_cpu();
    assert!(!cpu.same_device(&cl) && !cl.same_device(&cpu));
    let (cm, km) = (cpu.allocate(64)?, cl.allocate(64)?);
    let (cs, ks) = (cpu.default_stream(), cl.default_stream());
    mismatch(cl.write(ks, &cm, 0, &[1; 8]));
    mismatch(cl.write(cs, &km, 0, &[1; 8]));
    mismatch(cl.read(ks, &cm, 0, &mut [0; 8]));
    mismatch(cl.copy(ks, MemRef::new(&km, 0, 8)?, &cm, 0));
    mismatch(cl.fill(ks, MemRef::whole(&cm), &[0]));
    mismatch(cl.record_event(cs));
    let ce = cpu.record_event(cs)?;
    mismatch(cl.event_complete(&ce));
    mismatch(cl.wait_event(&ce));
    mismatch(cl.stream_wait(ks, &ce));
    mismatch(cl.synchronize(cs));
    assert_eq!(cl.stream_id(cs), u64::MAX);

    // A gather with one foreign source among its own fails before launching: the
    // destination keeps its bytes.
    let segs = vec![Segment::new(0, 0, &[(2, 1)], 0)?, Segment::new(1, 0, &[(2, 1)], 2)?];
    let plan = CopyPlan::new(vec![2, 2], 4, segs)?;
    let (kplan, cplan) = (cl.prepare(&plan, DType::U8)?, cpu.prepare(&plan, DType::U8)?);
    let dst = cl.allocate(4)?;
    cl.write(ks, &dst, 0, &[9; 4])?;
    let mixed = [MemRef::whole(&km), MemRef::whole(&cm)];
    mismatch(cl.gather(ks, &kplan, &mixed, MemRef::whole(&dst)));
    mismatch(cl.gather(ks, &cplan, &[MemRef::whole(&km); 2], MemRef::whole(&dst)));
    mismatch(cl.scatter(ks, &kplan, MemRef::whole(&cm), &[MemRef::new(&km, 0, 2)?, MemRef::new(&km, 2, 2)?]));
    // Past the ranges narrowed on the stack (16), a foreign last source is refused too.
    let n = 20;
    let segs = (0..n).map(|i| Segment::new(i, 0, &[(1, 1)], i)).collect::<Result<Vec<_>>>()?;
    let wide = cl.prepare(&CopyPlan::new(vec![1; n], n, segs)?, DType::U8)?;
    let dst_wide = cl.allocate(n)?;
    let mut many = vec![MemRef::new(&km, 0, 1)?; n];
    mismatch(cl.gather(ks, &wide, &many, MemRef::whole(&cm)));
    many[n - 1] = MemRef::new(&cm, 0, 1)?;
    mismatch(cl.gather(ks, &wide, &many, MemRef::whole(&dst_wide)));
    mismatch(cl.scatter(ks, &wide, MemRef::whole(&dst_wide), &many));
    let mut back = [0; 4];
    cl.read(ks, &dst, 0, &mut back)?;
    assert_eq!(back, [9; 4]);

    // Arrays of two devices meet in a copy: the device refuses and both stay usable.
    let a = NDBuffer::<Device, f32>::from_slice(&cpu, &[4], &[1., 2., 3., 4.])?;
    let k = NDBuffer::<Device, f32>::zeros(&cl, &[4])?;
    assert!(k.copy_from(&a).is_err());
    assert_eq!(a.to_backend(&cl)?.to_vec()?, [1., 2., 3., 4.]);
    assert!(k.all_equal(0.0)?);
    Ok(())
}

/// Two OpenCL devices (two contexts): transfers, fills and joins refuse the other one's
/// memory, streams and events with a typed error, and both stay usable.
#[cfg(feature = "opencl")]
#[test]
fn two_opencl_contexts_refuse_each_others_transfers() -> Result<()> {
    use gpubuf::MemRef;
    let Some(a) = device_opencl() else { return Ok(()) };
    let b = Device::opencl()?;
    assert!(!a.same_device(&b));
    let (am, bm) = (a.allocate_immediate(64)?, b.allocate_immediate(64)?);
    let (asd, bsd) = (a.default_stream(), b.default_stream());
    a.write(asd, &am, 0, &[7; 64])?;
    b.write(bsd, &bm, 0, &[5; 64])?;
    let ae = a.record_event(asd)?;
    // A gather and a scatter of 16 bytes, with the other device's memory on either side.
    let plan = gpubuf::CopyPlan::new(vec![16], 16, vec![gpubuf::Segment::new(0, 0, &[(16, 1)], 0)?])?;
    let plan = b.prepare(&plan, gpubuf::DType::U8)?;
    let (aw, bw) = (MemRef::new(&am, 0, 16)?, MemRef::new(&bm, 0, 16)?);
    let results = [
        b.write(bsd, &am, 0, &[1; 8]),
        b.write(asd, &bm, 0, &[1; 8]),
        b.read(bsd, &am, 0, &mut [0; 8]),
        b.copy(bsd, MemRef::new(&am, 0, 8)?, &bm, 0),
        b.copy(bsd, MemRef::new(&bm, 0, 8)?, &am, 0),
        b.fill(bsd, MemRef::whole(&am), &[0]),
        b.stream_wait(bsd, &ae),
        b.stream_wait(asd, &ae),
        b.record_event(asd).map(drop),
        b.synchronize(asd),
        b.gather(bsd, &plan, &[aw], bw),
        b.gather(bsd, &plan, &[bw], aw),
        b.scatter(bsd, &plan, aw, &[bw]),
        b.scatter(bsd, &plan, bw, &[aw]),
        b.gather(asd, &plan, &[bw], MemRef::new(&bm, 16, 16)?),
    ];
    for (i, r) in results.iter().enumerate() {
        assert!(matches!(r, Err(Error::DeviceMismatch(_))), "call {i}: {r:?}");
    }
    let mut back = [0; 64];
    a.read(asd, &am, 0, &mut back)?;
    assert_eq!(back, [7; 64]);
    b.read(bsd, &bm, 0, &mut back)?;
    assert_eq!(back, [5; 64]);
    Ok(())
}

/// One OpenCL device used from several threads at once: each thread's arrays come back
/// with its own values.
#[cfg(feature = "opencl")]
#[test]
fn an_opencl_device_from_several_threads() -> Result<()> {
    let Some(d) = device_opencl() else { return Ok(()) };
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let d = d.clone();
                s.spawn(move || -> Result<()> {
                    let stream = d.new_stream()?;
                    for i in 0..20 {
                        let v: Vec<f32> = (0..300).map(|x| (x * (t + 1) + i) as f32).collect();
                        let a = NDBuffer::<Device, f32>::from_slice(&d, &[20, 15], &v)?;
                        let tt = a.transpose(None)?.copy()?;
                        let back = tt.transpose(None)?.to_vec()?;
                        assert_eq!(back, v);
                        let m = d.allocate(64)?;
                        d.fill(&stream, gpubuf::MemRef::whole(&m), &[t as u8])?;
                        let mut out = [0u8; 64];
                        d.read(&stream, &m, 0, &mut out)?;
                        assert_eq!(out, [t as u8; 64]);
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().expect("thread panicked")?;
        }
        Ok(())
    })
}

/// `record_pending` through a `Device` holding OpenCL: an event while queued device work
/// runs (a 64 MiB fill and copy).
#[cfg(feature = "opencl")]
#[test]
fn record_pending_sees_queued_device_work() -> Result<()> {
    let Some(d) = device_opencl() else { return Ok(()) };
    let n = 64 << 20;
    let (a, b) = (d.allocate(n)?, d.allocate(n)?);
    let s = d.new_stream()?;
    let mut pending = false;
    for _ in 0..5 {
        d.fill(&s, gpubuf::MemRef::whole(&a), &[1, 2, 3, 4])?;
        d.copy(&s, gpubuf::MemRef::whole(&a), &b, 0)?;
        if let Some(e) = d.record_pending(&s)? {
            pending = true;
            d.wait_event(&e)?;
            assert!(d.event_complete(&e)?);
            break;
        }
    }
    assert!(pending, "128 MiB of queued work finished before an event could be recorded, five times");
    // On an idle stream OpenCL may still hand back a marker that is queued, not yet run:
    // an event is allowed there, and it completes.
    d.synchronize(&s)?;
    if let Some(e) = d.record_pending(&s)? {
        d.wait_event(&e)?;
        assert!(d.event_complete(&e)?);
    }
    Ok(())
}
