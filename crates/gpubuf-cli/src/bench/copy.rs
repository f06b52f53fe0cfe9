//! `gpubuf bench copy`: copy-plan gathers against a plain device copy of the same bytes.
//!
//! Every case moves the same number of buffer bytes as its baseline, a device-to-device
//! copy (on the CPU backend a copy split over the same rayon threads as the gather), on
//! the same device in the same run. Sizes exceed the last-level cache in both.
//!
//! On OpenCL each case has a second baseline: the best hand-written kernel for the same
//! access pattern (`<case>/gather_vs_hand`, `<case>/scatter_vs_hand`): a one-line copy
//! kernel (`b[i] = a[i]`, one work-item per element, the runtime's work-group size) for
//! the contiguous, reversed and strip cases, and a local-memory tiled transpose (the
//! fastest of 16, 32 and 64 wide tiles the device takes) for `transpose2d`.

use super::{gbps, median_secs, progress, Entry, Options};
use gpubuf::{CopyPlan, DType, Kernels, Layout, MemRef, Order, Result, Segment};
use indicatif::ProgressBar;

struct Case {
    name: &'static str,
    /// The case is a square transpose of this side (its hand-written baseline is tiled).
    #[cfg_attr(not(feature = "opencl"), allow(dead_code))]
    transpose: Option<usize>,
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
        transpose: None,
        source_len: n,
        plan: CopyPlan::new(vec![n], n, vec![Segment::new(0, 0, &[(n, 1)], 0)?])?,
        dtype: DType::F32,
    });
    let t = Layout::contiguous(&[side, side], Order::C)?.transposed();
    out.push(Case {
        name: "transpose2d",
        transpose: Some(side),
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
        transpose: None,
        source_len: nz * nx * nx,
        plan: CopyPlan::new(vec![nz * nx * nx], at, segs)?,
        dtype: DType::F64,
    });
    out.push(Case {
        name: "reverse_negate",
        transpose: None,
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
        if let Some(hand) = hand_baseline(b, c, opts, &pb)? {
            let hand = gbps(bytes, hand);
            out.push(Entry::versus(format!("{}/gather_vs_hand", c.name), gbps(bytes, gather), "GB/s", hand));
            out.push(Entry::versus(
                format!("{}/scatter_vs_hand", c.name),
                gbps(bytes, scatter),
                "GB/s",
                hand,
            ));
        }
    }
    pb.finish_and_clear();
    Ok(out)
}

/// Median seconds of the best hand-written kernel for case `c` on an OpenCL backend (see
/// the module docs); `None` on other backends.
#[cfg(feature = "opencl")]
fn hand_baseline<B: Kernels>(b: &B, c: &Case, opts: &Options, pb: &ProgressBar) -> Result<Option<f64>> {
    use gpubuf::opencl::OpenClBackend;
    use gpubuf::{kernel::KernelArg, kernel::Launch, Allocator, Backend};
    let Some(cl) = (b as &dyn std::any::Any).downcast_ref::<OpenClBackend>() else { return Ok(None) };
    let s = cl.default_stream();
    let bytes = c.plan.total() * c.dtype.size();
    let (src, dst) = (cl.allocate_immediate(bytes)?, cl.allocate_immediate(bytes)?);
    cl.fill(s, MemRef::whole(&src), &[0x3f])?;
    let args = [KernelArg::Memory(&src), KernelArg::Memory(&dst)];
    let Some(side) = c.transpose else {
        let k = cl.user_kernel(COPY_KERNEL, "", "copy")?;
        let launch = Launch::new(&[bytes / 4])?;
        return median_secs(opts.reps, pb, || {
            k.launch(s, &launch, &args)?;
            cl.synchronize(s)
        })
        .map(Some);
    };
    let mut best: Option<f64> = None;
    for tile in [16usize, 32, 64] {
        let Ok(k) = cl.user_kernel(&format!("#define TILE {tile}\n{TRANSPOSE_KERNEL}"), "", "transpose")
        else {
            continue;
        };
        let launch = Launch::new(&[side, side])?.with_local(&[tile, tile])?;
        let n = u32::try_from(side).map_err(|_| gpubuf::Error::invalid("side"))?;
        let args = [KernelArg::Memory(&src), KernelArg::Memory(&dst), KernelArg::U32(n)];
        // A tile the device or kernel cannot take is skipped, not a failure.
        if k.launch(s, &launch, &args).is_err() {
            continue;
        }
        let t = median_secs(opts.reps, pb, || {
            k.launch(s, &launch, &args)?;
            cl.synchronize(s)
        })?;
        best = Some(best.map_or(t, |b| b.min(t)));
    }
    Ok(best)
}

#[cfg(not(feature = "opencl"))]
fn hand_baseline<B: Kernels>(_: &B, _: &Case, _: &Options, _: &ProgressBar) -> Result<Option<f64>> {
    Ok(None)
}

/// The one-line copy kernel: 4-byte words, one work-item each.
#[cfg(feature = "opencl")]
const COPY_KERNEL: &str = "__kernel void copy(__global const uint* a, __global uint* b) {
    size_t i = get_global_id(0);
    b[i] = a[i];
}";

/// A tiled transpose of an n x n matrix of 4-byte words: b = a^T through a local tile.
#[cfg(feature = "opencl")]
const TRANSPOSE_KERNEL: &str = "__kernel void transpose(__global const uint* a, __global uint* b, uint n) {
    __local uint tile[TILE][TILE + 1];
    size_t gx = get_group_id(0) * TILE, gy = get_group_id(1) * TILE;
    size_t lx = get_local_id(0), ly = get_local_id(1);
    tile[ly][lx] = a[(gy + ly) * n + gx + lx];
    barrier(CLK_LOCAL_MEM_FENCE);
    b[(gx + ly) * n + gy + lx] = tile[lx][ly];
}";
