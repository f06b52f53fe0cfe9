//! Plans shaped to reach every path of the block plan kernels (CUDA, OpenCL on GPUs, and
//! OpenCL with the block shape forced): long rows of stride +1 (16-byte moves where both
//! ends are aligned, element moves where not), reversed rows, transposed segments in tiles
//! with partial edge tiles, rows longer and shorter than a block, many short segments,
//! every element width, negation, and arrays and buffers at odd element offsets; and every
//! path of the row-walking plan kernel (OpenCL with the row shape forced): unit
//! boundaries inside a segment and inside a row, reversed outer axes, reversed and
//! strided rows, transposed rows in whole 64 x 64 tiles and in tiles cut by a unit's end,
//! a carry or the edges, rotations and flipped transposes turned into tiles. Each
//! backend's gather and scatter is compared with the host reference.

use gpubuf::{CopyPlan, DType, Kernels, MemRef, Result, Segment};
use gpubuf_testkit::strategies::{bytes, plan_case, PlanCase};
use gpubuf_testkit::{exec, on_every_backend, reference, EachBackend};
use proptest::prelude::*;

/// A plan case run with its sources and buffer placed `lead` elements into their
/// allocations (so the kernels see those element offsets).
struct Placed<'a> {
    case: &'a PlanCase,
    lead: usize,
}

impl EachBackend for Placed<'_> {
    type Output = (Vec<u8>, Vec<Vec<u8>>);
    fn run<B: Kernels>(&self, b: &B) -> Result<Self::Output> {
        let (case, size) = (self.case, self.case.dtype.size());
        let lead = self.lead * size;
        let padded = |data: &[u8], seed| -> Result<B::Memory> {
            let mut v = bytes(lead, seed);
            v.extend_from_slice(data);
            exec::upload(b, &v)
        };
        let refs = |mems: &[B::Memory]| -> Result<Vec<(usize, Vec<u8>)>> {
            mems.iter().map(|m| Ok((lead, exec::download(b, m)?))).collect()
        };
        let blen = case.plan.buffer_len() * size;
        let s = b.default_stream();
        // Gather.
        let srcs: Vec<B::Memory> = case.sources.iter().map(|d| padded(d, 1)).collect::<Result<_>>()?;
        let src_refs: Vec<MemRef<'_, B::Memory>> = srcs
            .iter()
            .zip(&case.sources)
            .map(|(m, d)| MemRef::new(m, lead, d.len()))
            .collect::<Result<_>>()?;
        let buf = padded(&bytes(blen, 5), 2)?;
        let plan = b.prepare(&case.plan, case.dtype)?;
        b.gather(s, &plan, &src_refs, MemRef::new(&buf, lead, blen)?)?;
        let packed = exec::download(b, &buf)?[lead..].to_vec();
        // Scatter the packed buffer into fresh targets.
        let targets: Vec<B::Memory> =
            case.sources.iter().map(|d| padded(&bytes(d.len(), 6), 3)).collect::<Result<_>>()?;
        let target_refs: Vec<MemRef<'_, B::Memory>> = targets
            .iter()
            .zip(&case.sources)
            .map(|(m, d)| MemRef::new(m, lead, d.len()))
            .collect::<Result<_>>()?;
        b.scatter(s, &plan, MemRef::new(&buf, lead, blen)?, &target_refs)?;
        let unpacked = refs(&targets)?.into_iter().map(|(l, v)| v[l..].to_vec()).collect();
        Ok((packed, unpacked))
    }
}

