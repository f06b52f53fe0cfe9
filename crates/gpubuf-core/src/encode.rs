//! The device form of a copy plan, shared by the OpenCL and CUDA kernels.
//!
//! Each segment becomes [`SEG_WORDS`] `i64` words:
//! `source, offset, e0, e1, e2, e3, s0, s1, s2, s3, dst_offset, negate`.
//! `starts` holds the prefix sums of the segment lengths (`nseg + 1` words), so a work-item
//! with global index `t < total` finds its segment by binary search and its position in
//! the box by decomposing `t - starts[k]` over the extents. No per-element index arrays.
//!
//! [`encode_blocks`] is the form the block-shaped plan kernels run (CUDA, and OpenCL on GPU
//! devices): each segment's dims merged where the source is dense across them, and cut
//! into blocks of one work-group (CUDA block) each: [`BlockShape::elems`] consecutive
//! buffer elements, or a [`BlockShape::tile`] x [`BlockShape::tile`] tile of a transposed
//! segment. A work-group finds its segment once, by one search over the per-segment prefix
//! sums of block counts, and its first element once. The table is [`BLOCK_WORDS`] words
//! per segment, never per element or block.

use crate::{CopyPlan, Segment, MAX_DIMS};

/// Words per segment in [`EncodedPlan::segments`].
pub const SEG_WORDS: usize = 4 + 2 * MAX_DIMS;

/// A plan flattened for upload to a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedPlan {
    /// [`SEG_WORDS`] words per non-empty segment.
    pub segments: Vec<i64>,
    /// Prefix sums of the segment lengths, `nseg + 1` entries starting at 0.
    pub starts: Vec<i64>,
    /// Elements moved (the last entry of `starts`).
    pub total: usize,
}

impl EncodedPlan {
    /// Number of encoded (non-empty) segments.
    pub fn nseg(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }
}

/// One count or index as a device word. Exact for every number of a valid plan: a
/// [`CopyPlan`] keeps lengths, offsets and extents at most `isize::MAX` (= `i64::MAX` on
/// 64-bit hosts; smaller elsewhere), and source indices of fewer sources than elements.
fn word(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Flattens `plan`, dropping empty segments.
pub fn encode(plan: &CopyPlan) -> EncodedPlan {
    let mut segments = Vec::with_capacity(plan.segments().len().saturating_mul(SEG_WORDS));
    let mut starts = vec![0i64];
    let mut total = 0usize;
    for s in plan.segments().iter().filter(|s| !s.is_empty()) {
        segments.push(word(s.source));
        segments.push(word(s.offset));
        segments.extend(s.extents.iter().map(|&e| word(e)));
        // isize -> i64 is lossless on every target Rust supports (pointers of at most 64 bits).
        segments.extend(s.strides.iter().map(|&e| e as i64));
        segments.push(word(s.dst_offset));
        segments.push(i64::from(s.negate));
        // Buffer ranges are disjoint and inside the buffer: the sum stays <= buffer_len.
        total = total.saturating_add(s.len());
        starts.push(word(total));
    }
    EncodedPlan { segments, starts, total }
}

/// Words per segment in [`BlockPlan::segments`]: the [`SEG_WORDS`] of [`encode`] (with
/// merged dims), then the mode and the segment's length.
pub const BLOCK_WORDS: usize = SEG_WORDS + 2;

/// Block mode of a segment moved as runs of [`BlockShape::elems`] consecutive buffer
/// elements.
pub const MODE_LINEAR: i64 = 0;

/// Block mode of a transposed segment (source stride ±1 on dim 2, not on dim 3), moved in
/// tiles through local (shared) memory.
pub const MODE_TILE: i64 = 1;

/// Block mode of a segment whose rows (dim 3, source stride ±1) are at least half a block
/// long and more than one: each row is cut into `ceil(e3 / elems)` blocks of its own (the
/// last one of a row ending at the row's end), so no block spans two rows and every block
/// moves by the contiguous path.
pub const MODE_ROWS: i64 = 2;

/// The most buffer elements a block may hold (the kernels' division by a multiply and a
/// shift is exact for dividends below twice the block).
pub const MAX_BLOCK_ELEMS: usize = 4096;

/// Buffer elements per block and tile side of a block plan: `elems` a power of four,
/// `tile * tile == elems`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockShape {
    elems: usize,
    tile: usize,
}

impl BlockShape {
    /// The largest power of four at most `elems` clamped to `1..=MAX_BLOCK_ELEMS`.
    pub fn new(elems: usize) -> Self {
        let e = elems.clamp(1, MAX_BLOCK_ELEMS);
        let mut tile = 1;
        while tile * tile * 4 <= e {
            tile *= 2;
        }
        BlockShape { elems: tile * tile, tile }
    }
    /// Buffer elements per block.
    pub fn elems(self) -> usize {
        self.elems
    }
    /// Side of a transposed segment's tile.
    pub fn tile(self) -> usize {
        self.tile
    }
}

