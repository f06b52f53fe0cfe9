//! Times the pool's hit path the way `gpubuf bench pool` does (a profiling aid:
//! `cargo run --release -p gpubuf-pool --example hit`).
use gpubuf_cpu::CpuBackend;
use gpubuf_pool::{ImmediateAllocator, MemoryPool};
use std::time::Instant;

fn main() -> gpubuf_core::Result<()> {
    let pool = MemoryPool::new(ImmediateAllocator(CpuBackend::new()));
    let n = 2_000_000;
    for size in [256, 4 << 20] {
        drop(pool.allocate(size)?);
        for _ in 0..2 {
            let t = Instant::now();
            for _ in 0..n {
                drop(pool.allocate(std::hint::black_box(size))?);
            }
            println!(
                "{size} bytes: {:.1} ns per allocate+release",
                t.elapsed().as_secs_f64() * 1e9 / n as f64
            );
        }
    }
    Ok(())
}