/// Checks every backend (OpenCL in every kernel shape) against the host reference.
fn check(case: &PlanCase, lead: usize) {
    let results = on_every_backend(&Placed { case, lead }).unwrap();
    let initial = bytes(case.plan.buffer_len() * case.dtype.size(), 5);
    let want = reference::gather(&case.plan, case.dtype, &case.sources, &initial);
    let fresh: Vec<Vec<u8>> = case.sources.iter().map(|s| bytes(s.len(), 6)).collect();
    let want_unpacked = reference::scatter(&case.plan, case.dtype, &want, &fresh);
    for (i, (kind, (packed, unpacked))) in results.iter().enumerate() {
        let at = packed.iter().zip(&want).position(|(a, b)| a != b);
        assert!(at.is_none(), "{kind} (run {i}) gather differs at byte {at:?}, {:?} lead {lead}", case.dtype);
        assert!(unpacked == &want_unpacked, "{kind} (run {i}) scatter differs, {:?} lead {lead}", case.dtype);
    }
}

/// One segment: its source, its (extent, stride) dims, whether it negates.
type Spec = (usize, Vec<(usize, isize)>, bool);

/// A case from segments given as (source, dims, negate): each placed after the previous
/// one in its source (after `gap` elements), in the buffer one after another.
fn case(dtype: DType, nsrc: usize, gap: usize, segs: &[Spec]) -> PlanCase {
    let mut lens = vec![0usize; nsrc];
    let mut dst = 0;
    let mut out = Vec::new();
    for (src, dims, negate) in segs {
        let (mut lo, mut hi) = (0isize, 0isize);
        for &(e, st) in dims {
            let reach = (e as isize - 1) * st;
            if reach < 0 {
                lo += reach;
            } else {
                hi += reach;
            }
        }
        let offset = lens[*src] + gap + (-lo) as usize;
        lens[*src] = (offset as isize + hi + 1) as usize;
        out.push(Segment::new(*src, offset, dims, dst).unwrap().negated(*negate));
        dst += dims.iter().map(|d| d.0).product::<usize>();
    }
    let plan = CopyPlan::new(lens.clone(), dst, out).unwrap();
    let sources = lens.iter().enumerate().map(|(i, &l)| bytes(l * dtype.size(), 11 + i as u64)).collect();
    PlanCase { dtype, sources, plan }
}

/// One dtype of each width, the float ones negating by the sign bit.
const WIDTHS: [DType; 4] = [DType::U8, DType::F16, DType::I32, DType::F64];

#[test]
fn long_rows_aligned_and_not() {
    for dtype in WIDTHS {
        for gap in [0, 1, 3, 16] {
            // Rows of stride +1 of whole blocks and a shifted last block; one reversed.
            let segs = vec![
                (0, vec![(5000, 1)], false),
                (1, vec![(2048, 1)], true),
                (0, vec![(3000, -1)], true),
                (1, vec![(1024, 1)], false),
            ];
            for lead in [0, 1, 4] {
                check(&case(dtype, 2, gap, &segs), lead);
            }
        }
    }
}

#[test]
fn transposed_segments_in_tiles() {
    for dtype in WIDTHS {
        let segs = vec![
            // Source contiguous along dim 2: tiles of 32 x 32 with partial edges.
            (0, vec![(50, 1), (70, 50)], false),
            // Flipped along the contiguous dim, negated.
            (0, vec![(40, -1), (9, 40)], true),
            // Outer dims that do not merge, an edge of 8 (the smallest tiled extent).
            (1, vec![(3, 2000), (2, 700), (33, 1), (8, 40)], false),
            // Too narrow for a tile (7): the general path.
            (1, vec![(64, 1), (7, 64)], true),
        ];
        for lead in [0, 3] {
            check(&case(dtype, 2, 1, &segs), lead);
        }
    }
}

#[test]
fn strided_boxes_and_rows_longer_than_a_block() {
    for dtype in WIDTHS {
        let segs = vec![
            // Rows of 45 out of 50: carries over three dims within a block.
            (0, vec![(7, 1650), (33, 50), (45, 1)], false),
            // Rows of 1500 out of 1600: blocks straddle rows longer than a block.
            (0, vec![(3, 1600), (1500, 1)], true),
            // Stride 3, reversed outer dim, and a zero-extent-free 4-d box.
            (1, vec![(1100, 3)], false),
            (1, vec![(2, -300), (5, 60), (6, 10), (9, -1)], true),
        ];
        check(&case(dtype, 2, 2, &segs), 1);
    }
}

