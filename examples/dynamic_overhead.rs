//! What choosing the backend at run time costs on hot paths: the halo pack and unpack and
//! the pool's hit path, through `gpubuf::Device` and through the concrete backend type
//! (the generic path, the baseline), on the same device in the same process.
//!
//! Both paths share one backend handle (the `Device` wraps a clone of it), so they use the
//! same context, queue and compiled programs. The two are timed in alternating
//! repetitions after a warm-up, in batches long enough to dwarf the timer; each figure is
//! the median of the repetitions. Caches are warm for both (the arrays are reused), which
//! makes per-call overhead as visible as it gets. One JSON line per figure:
//! `{"name":..., "value":..., "unit":..., "baseline":..., "ratio":...}` where `value` is
//! through `Device`, `baseline` through the concrete type and `ratio = value / baseline`.
//!
//! Run: `cargo run --release -p gpubuf-examples --features opencl --example dynamic_overhead -- opencl`
//! (`cpu` by default; `--reps N` sets the repetitions, 41 by default).

use gpubuf::halo::{Boundary, Dim, HaloDataTransformer, HaloExchangeSpec, QuantityHaloSpec};
use gpubuf::{Backend, BackendKind, DType, Device, Error, Kernels, MemoryPool, NDBuffer, Order, Result};
use std::time::{Duration, Instant};

/// Horizontal sizes of the halo cases (80 levels would make the larger ones slow on PoCL).
const SIZES: [usize; 3] = [12, 48, 192];
const LEVELS: usize = 10;
const QUANTITIES: usize = 4;
/// A repetition runs about this long.
const BATCH: Duration = Duration::from_millis(5);

