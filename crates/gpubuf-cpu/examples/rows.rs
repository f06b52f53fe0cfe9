//! Where a halo pack's time goes on this machine: 640-byte rows read at a stride of 1.5 KB
//! to 124 KB, cold, by the plan executor, by the plain row loop of
//! [`gpubuf_cpu::baseline`] on the same huge-page memory, and by the same loop over a heap
//! `Vec` (4 KiB pages: the TLB's share; one thread), against a memcpy of the same bytes;
//! then long rows (an east or west edge) below and above the streaming-store threshold.
//! `cargo run --release -p gpubuf-cpu --example rows`; `RAYON_NUM_THREADS=1` gives the
//! per-thread figures, `REPS=n` the repetitions (15).
use gpubuf_core::{Allocator, Backend, CopyPlan, DType, Kernels, MemRef, Result, Segment};
use gpubuf_cpu::{baseline, CpuBackend, CpuMemory};
use std::time::Instant;

const ARRAY: usize = 256 << 20;

fn main() -> Result<()> {
    let b = CpuBackend::new();
    let s = b.default_stream();
    let reps: usize =
        std::env::var("REPS").ok().and_then(|r| r.parse().ok()).filter(|&r| r > 0).unwrap_or(15);
    let array = b.allocate_immediate(ARRAY)?;
    let heap = vec![1u8; ARRAY];
    let scratch = b.allocate_immediate(128 << 20)?;
    let (buf, src) = (b.allocate_immediate(16 << 20)?, b.allocate_immediate(16 << 20)?);
    let mut round = 0u8;
    let mut evict = || {
        round = round.wrapping_add(1);
        b.fill(s, MemRef::whole(&scratch), &[round])
    };
    println!("threads {}, cold, GB/s (ratio to memcpy)", rayon::current_num_threads());
    println!("{:<24} {:>8} {:>14} {:>14} {:>14}", "pattern", "memcpy", "plan", "row loop", "row loop 4K");
    let short =
        [1536usize, 4096, 16384, 34560, 126720].map(|st| (format!("640 B rows / {st} B"), 640, st, 1 << 20));
    let long = [(2 << 20), (8 << 20)]
        .map(|total| (format!("122880 B rows, {} MiB", total >> 20), 122880, 126720, total));
    for (name, row, stride, total) in short.into_iter().chain(long) {
        let rows = total / row;
        let seg = Segment::new(0, 0, &[(rows, (stride / 8) as isize), (row / 8, 1)], 0)?;
        let plan = CopyPlan::new(vec![ARRAY / 8], rows * row / 8, vec![seg])?;
        let prepared = b.prepare(&plan, DType::F64)?;
        let bytes = rows * row;
        let out = MemRef::new(&buf, 0, bytes)?;
        let mut t = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
        for _ in 0..reps + 1 {
            for (k, v) in t.iter_mut().enumerate() {
                evict()?;
                let t0 = Instant::now();
                match k {
                    0 => b.copy(s, MemRef::new(&src, 0, bytes)?, &buf, 0)?,
                    1 => b.gather(s, &prepared, &[MemRef::whole(&array)], out)?,
                    2 => baseline::row_gather(&plan, DType::F64, &[MemRef::whole(&array)], out)?,
                    _ => heap_rows(&heap, &buf, row, stride, rows)?,
                }
                v.push(t0.elapsed().as_secs_f64());
            }
        }
        let gb = |v: &mut Vec<f64>| {
            v.remove(0);
            v.sort_by(f64::total_cmp);
            bytes as f64 / v[v.len() / 2] / 1e9
        };
        let [mut c, mut p, mut h, mut f] = t;
        let base = gb(&mut c);
        let cell = |x: f64| format!("{x:.2} ({:.2})", x / base);
        println!(
            "{name:<24} {base:>8.2} {:>14} {:>14} {:>14}",
            cell(gb(&mut p)),
            cell(gb(&mut h)),
            cell(gb(&mut f))
        );
    }
    Ok(())
}

/// The row loop over a heap `Vec` (4 KiB pages), on the calling thread alone: compare it
/// with the `RAYON_NUM_THREADS=1` figures of the other two.
fn heap_rows(heap: &[u8], buf: &CpuMemory, row: usize, stride: usize, rows: usize) -> Result<()> {
    buf.with_bytes_mut(|out| {
        for (k, o) in out[..rows * row].chunks_exact_mut(row).enumerate() {
            let at = k * stride;
            o.copy_from_slice(&heap[at..at + row]);
        }
    })
}