/// Segments cut into blocks row by row (rows of source stride ±1 at least half a block
/// long, more than one of them): rows shorter than a block (OpenCL's 1024), rows of exactly
/// one block, rows longer than a block with a shifted last block, reversed rows, reversed
/// outer dims and four dims that do not merge; on CUDA (blocks of 4096) the rows of 2100
/// and more.
#[test]
fn rows_of_half_a_block_and_more() {
    for dtype in WIDTHS {
        let segs = vec![
            (0, vec![(3, 700), (600, 1)], false),
            (0, vec![(4, 1100), (1024, 1)], true),
            (1, vec![(2, 9000), (3, 3000), (2500, -1)], true),
            (1, vec![(2, -6000), (5000, 1)], false),
            (0, vec![(2, 40000), (3, 11000), (2, 5200), (2100, 1)], false),
            (1, vec![(5, -520), (513, -1)], false),
        ];
        for lead in [0, 1, 2] {
            check(&case(dtype, 2, i_gap(dtype), &segs), lead);
        }
    }
}

/// More segments than one round of the block kernels' segment search covers twice over
/// (257 per round): three rounds.
#[test]
fn seventy_thousand_segments() {
    let segs: Vec<Spec> = (0..70_000)
        .map(|i| {
            let dims = if i % 2 == 0 { vec![(1 + i % 3, 1)] } else { vec![(2, -1)] };
            (i % 2, dims, i % 5 == 0)
        })
        .collect();
    check(&case(DType::I16, 2, 1, &segs), 1);
}

#[test]
fn many_short_segments() {
    for dtype in WIDTHS {
        let segs: Vec<Spec> = (0..400)
            .map(|i| {
                let dims = match i % 5 {
                    0 => vec![(1 + i % 7, 1)],
                    1 => vec![(1 + i % 3, -1)],
                    2 => vec![(2, 5), (3, 1)],
                    3 => vec![(1 + i % 4, 2)],
                    _ => vec![(3, -1), (2, 3)],
                };
                (i % 3, dims, i % 2 == 0)
            })
            .collect();
        check(&case(dtype, 3, 1, &segs), 1);
    }
}

/// Elements per unit of the row kernel.
const UNIT: usize = 32 * 1024;

#[test]
fn row_units_inside_segments_and_rows() {
    #[cfg(feature = "opencl")]
    assert_eq!(gpubuf::opencl::ROW_UNIT, UNIT);
    for dtype in [DType::U8, DType::I32, DType::F32, DType::I64] {
        let segs = vec![
            // Rows of 1000 of 1200: units of 32 rows, the last one short.
            (0, vec![(70, 1200), (1000, 1)], true),
            // One row longer than two units: column ranges, the last one short.
            (1, vec![(2 * UNIT + 7, 1)], false),
            // The same reversed, negated; and strided.
            (1, vec![(UNIT + 5, -1)], true),
            (0, vec![(UNIT + 3, 2)], false),
        ];
        check(&case(dtype, 2, 3, &segs), 1);
    }
}

#[test]
fn row_walks_reversed_outer_axes() {
    for dtype in WIDTHS {
        let segs = vec![
            // Reversed outer axes walk forwards; the buffer takes the reversal.
            (0, vec![(4, -3000), (3, -50), (40, 1)], true),
            (0, vec![(6, -40), (40, 1)], false),
            // Fully flipped dense box: reversed rows; a 4-d box of mixed signs.
            (1, vec![(6, -40), (40, -1)], true),
            (1, vec![(3, -700), (5, 140), (7, -20), (11, -1)], false),
            // Axes given innermost-first in the array: reordered to memory order.
            (2, vec![(9, 1), (5, -9), (4, 45)], true),
        ];
        for lead in [0, 1] {
            check(&case(dtype, 3, 1, &segs), lead);
        }
    }
}

