//! proptest strategies: random copy plans with random data, for every dtype.

use gpubuf::{CopyPlan, DType, Segment};
use proptest::prelude::*;

/// A random plan over random source bytes.
#[derive(Debug, Clone)]
pub struct PlanCase {
    /// Element type the plan moves.
    pub dtype: DType,
    /// Bytes of each source (`source_lens[i] * dtype.size()` each).
    pub sources: Vec<Vec<u8>>,
    /// The plan.
    pub plan: CopyPlan,
}

/// One segment's random shape: extents with strides, an axis order, flips, negation,
/// which source, and gaps before it in its source and in the buffer.
#[derive(Debug, Clone)]
struct SegSpec {
    dims: Vec<(usize, isize)>,
    perm_seed: u64,
    flips: Vec<bool>,
    negate: bool,
    source: usize,
    src_gap: usize,
    dst_gap: usize,
}

fn seg_spec(max_extent: usize) -> impl Strategy<Value = SegSpec> {
    (1usize..=4).prop_flat_map(move |nd| {
        (
            prop::collection::vec((0..=max_extent, -6isize..=6), nd),
            any::<u64>(),
            prop::collection::vec(any::<bool>(), nd),
            any::<bool>(),
            0usize..4,
            0usize..5,
            0usize..3,
        )
            .prop_map(|(dims, perm_seed, flips, negate, source, src_gap, dst_gap)| SegSpec {
                dims,
                perm_seed,
                flips,
                negate,
                source,
                src_gap,
                dst_gap,
            })
    })
}

/// A pseudo-random permutation of `0..n` from a seed (Fisher-Yates with an LCG).
fn permutation(n: usize, mut seed: u64) -> Vec<usize> {
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        p.swap(i, (seed >> 33) as usize % (i + 1));
    }
    p
}

/// Deterministic bytes from a seed.
pub fn bytes(n: usize, mut seed: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 24) as u8
        })
        .collect()
}

/// Any dtype.
pub fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.to_vec())
}

/// Builds a case from segment specs. With `injective`, each segment is a permuted and
/// flipped view of its own dense block (so scatter writes each element once); otherwise
/// strides are taken as generated (zero and overlapping strides included).
fn build(dtype: DType, nsrc: usize, specs: Vec<SegSpec>, injective: bool, seed: u64) -> PlanCase {
    let mut src_len = vec![0usize; nsrc];
    let mut dst = 0usize;
    let mut segments = Vec::new();
    for s in &specs {
        let src = s.source % nsrc;
        let shape: Vec<usize> = s.dims.iter().map(|d| d.0).collect();
        let mut strides: Vec<isize> = if injective {
            let mut acc = 1isize;
            let mut st = vec![0isize; shape.len()];
            for k in (0..shape.len()).rev() {
                st[k] = acc;
                acc *= shape[k].max(1) as isize;
            }
            st
        } else {
            s.dims.iter().map(|d| d.1).collect()
        };
        for (k, f) in s.flips.iter().enumerate() {
            if *f {
                strides[k] = -strides[k];
            }
        }
        let perm = permutation(shape.len(), s.perm_seed);
        let dims: Vec<(usize, isize)> = perm.iter().map(|&k| (shape[k], strides[k])).collect();
        let n: usize = shape.iter().product();
        let (mut lo, mut hi) = (0isize, 0isize);
        for &(e, st) in &dims {
            if e > 0 {
                let reach = (e as isize - 1) * st;
                if reach < 0 {
                    lo += reach
                } else {
                    hi += reach
                }
            }
        }
        let offset = src_len[src] + s.src_gap + (-lo) as usize;
        if n > 0 {
            src_len[src] = (offset as isize + hi + 1) as usize;
        }
        dst += s.dst_gap;
        // A dtype without negation (bool) gets none: plans that negate refuse it.
        let seg = Segment::new(src, offset, &dims, dst)
            .expect("at most 4 dims")
            .negated(s.negate && dtype.negatable());
        dst += n;
        segments.push(seg);
    }
    let src_len: Vec<usize> = src_len.iter().map(|&l| l + 2).collect();
    let plan = CopyPlan::new(src_len.clone(), dst + 1, segments).expect("generated plans are valid");
    let sources = src_len
        .iter()
        .enumerate()
        .map(|(i, &l)| bytes(l * dtype.size(), seed.wrapping_add(i as u64)))
        .collect();
    PlanCase { dtype, sources, plan }
}

/// Random plans: 1-4 sources, 1-`max_segments` segments of 1-4 axes with extents up to
/// `max_extent`, negative and zero strides, random negation (where the dtype has one),
/// every dtype.
pub fn plan_case(max_segments: usize, max_extent: usize, injective: bool) -> impl Strategy<Value = PlanCase> {
    (dtype(), 1usize..=4, prop::collection::vec(seg_spec(max_extent), 1..=max_segments), any::<u64>())
        .prop_map(move |(d, nsrc, specs, seed)| build(d, nsrc, specs, injective, seed))
}
