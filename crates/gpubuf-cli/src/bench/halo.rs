//! `gpubuf bench halo`: pack and unpack of NDSL-sized exchanges against two baselines
//! measured in the same run, interleaved with them:
//!
//! * a device copy of the same buffer bytes (`<case>/pack_gbps`, `unpack_gbps`): the
//!   fastest the machine moves that many bytes;
//! * on the CPU backend, a plain loop over the same rows of the same boxes on the same
//!   threads, without the plan executor ([`gpubuf::cpu::baseline`];
//!   `<case>/pack_vs_hand`, `unpack_vs_hand`): the fastest the access pattern
//!   allows. Below the hand loop is the executor's overhead; below the copy but level with
//!   the hand loop is the machine.
//!
//! Cold figures: a 128 MiB scratch buffer is filled (untimed) before every measurement,
//! evicting the last-level cache on the CPU and the L2 on a GPU, as a model step between
//! two exchanges would. `--warm` adds `warm/<case>/...` figures: each operation timed
//! right after an untimed run of itself, nothing evicted (back-to-back exchanges).

use super::{gbps, progress, Entry, Options};
use gpubuf::halo::{Boundary, Dim, HaloDataTransformer, HaloExchangeSpec, QuantityHaloSpec};
use gpubuf::{Buffer, CopyPlan, DType, Error, Kernels, MemRef, NDBuffer, Result, Segment};
use std::any::Any;
use std::time::Instant;

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

/// What one timed slot runs.
#[derive(Clone, Copy, PartialEq)]
enum Op {
    Copy,
    HandPack,
    Pack,
    HandUnpack,
    Unpack,
}

/// Runs the halo benchmark: 80 levels, a 3-point halo, the four edges of every quantity.
pub fn run<B: Kernels>(b: &B, opts: &Options) -> Result<Vec<Entry>> {
    let cpu = (b as &dyn Any).is::<gpubuf::cpu::CpuBackend>();
    let ops: Vec<Op> = if cpu {
        vec![Op::Copy, Op::HandPack, Op::Pack, Op::HandUnpack, Op::Unpack]
    } else {
        vec![Op::Copy, Op::Pack, Op::Unpack]
    };
    let regimes = if opts.warm { 2 } else { 1 };
    let pb = progress((CASES.len() * ops.len() * opts.reps * regimes) as u64, "halo");
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
        let (mut sx, mut qx, mut qy) = (Vec::new(), Vec::new(), Vec::new());
        // The array behind each plan source (x specs, then y specs).
        let (mut owner_x, mut owner_y) = (Vec::new(), Vec::new());
        for p in 0..pairs {
            for &e in &edges {
                sx.push(HaloExchangeSpec::for_boundary(spec.clone(), e, c.rotation)?);
                qx.push(&arrays[p]);
                owner_x.push(p);
                if c.vector {
                    qy.push(&arrays[pairs + p]);
                    owner_y.push(pairs + p);
                }
            }
        }
        let owner: Vec<usize> = owner_x.into_iter().chain(owner_y).collect();
        let sy = if c.vector { Some(sx.clone()) } else { None };
        let mut t = HaloDataTransformer::<B, f64>::new(b, sx, sy)?;
        let ys = c.vector.then_some(qy.as_slice());
        let bytes = t.buffer_len() * 8;
        let (src, dst) = (Buffer::<B>::zeros(b, bytes)?, Buffer::<B>::zeros(b, bytes)?);
        let hand = if cpu { Some(Hand::new(&t, &owner, &arrays, &src, &dst)?) } else { None };
        let mut run_op = |op: Op| -> Result<()> {
            match (op, &hand) {
                (Op::Copy, _) => b.copy(s, src.memref(), dst.memory(), 0)?,
                (Op::Pack, _) => t.async_pack(&qx, ys)?,
                (Op::Unpack, _) => t.async_unpack(&qx, ys)?,
                (Op::HandPack, Some(h)) => h.pack()?,
                (Op::HandUnpack, Some(h)) => h.unpack()?,
                _ => return Err(Error::invalid("the hand-loop baseline runs on the CPU backend only")),
            }
            b.synchronize(s)?;
            t.synchronize()
        };
        for warm in [false, true].into_iter().take(regimes) {
            // Interleave the measurements so drift in the machine's speed hits them alike;
            // the first two rounds warm up.
            let mut times: Vec<Vec<f64>> = vec![Vec::new(); ops.len()];
            for round in 0..opts.reps + 2 {
                for (k, &op) in ops.iter().enumerate() {
                    if warm {
                        run_op(op)?;
                    } else {
                        evict()?;
                    }
                    let t0 = Instant::now();
                    run_op(op)?;
                    if round >= 2 {
                        times[k].push(t0.elapsed().as_secs_f64());
                        pb.inc(1);
                    }
                }
            }
            let at = |op: Op| {
                ops.iter().position(|&o| o == op).map(|k| gbps(bytes, median(&mut times[k].clone())))
            };
            let name = |metric: &str| {
                if warm {
                    format!("warm/{}/{metric}", c.name)
                } else {
                    format!("{}/{metric}", c.name)
                }
            };
            let (copy, pack, unpack) = (at(Op::Copy), at(Op::Pack), at(Op::Unpack));
            let (copy, pack, unpack) = (copy.unwrap_or(0.0), pack.unwrap_or(0.0), unpack.unwrap_or(0.0));
            out.push(Entry::versus(name("pack_gbps"), pack, "GB/s", copy));
            if let Some(h) = at(Op::HandPack) {
                out.push(Entry::versus(name("pack_vs_hand"), pack, "GB/s", h));
            }
            out.push(Entry::versus(name("unpack_gbps"), unpack, "GB/s", copy));
            if let Some(h) = at(Op::HandUnpack) {
                out.push(Entry::versus(name("unpack_vs_hand"), unpack, "GB/s", h));
            }
        }
    }
    pb.finish_and_clear();
    Ok(out)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The hand-loop baseline of one case on the CPU backend: the transformer's plans with