#[test]
fn row_tiles_with_partial_edges() {
    for dtype in [DType::U8, DType::F16, DType::U32, DType::F64] {
        let segs = vec![
            // Transposed rows of 50 (array stride 1), 3 x 410 rows: units of 640 rows end
            // and start inside a run of 410, so tiles are cut by a unit's end and by a carry.
            (0, vec![(3, 20500), (50, 1), (410, 50)], true),
            // A transpose whose rows are longer than a unit: one row per unit.
            (1, vec![(UNIT + 9, 1), (3, UNIT as isize + 9)], false),
            // Small transposes: fewer rows than a tile, and one of 17 rows.
            (0, vec![(5, 1), (3, 5)], true),
            (1, vec![(6, -1), (17, 6)], false),
        ];
        check(&case(dtype, 2, 1, &segs), 3);
    }
}

/// Elements on a side of the row kernel's transposed tiles.
const TILE: usize = 64;

#[test]
fn row_tiles_whole_and_cut() {
    for dtype in [DType::U8, DType::F16, DType::F32, DType::I64] {
        let t = TILE as isize;
        let segs = vec![
            // Whole tiles only (128 x 192), negated.
            (0, vec![(2 * TILE, 1), (3 * TILE, 2 * t)], true),
            // Partial tiles on the edges: 140 rows of 100; 66 rows of 127 (one column
            // short of a second tile), negated.
            (0, vec![(100, 1), (140, 100)], false),
            (0, vec![(127, 1), (66, 127)], true),
            // 1 x N and N x 1: a single column of rows, a single row (no transpose left).
            (1, vec![(1, 1), (TILE + 3, 1)], false),
            (1, vec![(TILE + 3, 1), (1, 70)], true),
            // Rows of a transpose longer than a unit's share of a tile band (1040 > 512):
            // 40 rows, one short band in column ranges of whole tiles, a short last range.
            (0, vec![(1040, 1), (40, 1040)], true),
            // The same in two runs of 20 rows: the band crosses a run, its tiles cut by
            // the carry.
            (1, vec![(2, 60_000), (1040, 1), (20, 1040)], false),
            // Runs of 65 rows along axis 2 (two outer axes that do not merge): a whole
            // tile and a row of one per run.
            (1, vec![(2, 50_000), (3, 16_000), (70, 1), (65, 240)], false),
            // Long rows in runs of 100: bands of 64 and 36 rows from each run's start.
            (0, vec![(2, 70_000), (600, 1), (100, 600)], true),
        ];
        for lead in [0, 1, 5] {
            check(&case(dtype, 2, 3, &segs), lead);
        }
    }
}

#[test]
fn row_tiles_of_flips_and_rotations() {
    for dtype in [DType::U8, DType::F16, DType::I32, DType::F64] {
        let segs = vec![
            // Rotations by 90 degrees both ways (one stride negated), negated or not.
            (0, vec![(70, 1), (100, -70)], true),
            (0, vec![(70, -1), (100, 70)], false),
            // A transpose flipped on both axes, 3-d with an outer reversed axis.
            (1, vec![(65, -1), (130, -65)], true),
            (1, vec![(3, -9000), (68, -1), (130, 68)], false),
            // Narrow rows (3 wide) of a rotated halo strip: no whole tile, column by column.
            (2, vec![(5, 800), (3, -1), (100, 8)], true),
        ];
        for lead in [0, 3] {
            check(&case(dtype, 3, 1, &segs), lead);
        }
    }
}

#[test]
fn many_tiny_segments_in_every_mode() {
    for dtype in [DType::U8, DType::I64, DType::F32] {
        let segs: Vec<Spec> = (0..1500)
            .map(|i| {
                let dims = match i % 6 {
                    0 => vec![(1, 1)],
                    1 => vec![(2, -1)],
                    2 => vec![(2, 1), (3, 2)],
                    3 => vec![(3, 3)],
                    4 => vec![(2, -4), (2, 1)],
                    _ => vec![(1 + i % 5, 1)],
                };
                (i % 4, dims, i % 3 == 0)
            })
            .collect();
        check(&case(dtype, 4, i_gap(dtype), &segs), 1);
    }
}

