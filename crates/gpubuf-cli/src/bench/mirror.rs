//! `gpubuf bench mirror`: what a sync uploads after sparse writes, exact ranges against
//! glumpy's single hull and a full upload.

use super::{median_secs, progress, Entry, Options};
use gpubuf::mirror::{DirtyPolicy, Mirror, Transfer};
use gpubuf::{Kernels, Result};
use ndarray::{Array1, IxDyn};

/// 100 writes of 64 bytes (16 f32) at fixed pseudo-random places, plus the first and the
/// last element; returns the bytes they cover.
fn scatter_writes<B: Kernels>(m: &mut Mirror<B, f32>, n: usize, round: u64) -> Result<usize> {
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut covered = std::collections::BTreeSet::new();
    for _ in 0..100 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let at = (seed % (n as u64 - 16)) as usize;
        let v = m.view(&[at..at + 16])?;
        m.fill(&v, round as f32)?;
        covered.extend(at..at + 16);
    }
    m.set(&[0], round as f32)?;
    m.set(&[n - 1], round as f32)?;
    covered.insert(0);
    covered.insert(n - 1);
    Ok(covered.len() * 4)
}

/// Runs the mirror benchmark.
pub fn run<B: Kernels>(b: &B, opts: &Options) -> Result<Vec<Entry>> {
    let n = if opts.quick { 1 << 20 } else { 16 << 20 }; // f32: 4 or 64 MiB
    let host = Array1::<f32>::zeros(n)
        .into_shape_with_order(IxDyn(&[n]))
        .map_err(|e| gpubuf::Error::invalid(e.to_string()))?;
    let pb = progress((3 * opts.reps) as u64, "mirror");
    let mut out = Vec::new();
    let mut written = 0;
    let mut results: Vec<(&str, Transfer, f64)> = Vec::new();
    for (name, policy) in
        [("ranges", DirtyPolicy::exact()), ("hull", DirtyPolicy::hull()), ("full", DirtyPolicy::exact())]
    {
        let mut m = Mirror::new(b, host.view(), policy, None)?;
        let mut last = Transfer::default();
        let mut round = 0u64;
        let secs = median_secs(opts.reps, &pb, || {
            round += 1;
            written = scatter_writes(&mut m, n, round)?;
            last = if name == "full" { m.upload_all()? } else { m.sync()? };
            b.synchronize(m.device().backend().default_stream())
        })?;
        // Check the upload did its job.
        let dev = m.device().to_vec()?;
        if dev[0] != round as f32 || dev[n - 1] != round as f32 {
            return Err(gpubuf::Error::invalid(format!("{name}: the device copy is stale after sync")));
        }
        results.push((name, last, secs));
    }
    let full_secs = results.iter().find(|r| r.0 == "full").map_or(1.0, |r| r.2);
    out.push(Entry {
        name: "scattered/bytes_written".into(),
        value: written as f64,
        unit: "B".into(),
        baseline: None,
        ratio: None,
    });
    for (name, t, secs) in &results {
        out.push(Entry::versus(
            format!("scattered/bytes_uploaded_{name}"),
            t.bytes as f64,
            "B",
            written as f64,
        ));
        out.push(Entry::versus(format!("scattered/sync_us_{name}"), secs * 1e6, "us", full_secs * 1e6));
    }
    pb.finish_and_clear();
    Ok(out)
}
