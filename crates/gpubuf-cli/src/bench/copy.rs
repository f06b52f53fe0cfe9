//! `gpubuf bench copy`: copy-plan gathers against a plain device copy of the same bytes.
//!
//! Every case moves the same number of buffer bytes as its baseline, a device-to-device
//! copy (on the CPU backend a copy split over the same rayon threads as the gather), on
//! the same device in the same run. Sizes exceed the last-level cache in both.

use super::{gbps, median_secs, progress, Entry, Options};
use gpubuf::{CopyPlan, DType, Kernels, Layout, MemRef, Order, Result, Segment};

struct Case {
    name: &'static str,
    source_len: usize,
    plan: CopyPlan,
    dtype: DType,
}

fn cases(quick: bool) -> Result<Vec<Case>> {
    let n: usize = if quick { 1 << 20 } else { 16 << 20 }; // f32 elements: 4 or 64 MiB
    let side = (n as f64).sqrt() as usize;
    let mut out = Vec::new();
    out.push(Case {
        name: "contig",
        source_len: n,
        plan: CopyPlan::new(vec![n], n, vec![Segment::new(0, 0, &[(n, 1)], 0)?])?,
        dtype: DType::F32,
    });
    let t = Layout::contiguous(&[side, side], Order::C)?.transposed();
    out.push(Case {
        name: "transpose2d",
        source_len: side * side,
        plan: CopyPlan::new(vec![side * side], side * side, Segment::from_layout(0, &t, 0)?)?,
        dtype: DType::F32,
    });
    // Halo strips: the four 3-wide interior edges of an (nz, ny, nx) f64 field.
    let (nz, h) = (80usize, 3usize);
    let nx = ((n / 2 / nz) as f64).sqrt() as usize; // f64: half as many elements for the same bytes
    let field = Layout::contiguous(&[nz, nx, nx], Order::C)?;
    let mut segs = Vec::new();
    let mut at = 0;
    for r in [[0..nz, h..2 * h, h..nx - h], [0..nz, nx - 2 * h..nx - h, h..nx - h]]
        .into_iter()
        .chain([[0..nz, 2 * h..nx - 2 * h, h..2 * h], [0..nz, 2 * h..nx - 2 * h, nx - 2 * h..nx - h]])
    {
        let v = field.sliced(&r)?;
        let s = Segment::from_layout(0, &v, at)?;
        at += v.size();
        segs.extend(s);
    }
    out.push(Case {
        name: "halo_strips",
        source_len: nz * nx * nx,
        plan: CopyPlan::new(vec![nz * nx * nx], at, segs)?,
        dtype: DType::F64,
    });
    out.push(Case {
        name: "reverse_negate",
        source_len: n,
        plan: CopyPlan::new(vec![n], n, vec![Segment::new(0, n - 1, &[(n, -1)], 0)?.negated(true)])?,
        dtype: DType::F32,
    });
    Ok(out)
}

/// Runs every case; returns `<case>/gather_gbps` and `<case>/scatter_gbps` entries.
pub fn run<B: Kernels>(b: &B, opts: &Options) -> Result<Vec<Entry>> {
    let cases = cases(opts.quick)?;
    let pb = progress((cases.len() * opts.reps * 3) as u64, "copy plans");
    let s = b.default_stream();
    let mut out = Vec::new();
    for c in &cases {
        let size = c.dtype.size();
        let bytes = c.plan.total() * size;
        let src = b.allocate_immediate(c.source_len * size)?;
        let buf = b.allocate_immediate(c.plan.buffer_len() * size)?;
        b.fill(s, MemRef::whole(&src), &[0x3f])?;
        let plan = b.prepare(&c.plan, c.dtype)?;
        let base_src = b.allocate_immediate(bytes)?;
        let base_dst = b.allocate_immediate(bytes)?;
        let copy = median_secs(opts.reps, &pb, || {
            b.copy(s, MemRef::whole(&base_src), &base_dst, 0)?;
            b.synchronize(s)
        })?;
        let gather = median_secs(opts.reps, &pb, || {
            b.gather(s, &plan, &[MemRef::whole(&src)], MemRef::whole(&buf))?;
            b.synchronize(s)
        })?;
        let scatter = median_secs(opts.reps, &pb, || {
            b.scatter(s, &plan, MemRef::whole(&buf), &[MemRef::whole(&src)])?;
            b.synchronize(s)
        })?;
        let base = gbps(bytes, copy);
        out.push(Entry::versus(format!("{}/gather_gbps", c.name), gbps(bytes, gather), "GB/s", base));
        out.push(Entry::versus(format!("{}/scatter_gbps", c.name), gbps(bytes, scatter), "GB/s", base));
    }
    pb.finish_and_clear();
    Ok(out)
}