/// An odd gap for one dtype, none for others.
fn i_gap(dtype: DType) -> usize {
    usize::from(dtype.size() != 8)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    /// Random plans with extents up to 12 (tiles, blocks of several rows, and short
    /// segments), at random element offsets.
    #[test]
    fn random_larger_plans(case in plan_case(4, 12, true), lead in 0usize..3) {
        check(&case, lead);
    }
}

/// `GPUBUF_CL_KERNEL` picks the shape (`blocks`, `items`, `rows`, any case), anything else is a
/// typed error when a plan is prepared, and a shape given to the handle wins over it. Runs
/// in a child process so the variable cannot reach other tests.
#[cfg(feature = "opencl")]
#[test]
fn opencl_kernel_setting_is_checked() {
    if gpubuf_testkit::opencl().is_none() {
        return;
    }
    for value in ["blocks", " Items ", "ROWS", "block", "gpu"] {
        let out = gpubuf_testkit::child_test("opencl_kernel_child")
            .env(gpubuf::opencl::KERNEL_ENV, value)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{}={value}: {text}", gpubuf::opencl::KERNEL_ENV);
        assert!(text.contains("1 passed"), "the child ran: {text}");
    }
}

/// Without a setting, the shape follows the device type: blocks on GPUs and accelerators,
/// rows on CPU devices (PoCL here).
#[cfg(feature = "opencl")]
#[test]
fn opencl_default_shape_follows_the_device_type() {
    use gpubuf::opencl::{PlanKernel, KERNEL_ENV};
    if std::env::var_os(KERNEL_ENV).is_some() {
        return;
    }
    let Some(cl) = gpubuf_testkit::opencl() else { return };
    let want = if cl.is_gpu() { PlanKernel::Blocks } else { PlanKernel::Rows };
    assert_eq!(cl.plan_kernel().unwrap(), want, "{}", cl.entry().info.name);
}

/// The child of [`opencl_kernel_setting_is_checked`].
#[cfg(feature = "opencl")]
#[test]
#[ignore = "run by opencl_kernel_setting_is_checked with the variable set"]
fn opencl_kernel_child() {
    use gpubuf::opencl::{OpenClBackend, PlanKernel, KERNEL_ENV};
    use gpubuf::Error;
    let value = std::env::var(KERNEL_ENV).unwrap_or_default();
    let cl = OpenClBackend::new().unwrap();
    let plan = case(DType::I32, 1, 0, &[(0, vec![(2000, -1)], false)]);
    let want = match value.trim().to_ascii_lowercase().as_str() {
        "blocks" => Some(PlanKernel::Blocks),
        "items" => Some(PlanKernel::Items),
        "rows" => Some(PlanKernel::Rows),
        _ => None,
    };
    match (want, cl.plan_kernel(), cl.prepare(&plan.plan, DType::I32)) {
        (Some(w), Ok(k), Ok(_)) => assert_eq!(w, k),
        (None, Err(Error::InvalidArgument(m)), Err(Error::InvalidArgument(_))) => {
            assert!(m.contains(KERNEL_ENV), "{m}")
        }
        (w, k, p) => panic!("{value:?}: wanted {w:?}, got {k:?} and {:?}", p.map(|_| "a plan")),
    }
    // A shape given to the handle wins over the variable, and its plans run.
    for kernel in [PlanKernel::Blocks, PlanKernel::Items, PlanKernel::Rows] {
        let forced = cl.with_plan_kernel(kernel);
        assert_eq!(forced.plan_kernel().unwrap(), kernel);
        let (packed, _) = Placed { case: &plan, lead: 1 }.run(&forced).unwrap();
        let initial = bytes(plan.plan.buffer_len() * 4, 5);
        assert!(packed == reference::gather(&plan.plan, DType::I32, &plan.sources, &initial), "{kernel}");
    }
}