/// A plan cut into blocks for the block-shaped plan kernels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockPlan {
    /// [`BLOCK_WORDS`] words per non-empty segment.
    pub segments: Vec<i64>,
    /// Prefix sums of the segments' block counts, `nseg + 1` entries starting at 0: block
    /// `g` belongs to the last segment `k` with `groups[k] <= g`.
    pub groups: Vec<i64>,
    /// Elements moved.
    pub total: usize,
    /// The shape the blocks were cut for.
    pub shape: BlockShape,
}

impl BlockPlan {
    /// Number of encoded (non-empty) segments.
    pub fn nseg(&self) -> usize {
        self.groups.len().saturating_sub(1)
    }
    /// Blocks (work-groups) one launch runs: the last entry of `groups`.
    pub fn blocks(&self) -> usize {
        self.groups.last().map_or(0, |&g| usize::try_from(g).unwrap_or(usize::MAX))
    }
}

/// The segment's dims with extent-1 dims dropped and neighbours merged where the source is
/// dense across them (`s[i] == e[i + 1] * s[i + 1]`), padded in front to [`MAX_DIMS`]. The
/// element order, and so every source and buffer index, is unchanged.
pub fn merged_dims(s: &Segment) -> ([usize; MAX_DIMS], [isize; MAX_DIMS]) {
    let mut dims: Vec<(usize, isize)> = Vec::with_capacity(MAX_DIMS);
    for (&e, &st) in s.extents.iter().zip(&s.strides) {
        if e == 1 {
            continue;
        }
        if let Some(last) = dims.last_mut() {
            let dense = isize::try_from(e).ok().and_then(|e| e.checked_mul(st)) == Some(last.1);
            if dense {
                if let Some(m) = last.0.checked_mul(e) {
                    *last = (m, st);
                    continue;
                }
            }
        }
        dims.push((e, st));
    }
    let mut extents = [1; MAX_DIMS];
    let mut strides = [0; MAX_DIMS];
    let pad = MAX_DIMS - dims.len();
    for (i, (e, st)) in dims.into_iter().enumerate() {
        extents[pad + i] = e;
        strides[pad + i] = st;
    }
    (extents, strides)
}

/// The order in which a row walk visits `s`'s dims so that the source is read (or written)
/// in memory order: the largest `|stride|` outermost, dims of extent 1 first (they do not
/// matter). The CPU executor and the OpenCL row kernel both walk segments this way.
pub fn memory_order(s: &Segment) -> [usize; MAX_DIMS] {
    let mut order = [0usize, 1, 2, 3];
    order.sort_by_key(|&d| {
        if s.extents[d] == 1 {
            (0, std::cmp::Reverse(usize::MAX))
        } else {
            (1, std::cmp::Reverse(s.strides[d].unsigned_abs()))
        }
    });
    order
}

