//! `gpubuf bench halo`: pack and unpack of NDSL-sized exchanges against a device copy of
//! the same buffer bytes, measured in the same run. Both start cold: a 128 MiB scratch
//! buffer is filled (untimed) before every repetition, evicting the last-level cache on the
//! CPU and the L2 on a GPU, as a model step between two exchanges would.

use super::{gbps, progress, Entry, Options};
use gpubuf::halo::{Boundary, Dim, HaloDataTransformer, HaloExchangeSpec, QuantityHaloSpec};
use gpubuf::{Buffer, DType, Kernels, NDBuffer, Result};

struct Case {
    name: &'static str,
    quantities: usize,
    n: usize,
    rotation: i32,
    vector: bool,
}

const CASES: [Case; 4] = [
    Case { name: "c192_rot0", quantities: 8, n: 192, rotation: 0, vector: false },
    Case { name: "c192_rot1", quantities: 8, n: 192, rotation: 1, vector: false },
    Case { name: "c192_vec_rot1", quantities: 8, n: 192, rotation: 1, vector: true },
    Case { name: "c48_q30", quantities: 30, n: 48, rotation: 0, vector: false },
];

/// Runs the halo benchmark: 80 levels, a 3-point halo, the four edges of every quantity.
pub fn run<B: Kernels>(b: &B, opts: &Options) -> Result<Vec<Entry>> {
    let pb = progress((CASES.len() * 3 * opts.reps) as u64, "halo");
    let s = b.default_stream();
    let scratch = Buffer::<B>::zeros(b, 128 << 20)?;
    let mut round = 0u8;
    let mut evict = || {
        round = round.wrapping_add(1);
        scratch.fill(&[round])?;
        b.synchronize(s)
    };
    let mut out = Vec::new();
    for c in &CASES {
        let n = if opts.quick { c.n / 4 } else { c.n };
        let spec = QuantityHaloSpec::centered(&[Dim::X, Dim::Y, Dim::Z], &[n, n, 80], 3, 0, DType::F64)?;
        let edges = [Boundary::North, Boundary::South, Boundary::East, Boundary::West];
        // Vectors: half the arrays are x components, half y, so every case moves 8 (or 30) arrays.
        let pairs = if c.vector { c.quantities / 2 } else { c.quantities };
        let arrays: Vec<NDBuffer<B, f64>> = (0..c.quantities)
            .map(|k| NDBuffer::create(b, &spec.shape, gpubuf::Order::C, Some(k as f64 + 0.5)))
            .collect::<Result<_>>()?;
        let mut sx = Vec::new();
        let mut qx = Vec::new();
        let mut qy = Vec::new();
        for p in 0..pairs {
            for &e in &edges {
                sx.push(HaloExchangeSpec::for_boundary(spec.clone(), e, c.rotation)?);
                qx.push(&arrays[p]);
                if c.vector {
                    qy.push(&arrays[pairs + p]);
                }
            }
        }
        let sy = if c.vector { Some(sx.clone()) } else { None };
        let mut t = HaloDataTransformer::<B, f64>::new(b, sx, sy)?;
        let ys = c.vector.then_some(qy.as_slice());
        let bytes = t.buffer_len() * 8;
        let (src, dst) = (Buffer::<B>::zeros(b, bytes)?, Buffer::<B>::zeros(b, bytes)?);
        // Interleave the three measurements (each after an eviction) so drift in the
        // machine's speed hits them alike; the first two rounds warm up.
        let mut times: [Vec<f64>; 3] = Default::default();
        for round in 0..opts.reps + 2 {
            for (k, slot) in times.iter_mut().enumerate() {
                evict()?;
                let t0 = std::time::Instant::now();
                match k {
                    0 => b.copy(s, src.memref(), dst.memory(), 0)?,
                    1 => t.async_pack(&qx, ys)?,
                    _ => t.async_unpack(&qx, ys)?,
                }
                b.synchronize(s)?;
                t.synchronize()?;
                if round >= 2 {
                    slot.push(t0.elapsed().as_secs_f64());
                    pb.inc(1);
                }
            }
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2]
        };
        let [mut c0, mut c1, mut c2] = times;
        let (copy, pack, unpack) = (median(&mut c0), median(&mut c1), median(&mut c2));
        let base = gbps(bytes, copy);
        out.push(Entry::versus(format!("{}/pack_gbps", c.name), gbps(bytes, pack), "GB/s", base));
        out.push(Entry::versus(format!("{}/unpack_gbps", c.name), gbps(bytes, unpack), "GB/s", base));
    }
    pb.finish_and_clear();
    Ok(out)
}
