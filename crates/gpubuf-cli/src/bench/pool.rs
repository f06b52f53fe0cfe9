//! `gpubuf bench pool`: the pool's hit path against the raw allocator, a long mixed
//! workload, and the hit path from two threads.

use super::{median_secs, progress, Entry, Options};
use gpubuf::pool::{ImmediateAllocator, MemoryPool};
use gpubuf::{Allocator, Kernels, Result};
use std::time::Instant;

/// Median nanoseconds per call of `f`, timing batches of `iters` calls.
fn ns_per(
    reps: usize,
    iters: usize,
    pb: &indicatif::ProgressBar,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    let secs = median_secs(reps, pb, || {
        for _ in 0..iters {
            f()?;
        }
        Ok(())
    })?;
    Ok(secs * 1e9 / iters as f64)
}

/// A fixed-seed xorshift generator (the workload must be the same on every run).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Runs the pool benchmark.
pub fn run<B: Kernels>(b: &B, opts: &Options) -> Result<Vec<Entry>> {
    let sizes: [usize; 4] = [256, 65536, 4 << 20, 64 << 20];
    let pb = progress((sizes.len() * 2 * opts.reps + 3 * opts.reps) as u64, "pool");
    let mut out = Vec::new();
    let raw = ImmediateAllocator(b.clone());
    for &size in &sizes {
        let pool = MemoryPool::new(ImmediateAllocator(b.clone()));
        drop(pool.allocate(size)?);
        let hit = ns_per(opts.reps, if opts.quick { 2000 } else { 20000 }, &pb, || {
            drop(pool.allocate(size)?);
            Ok(())
        })?;
        let raw_iters = if size >= 4 << 20 { 3 } else { 200 };
        let raw_ns = ns_per(opts.reps, raw_iters, &pb, || {
            drop(raw.allocate(size)?);
            Ok(())
        })?;
        out.push(Entry::versus(format!("hit_ns/{size}"), hit, "ns", raw_ns));
        out.push(Entry {
            name: format!("raw_ns/{size}"),
            value: raw_ns,
            unit: "ns".into(),
            baseline: None,
            ratio: None,
        });
    }

    // Mixed: 64 live buffers, 20000 operations (free one at random, allocate a new one),
    // sizes log-uniform in 1 KiB..8 MiB, fixed seed.
    let ops = if opts.quick { 4000 } else { 20000 };
    let pool = MemoryPool::new(ImmediateAllocator(b.clone()));
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let size = |rng: &mut Rng| (1024.0 * (8192.0f64).powf(rng.unit())) as usize;
    let mut live = Vec::with_capacity(64);
    let (mut live_bytes, mut peak_live) = (0usize, 0usize);
    for _ in 0..64 {
        let s = size(&mut rng);
        live.push(pool.allocate(s)?);
        live_bytes += s;
    }
    peak_live = peak_live.max(live_bytes);
    let t = Instant::now();
    for _ in 0..ops {
        let i = (rng.next() % 64) as usize;
        let s = size(&mut rng);
        live_bytes -= live[i].len();
        live[i] = pool.allocate(s)?;
        live_bytes += s;
        peak_live = peak_live.max(live_bytes);
    }
    let ns_per_op = t.elapsed().as_secs_f64() * 1e9 / ops as f64;
    let st = pool.stats();
    let hit_rate = st.hits as f64 / (st.hits + st.misses).max(1) as f64;
    out.push(Entry {
        name: "mixed/ns_per_op".into(),
        value: ns_per_op,
        unit: "ns".into(),
        baseline: None,
        ratio: None,
    });
    out.push(Entry {
        name: "mixed/hit_rate".into(),
        value: hit_rate,
        unit: "".into(),
        baseline: None,
        ratio: None,
    });
    out.push(Entry {
        name: "mixed/managed_over_peak_live".into(),
        value: st.managed_bytes as f64 / peak_live as f64,
        unit: "x".into(),
        baseline: None,
        ratio: None,
    });
    drop(live);

    // The hit path with two threads at once.
    let pool = MemoryPool::new(ImmediateAllocator(b.clone()));
    drop(pool.allocate(256)?);
    let iters = if opts.quick { 2000 } else { 20000 };
    let threads = median_secs(opts.reps, &pb, || {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| -> Result<()> {
                        for _ in 0..iters {
                            drop(pool.allocate(256)?);
                        }
                        Ok(())
                    })
                })
                .collect();
            hs.into_iter()
                .try_for_each(|h| h.join().unwrap_or_else(|_| Err(gpubuf::Error::invalid("thread panicked"))))
        })
    })?;
    out.push(Entry {
        name: "threads/hit_ns".into(),
        value: threads * 1e9 / iters as f64,
        unit: "ns".into(),
        baseline: None,
        ratio: None,
    });
    pb.finish_and_clear();
    Ok(out)
}