/// Cuts `plan` into blocks of `shape`, dropping empty segments. A segment is tiled when it
/// is transposed (source stride ±1 on dim 2 and not on dim 3) and both of those extents
/// fill at least a quarter of a tile side; it is cut by rows ([`MODE_ROWS`]) when it has
/// more than one row of source stride ±1 and its rows are at least half a block long;
/// otherwise it is linear, cut into runs of `shape.elems()` buffer elements (the last run
/// of a segment at least that long is shifted back to end at the segment's end, so only a
/// segment shorter than a block has a partial one). Host work and table size are linear in
/// the number of segments; a segment has at most twice as many blocks as its elements
/// fill.
pub fn encode_blocks(plan: &CopyPlan, shape: BlockShape) -> BlockPlan {
    let (elems, tile) = (shape.elems, shape.tile);
    let mut segments = Vec::with_capacity(plan.segments().len().saturating_mul(BLOCK_WORDS));
    let mut groups = vec![0i64];
    let mut blocks = 0usize;
    let mut total = 0usize;
    for s in plan.segments().iter().filter(|s| !s.is_empty()) {
        let (e, st) = merged_dims(s);
        let len = s.len();
        let transposed = st[2].unsigned_abs() == 1 && st[3].unsigned_abs() != 1;
        let tiled = tile >= 4 && transposed && e[2].min(e[3]).saturating_mul(4) >= tile;
        // Counts are at most the segment's length, itself at most isize::MAX.
        let rows = e[0].saturating_mul(e[1]).saturating_mul(e[2]);
        let by_rows = !tiled && st[3].unsigned_abs() == 1 && rows > 1 && e[3] >= elems / 2;
        let n = if tiled {
            e[0].saturating_mul(e[1]).saturating_mul(e[2].div_ceil(tile)).saturating_mul(e[3].div_ceil(tile))
        } else if by_rows {
            rows.saturating_mul(e[3].div_ceil(elems))
        } else {
            len.div_ceil(elems)
        };
        segments.push(word(s.source));
        segments.push(word(s.offset));
        segments.extend(e.iter().map(|&x| word(x)));
        // isize -> i64 is lossless on every target Rust supports.
        segments.extend(st.iter().map(|&x| x as i64));
        segments.push(word(s.dst_offset));
        segments.push(i64::from(s.negate));
        segments.push(if tiled {
            MODE_TILE
        } else if by_rows {
            MODE_ROWS
        } else {
            MODE_LINEAR
        });
        segments.push(word(len));
        total = total.saturating_add(len);
        blocks = blocks.saturating_add(n);
        groups.push(word(blocks));
    }
    BlockPlan { segments, groups, total, shape }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_order_puts_unit_dims_first_then_the_largest_stride() {
        // Dims 1..3 after the padding dim 0: strides -1, 100, 10 (extent 1 on dim 3 too).
        let s = Segment::new(0, 300, &[(3, -1), (4, 100), (5, 10)], 0).unwrap();
        assert_eq!(memory_order(&s), [0, 2, 3, 1]);
        let flat = Segment::new(0, 0, &[(1, 7), (6, 1), (2, 6)], 0).unwrap();
        assert_eq!(memory_order(&flat), [0, 1, 3, 2]);
    }

    #[test]
    fn encodes_prefix_sums() {
        let a = Segment::new(0, 3, &[(2, 5), (3, -1)], 0).unwrap().negated(true);
        let empty = Segment::new(0, 0, &[(0, 1)], 6).unwrap();
        let b = Segment::new(1, 0, &[(4, 1)], 6).unwrap();
        let plan = CopyPlan::new(vec![20, 4], 10, vec![a, empty, b]).unwrap();
        let e = encode(&plan);
        assert_eq!(e.starts, vec![0, 6, 10]);
        assert_eq!(e.nseg(), 2);
        assert_eq!(&e.segments[..SEG_WORDS], &[0, 3, 1, 1, 2, 3, 0, 0, 5, -1, 0, 1]);
    }

    #[test]
    fn shapes_are_powers_of_four() {
        let pair = |e| (BlockShape::new(e).elems(), BlockShape::new(e).tile());
        assert_eq!(pair(0), (1, 1));
        assert_eq!(pair(255), (64, 8));
        assert_eq!(pair(1024), (1024, 32));
        assert_eq!(pair(usize::MAX), (4096, 64));
    }

    #[test]
    fn merges_dense_dims_and_counts_blocks() {
        // A dense 3-d box: one row of 24; a flipped one stays one reversed row.
        let dense = Segment::new(0, 0, &[(2, 12), (3, 4), (4, 1)], 0).unwrap();
        assert_eq!(merged_dims(&dense), ([1, 1, 1, 24], [0, 0, 0, 1]));
        let flipped = Segment::new(0, 23, &[(2, -12), (3, -4), (4, -1)], 0).unwrap();
        assert_eq!(merged_dims(&flipped), ([1, 1, 1, 24], [0, 0, 0, -1]));
        // Rows of 3 out of 5 do not merge; extent-1 dims vanish.
        let strip = Segment::new(0, 1, &[(4, 5), (1, 7), (3, 1)], 0).unwrap();
        assert_eq!(merged_dims(&strip), ([1, 1, 4, 3], [0, 0, 5, 1]));
        let t = Segment::new(1, 0, &[(8, 1), (8, 8)], 24).unwrap().negated(true);
        let plan = CopyPlan::new(vec![24, 64], 88, vec![dense, t]).unwrap();
        let b = encode_blocks(&plan, BlockShape::new(16));
        assert_eq!(b.groups, vec![0, 2, 6]); // 24 elements in blocks of 16; 2 x 2 tiles of 4
        assert_eq!(&b.segments[BLOCK_WORDS..], &[1, 0, 1, 1, 8, 8, 0, 0, 1, 8, 24, 1, MODE_TILE, 64]);
        assert_eq!((b.total, b.nseg(), b.blocks()), (88, 2, 6));
        // Too small for a tile: linear.
        let b = encode_blocks(&plan, BlockShape::new(4096));
        assert_eq!(b.segments[BLOCK_WORDS + 12], MODE_LINEAR);
        assert_eq!(b.groups, vec![0, 1, 2]);
    }

    #[test]
    fn rows_of_half_a_block_or_more_are_cut_by_row() {
        let plan = |dims: &[(usize, isize)]| {
            let s = Segment::new(0, 100_000, dims, 0).unwrap();
            CopyPlan::new(vec![200_000], s.len(), vec![s]).unwrap()
        };
        let shape = BlockShape::new(16);
        // Rows of 8 (half a block) and 20 (one block and a shifted one), reversed too.
        for (dims, blocks) in [(&[(3, 10), (8, 1)][..], 3), (&[(3, 30), (20, -1)][..], 6)] {
            let b = encode_blocks(&plan(dims), shape);
            assert_eq!(b.segments[12], MODE_ROWS, "{dims:?}");
            assert_eq!(b.blocks(), blocks, "{dims:?}");
        }
        // Rows of 7, a single row, a row of stride 2: linear, by whole blocks.
        for dims in [&[(3, 10), (7, 1)][..], &[(40, 1)][..], &[(3, 100), (20, 2)][..]] {
            let b = encode_blocks(&plan(dims), shape);
            assert_eq!(b.segments[12], MODE_LINEAR, "{dims:?}");
            assert_eq!(b.blocks(), b.total.div_ceil(16), "{dims:?}");
        }
    }
}