/// each source mapped to its distinct array (as the transformer does at launch), run by
/// [`gpubuf::cpu::baseline`] into the copy's destination and from its source.
struct Hand<'a> {
    pack: CopyPlan,
    unpack: CopyPlan,
    arrays: Vec<MemRef<'a, gpubuf::cpu::CpuMemory>>,
    src: MemRef<'a, gpubuf::cpu::CpuMemory>,
    dst: MemRef<'a, gpubuf::cpu::CpuMemory>,
}

impl<'a> Hand<'a> {
    fn new<B: Kernels>(
        t: &HaloDataTransformer<B, f64>,
        owner: &[usize],
        arrays: &'a [NDBuffer<B, f64>],
        src: &'a Buffer<B>,
        dst: &'a Buffer<B>,
    ) -> Result<Self> {
        let not_cpu = || Error::invalid("the hand-loop baseline runs on the CPU backend only");
        let buffer = |x: &'a Buffer<B>| -> Result<MemRef<'a, gpubuf::cpu::CpuMemory>> {
            let x = (x as &dyn Any).downcast_ref::<Buffer<gpubuf::cpu::CpuBackend>>().ok_or_else(not_cpu)?;
            Ok(x.memref())
        };
        let refs = arrays
            .iter()
            .map(|a| {
                let a = (a as &dyn Any)
                    .downcast_ref::<NDBuffer<gpubuf::cpu::CpuBackend, f64>>()
                    .ok_or_else(not_cpu)?;
                let r = a.storage();
                let skip = a.layout().offset().checked_mul(8).filter(|&k| k <= r.len).ok_or_else(not_cpu)?;
                Ok(MemRef { memory: r.memory, offset: r.offset + skip, len: r.len - skip })
            })
            .collect::<Result<Vec<_>>>()?;
        let remap = |p: &CopyPlan| -> Result<CopyPlan> {
            let mut lens = vec![0usize; arrays.len()];
            for (k, &u) in owner.iter().enumerate() {
                lens[u] = lens[u].max(p.source_lens()[k]);
            }
            let segs: Vec<Segment> =
                p.segments().iter().map(|s| Segment { source: owner[s.source], ..*s }).collect();
            CopyPlan::new(lens, p.buffer_len(), segs)
        };
        let compiled = t.compiled();
        Ok(Hand {
            pack: remap(&compiled.pack)?,
            unpack: remap(&compiled.unpack)?,
            arrays: refs,
            src: buffer(src)?,
            dst: buffer(dst)?,
        })
    }

    fn pack(&self) -> Result<()> {
        gpubuf::cpu::baseline::row_gather(&self.pack, DType::F64, &self.arrays, self.dst)
    }

    fn unpack(&self) -> Result<()> {
        gpubuf::cpu::baseline::row_scatter(&self.unpack, DType::F64, self.src, &self.arrays)
    }
}
