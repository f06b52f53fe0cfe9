//! `gpubuf bench bufferizer`: appends against a plain copy of the same bytes into one
//! destination of the same size (the bufferizer is cleared, not swapped, between rounds, so
//! both write the same memory and share a cache regime).

use super::{gbps, median_secs, progress, Entry, Options};
use gpubuf::bufferizer::{Bufferizer, Input};
use gpubuf::{Buffer, DType, Kernels, NDBuffer, Result};

/// Runs the bufferizer benchmark.
pub fn run<B: Kernels>(b: &B, opts: &Options) -> Result<Vec<Entry>> {
    let s = b.default_stream();
    // (element shape, capacity): 64 bytes, and one 3x640x640 f32 frame (4.9 MB).
    let cases: [(Vec<usize>, usize); 2] =
        [(vec![16], 4096), (vec![3, 640, 640], if opts.quick { 2 } else { 8 })];
    let pb = progress((cases.len() * 4 * opts.reps + opts.reps) as u64, "bufferizer");
    let mut out = Vec::new();
    for (shape, cap) in &cases {
        let n: usize = shape.iter().product();
        let bytes = n * 4;
        let host: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let dev = NDBuffer::<B, f32>::from_slice(b, shape, &host)?;
        let mut buf = Bufferizer::<B, f32>::new(b, shape, *cap, None)?;
        let plain = Buffer::<B>::empty(b, bytes * cap)?;
        let raw: &[u8] = bytemuck::cast_slice(&host);

        let mut fill = |from_device: bool| -> Result<()> {
            for _ in 0..*cap {
                if from_device {
                    buf.append_one(&dev)?;
                } else {
                    buf.append_one(Input::Bytes { shape, dtype: DType::F32, bytes: raw })?;
                }
            }
            buf.clear();
            b.synchronize(s)
        };
        let dev_append = median_secs(opts.reps, &pb, || fill(true))? / *cap as f64;
        let host_append = median_secs(opts.reps, &pb, || fill(false))? / *cap as f64;
        let dev_copy = median_secs(opts.reps, &pb, || {
            for k in 0..*cap {
                b.copy(s, dev.storage(), plain.memory(), k * bytes)?;
            }
            b.synchronize(s)
        })? / *cap as f64;
        let host_copy = median_secs(opts.reps, &pb, || {
            for k in 0..*cap {
                b.write(s, plain.memory(), k * bytes, raw)?;
            }
            b.synchronize(s)
        })? / *cap as f64;
        out.push(Entry::versus(
            format!("append_one_gbps/{bytes}/device"),
            gbps(bytes, dev_append),
            "GB/s",
            gbps(bytes, dev_copy),
        ));
        out.push(Entry::versus(
            format!("append_one_gbps/{bytes}/host"),
            gbps(bytes, host_append),
            "GB/s",
            gbps(bytes, host_copy),
        ));
        if bytes == 64 {
            out.push(Entry::versus("append_one_ns/64", host_append * 1e9, "ns", host_copy * 1e9));
        }
    }
    pb.finish_and_clear();
    Ok(out)
}