/// One figure: `Device` against the concrete type.
fn line(name: &str, unit: &str, value: f64, baseline: f64) {
    println!(
        "{{\"name\":\"{name}\",\"value\":{value:.4},\"unit\":\"{unit}\",\"baseline\":{baseline:.4},\"ratio\":{:.4}}}",
        value / baseline
    );
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Calls per batch so that one batch of `f` lasts about [`BATCH`].
fn calibrate(f: &mut dyn FnMut() -> Result<()>) -> Result<usize> {
    let mut n = 1usize;
    loop {
        // The fastest of three tries: one preempted try must not shrink the batches.
        let mut e = Duration::MAX;
        for _ in 0..3 {
            let t = Instant::now();
            for _ in 0..n {
                f()?;
            }
            e = e.min(t.elapsed());
        }
        if e >= BATCH / 4 || n >= 1 << 24 {
            let per = e.as_secs_f64() / n as f64;
            return Ok(((BATCH.as_secs_f64() / per.max(1e-9)) as usize).max(1));
        }
        n *= 4;
    }
}

/// Median seconds per call of `device` and of `generic`, timed in alternating batches.
fn compare(
    reps: usize,
    mut device: impl FnMut() -> Result<()>,
    mut generic: impl FnMut() -> Result<()>,
) -> Result<(f64, f64)> {
    let iters = calibrate(&mut generic)?.min(calibrate(&mut device)?);
    let mut times: [Vec<f64>; 2] = Default::default();
    for rep in 0..reps + 2 {
        for k in [rep % 2, 1 - rep % 2] {
            let f: &mut dyn FnMut() -> Result<()> = if k == 0 { &mut device } else { &mut generic };
            let t = Instant::now();
            for _ in 0..iters {
                f()?;
            }
            if rep >= 2 {
                times[k].push(t.elapsed().as_secs_f64() / iters as f64);
            }
        }
    }
    let [d, g] = times;
    Ok((median(d), median(g)))
}

/// A transformer and the arrays it exchanges.
type HaloCase<B> = (HaloDataTransformer<B, f64>, Vec<NDBuffer<B, f64>>);

/// A transformer over the four edges of [`QUANTITIES`] arrays of an `n` x `n` x [`LEVELS`]
/// field with a 3-point halo, and the arrays.
fn halo_case<B: Kernels>(b: &B, n: usize) -> Result<HaloCase<B>> {
    let spec = QuantityHaloSpec::centered(&[Dim::X, Dim::Y, Dim::Z], &[n, n, LEVELS], 3, 0, DType::F64)?;
    let arrays = (0..QUANTITIES)
        .map(|k| NDBuffer::create(b, &spec.shape, Order::C, Some(k as f64)))
        .collect::<Result<Vec<_>>>()?;
    let mut specs = Vec::new();
    for _ in 0..QUANTITIES {
        for e in [Boundary::North, Boundary::South, Boundary::East, Boundary::West] {
            specs.push(HaloExchangeSpec::for_boundary(spec.clone(), e, 1)?);
        }
    }
    Ok((HaloDataTransformer::new(b, specs, None)?, arrays))
}

/// The quantities of [`halo_case`] in spec order (each array once per edge).
fn fields<B: Kernels>(arrays: &[NDBuffer<B, f64>]) -> Vec<&NDBuffer<B, f64>> {
    arrays.iter().flat_map(|a| [a; 4]).collect()
}

fn run<B: Kernels>(concrete: B, device: Device, reps: usize) -> Result<()> {
    let kind = device.kind();
    for n in SIZES {
        let (mut td, ad) = halo_case(&device, n)?;
        let (mut tg, ag) = halo_case(&concrete, n)?;
        let (fd, fg) = (fields(&ad), fields(&ag));
        let (d, g) = compare(
            reps,
            || {
                td.async_pack(&fd, None)?;
                td.synchronize()
            },
            || {
                tg.async_pack(&fg, None)?;
                tg.synchronize()
            },
        )?;
        line(&format!("halo_pack/{kind}/n{n}"), "us", d * 1e6, g * 1e6);
        let (d, g) = compare(
            reps,
            || {
                td.async_unpack(&fd, None)?;
                td.synchronize()
            },
            || {
                tg.async_unpack(&fg, None)?;
                tg.synchronize()
            },
        )?;
        line(&format!("halo_unpack/{kind}/n{n}"), "us", d * 1e6, g * 1e6);
    }
    for size in [256usize, 1 << 20] {
        pool_figures(&concrete, &device, size, reps)?;
    }
    Ok(())
}

/// The pool's hit path through `Device` and through the concrete type, on a stream and
/// without one (the control: a host-side hit never calls the backend, so both sides run
/// the same code).
///
/// Where a pool's internals land in memory moves a hit by a few percent, more than the
/// dispatch costs, so every repetition builds a fresh pair of pools (alternating which is
/// built first) and times both paths on them; the figures are medians over repetitions.
/// `ratio_to_control` divides the stream ratio by the control ratio of the same pools.
fn pool_figures<B: Kernels>(concrete: &B, device: &Device, size: usize, reps: usize) -> Result<()> {
    let kind = device.kind();
    let (sd, sg) = (device.default_stream(), concrete.default_stream());
    let iters = {
        let (pd, pg) = (MemoryPool::new(device.clone()), MemoryPool::new(concrete.clone()));
        calibrate(&mut || pg.allocate_on(size, concrete, sg).map(drop))?
            .min(calibrate(&mut || pd.allocate_on(size, device, sd).map(drop))?)
    };
    let time = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
        let t = Instant::now();
        for _ in 0..iters {
            f()?;
        }
        Ok(t.elapsed().as_secs_f64() / iters as f64)
    };
    // [stream device, stream concrete, control device, control concrete]
    let mut times: [Vec<f64>; 4] = Default::default();
    let mut adjusted = Vec::new();
    for rep in 0..reps + 2 {
        let (pd, pg) = if rep % 2 == 0 {
            let pd = MemoryPool::new(device.clone());
            (pd, MemoryPool::new(concrete.clone()))
        } else {
            let pg = MemoryPool::new(concrete.clone());
            (MemoryPool::new(device.clone()), pg)
        };
        // The first allocation of a fresh pool is a miss: keep it out of the timings.
        pd.allocate_on(size, device, sd).map(drop)?;
        pg.allocate_on(size, concrete, sg).map(drop)?;
        let mut t = [0.0; 4];
        for k in [rep % 2, 1 - rep % 2] {
            if k == 0 {
                t[0] = time(&mut || pd.allocate_on(size, device, sd).map(drop))?;
                t[2] = time(&mut || pd.allocate(size).map(drop))?;
            } else {
                t[1] = time(&mut || pg.allocate_on(size, concrete, sg).map(drop))?;
                t[3] = time(&mut || pg.allocate(size).map(drop))?;
            }
        }
        if rep >= 2 {
            for (v, x) in times.iter_mut().zip(t) {
                v.push(x);
            }
            adjusted.push((t[0] / t[1]) / (t[2] / t[3]));
        }
    }
    let [d, g, cd, cg] = times.map(median);
    line(&format!("pool_hit_on_stream/{kind}/{size}"), "ns", d * 1e9, g * 1e9);
    line(&format!("pool_hit_no_stream_control/{kind}/{size}"), "ns", cd * 1e9, cg * 1e9);
    println!(
        "{{\"name\":\"pool_hit_on_stream_to_control/{kind}/{size}\",\"ratio\":{:.4}}}",
        median(adjusted)
    );
    Ok(())
}

fn main() -> Result<()> {
    let mut kind = BackendKind::Cpu;
    let mut reps = 41;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--reps" {
            let v = args.next().unwrap_or_default();
            reps = v.parse().map_err(|_| Error::invalid(format!("--reps takes a count, not {v:?}")))?;
        } else {
            kind = a.parse()?;
        }
    }
    let reps = reps.max(1);
    let device = Device::new(kind)?;
    match kind {
        BackendKind::Cpu => {
            let concrete = device.as_cpu().cloned().ok_or_else(|| Error::invalid("not a cpu device"))?;
            run(concrete, device, reps)
        }
        #[cfg(feature = "opencl")]
        BackendKind::OpenCl => {
            let concrete =
                device.as_opencl().cloned().ok_or_else(|| Error::invalid("not an opencl device"))?;
            run(concrete, device, reps)
        }
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => {
            let concrete = device.as_cuda().cloned().ok_or_else(|| Error::invalid("not a cuda device"))?;
            run(concrete, device, reps)
        }
        #[allow(unreachable_patterns)]
        other => Err(Error::invalid(format!("{other} was not compiled in"))),
    }
}
