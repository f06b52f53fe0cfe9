//! Times the pool's hit path (a profiling aid: `cargo run --release -p gpubuf-pool --example hit`).
use gpubuf_cpu::CpuBackend;
use gpubuf_pool::MemoryPool;
use std::time::Instant;

fn main() {
    let pool = MemoryPool::new(CpuBackend::new());
    drop(pool.allocate(256));
    let n = 5_000_000;
    for _ in 0..3 {
        let t = Instant::now();
        for _ in 0..n {
            drop(std::hint::black_box(pool.allocate(256)));
        }
        println!("hit pair: {:.1} ns", t.elapsed().as_secs_f64() * 1e9 / n as f64);
    }
}
