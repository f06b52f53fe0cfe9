//! The table of the row-walking plan kernel ([`crate::PlanKernel::Rows`],
//! `kernels/opencl/plan_rows.cl`): each segment normalised as the CPU backend's executor
//! does, and cut into units of whole rows, one work-item each.
//!
//! Per segment ([`ROW_WORDS`] `i64` words): `source, array offset, buffer offset,
//! e0..e3, array strides a0..a3, buffer strides b0..b3, negate, mode`. The axes are
//! reordered so the array is walked in memory order (largest |stride| outermost, extent-1
//! axes first), outer axes of negative array stride are walked forwards with the buffer
//! taking the reversal, and axes dense on both sides are folded into longer rows. A
//! transpose (array stride ±1 inside rows, buffer stride ±1 across them) is then
//! oriented for [`Mode::Tiles`]: array stride +1 inside rows, buffer stride +1 across
//! rows, the array possibly walked backwards across them. Element
//! `(i0, i1, i2, i3)` of the result is array element `offset + sum(i * a)` and buffer
//! element `buffer offset + sum(i * b)`; the set of pairs is the segment's.
//!
//! Per unit ([`UNIT_WORDS`] words): `segment, first row, rows, first column, columns`.
//! A unit is a run of whole rows (rows count the three outer axes in C order) of about
//! [`crate::ROW_UNIT`] elements, or a column range of one row when a row alone is longer;
//! in [`Mode::Tiles`] a run of a multiple of [`TILE`] rows, or where rows are longer than
//! a unit's share of a [`TILE`]-row band, a column range of whole tiles of [`TILE`] rows
//! (bands start at each run of axis 2 that holds a whole tile).

use gpubuf_core::{CopyPlan, Error, Result, Segment, MAX_DIMS};

/// Words per segment in [`RowPlan::segments`].
pub(crate) const ROW_WORDS: usize = 17;

/// Words per unit in [`RowPlan::units`].
pub(crate) const UNIT_WORDS: usize = 5;

/// The side of the transposed-row mode's tiles (`TILE` in plan_rows.cl).
pub(crate) const TILE: i64 = 64;

/// How a segment's rows move, word 16 of its record (`MODE_*` in plan_rows.cl).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Stride 1 on both sides: a copy loop.
    Copy = 0,
    /// Array stride -1, buffer stride 1: a reversed copy loop.
    Reversed = 1,
    /// Any other strides: a strided loop.
    Strided = 2,
    /// Array stride 1 with the buffer strided, consecutive rows adjacent in the buffer (a
    /// transpose): [`TILE`] x [`TILE`] tiles staged through a private tile, the rest
    /// column by column.
    Tiles = 3,
}

/// A segment in the kernel's form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RowJob {
    pub(crate) source: usize,
    pub(crate) array_off: i64,
    pub(crate) buffer_off: i64,
    pub(crate) ext: [i64; MAX_DIMS],
    pub(crate) sa: [i64; MAX_DIMS],
    pub(crate) sb: [i64; MAX_DIMS],
    pub(crate) negate: bool,
}

/// A plan in the kernel's form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RowPlan {
    /// [`ROW_WORDS`] words per non-empty segment.
    pub(crate) segments: Vec<i64>,
    /// [`UNIT_WORDS`] words per unit (work-item).
    pub(crate) units: Vec<i64>,
    /// Elements moved.
    pub(crate) total: usize,
}

impl RowPlan {
    /// Number of units (work-items of one launch).
    pub(crate) fn nunits(&self) -> usize {
        self.units.len() / UNIT_WORDS
    }
    /// Number of encoded segments.
    pub(crate) fn nseg(&self) -> usize {
        self.segments.len() / ROW_WORDS
    }
}

/// The error for a number that does not fit the kernel's 64-bit words (never for a valid
/// [`CopyPlan`], whose indices stay at most `isize::MAX`).
fn too_big() -> Error {
    Error::plan("a segment's indices exceed the row kernel's 64-bit words")
}

fn word(v: usize) -> Result<i64> {
    i64::try_from(v).map_err(|_| too_big())
}

impl RowJob {
    /// The normalised form of a non-empty segment.
    ///
    /// # Errors
    /// [`Error::InvalidPlan`] when an index does not fit an `i64`.
    pub(crate) fn new(s: &Segment) -> Result<Self> {
        let mut e = [0i64; MAX_DIMS];
        for (d, &x) in s.extents.iter().enumerate() {
            e[d] = word(x)?;
        }
        // Buffer strides of the C-order box.
        let mut sb0 = [1i64; MAX_DIMS];
        for d in (0..MAX_DIMS - 1).rev() {
            sb0[d] = sb0[d + 1].checked_mul(e[d + 1]).ok_or_else(too_big)?;
        }
        // Largest array stride outermost; axes of extent 1 first (they do not matter).
        let order = gpubuf_core::encode::memory_order(s);
        let mut j = RowJob {
            source: s.source,
            array_off: word(s.offset)?,
            buffer_off: word(s.dst_offset)?,
            ext: order.map(|d| e[d]),
            // isize -> i64 is lossless on every target Rust supports.
            sa: order.map(|d| s.strides[d] as i64),
            sb: order.map(|d| sb0[d]),
            negate: s.negate,
        };
        // Outer axes of negative array stride walk forwards; the buffer takes the reversal.
        for d in 0..MAX_DIMS - 1 {
            if j.sa[d] < 0 && j.ext[d] > 1 {
                let last = j.ext[d] - 1;
                let a = last.checked_mul(j.sa[d]).and_then(|x| j.array_off.checked_add(x));
                let b = last.checked_mul(j.sb[d]).and_then(|x| j.buffer_off.checked_add(x));
                (j.array_off, j.buffer_off) = (a.ok_or_else(too_big)?, b.ok_or_else(too_big)?);
                j.sa[d] = j.sa[d].checked_neg().ok_or_else(too_big)?;
                j.sb[d] = -j.sb[d];
            }
        }
        j.merge();
        j.orient_tiles()?;
        Ok(j)
    }

    /// Walks a transpose (array stride ±1 inside rows, the buffer's consecutive rows
    /// adjacent: buffer stride ±1 on axis 2, not on axis 3) with stride +1 inside rows on
    /// the array side and +1 across rows on the buffer side, reversing axis 3 or 2 (on
    /// both sides) where needed, so rotations and flipped transposes take the tiled mode.
    fn orient_tiles(&mut self) -> Result<()> {
        let transposed = self.sa[3].abs() == 1
            && self.sb[2].abs() == 1
            && self.sb[3].abs() != 1
            && self.ext[2] > 1
            && self.ext[3] > 1;
        if !transposed {
            return Ok(());
        }
        for d in [3, 2] {
            let s = if d == 3 { self.sa[d] } else { self.sb[d] };
            if s < 0 {
                let last = self.ext[d] - 1;
                let a = last.checked_mul(self.sa[d]).and_then(|x| self.array_off.checked_add(x));
                let b = last.checked_mul(self.sb[d]).and_then(|x| self.buffer_off.checked_add(x));
                (self.array_off, self.buffer_off) = (a.ok_or_else(too_big)?, b.ok_or_else(too_big)?);
                self.sa[d] = self.sa[d].checked_neg().ok_or_else(too_big)?;
                self.sb[d] = self.sb[d].checked_neg().ok_or_else(too_big)?;
            }
        }
        Ok(())
    }

    /// Folds an axis into the one inside it where both sides are dense across the two.
    fn merge(&mut self) {
        let mut axes: Vec<(i64, i64, i64)> = (0..MAX_DIMS)
            .filter(|&d| self.ext[d] > 1)
            .map(|d| (self.ext[d], self.sa[d], self.sb[d]))
            .collect();
        let mut d = axes.len();
        while d >= 2 {
            let (outer, inner) = (axes[d - 2], axes[d - 1]);
            let dense = |o: i64, i: i64| inner.0.checked_mul(i) == Some(o);
            // The merged extent is at most the segment's length.
            if let Some(len) =
                outer.0.checked_mul(inner.0).filter(|_| dense(outer.1, inner.1) && dense(outer.2, inner.2))
            {
                axes[d - 1] = (len, inner.1, inner.2);
                axes.remove(d - 2);
            }
            d -= 1;
        }
        let pad = MAX_DIMS - axes.len();
        for k in 0..MAX_DIMS {
            let (e, a, b) = if k < pad { (1, 0, 0) } else { axes[k - pad] };
            self.ext[k] = e;
            self.sa[k] = a;
            self.sb[k] = b;
        }
    }

    /// How the rows move.
    pub(crate) fn mode(&self) -> Mode {
        match (self.sa[3], self.sb[3]) {
            (1, 1) => Mode::Copy,
            (1, _) if self.sb[2] == 1 && self.ext[2] > 1 => Mode::Tiles,
            (-1, 1) => Mode::Reversed,
            _ => Mode::Strided,
        }
    }

    /// Rows (the three outer extents' product, at most the segment's length).
    fn rows(&self) -> Result<i64> {
        self.ext[0].checked_mul(self.ext[1]).and_then(|r| r.checked_mul(self.ext[2])).ok_or_else(too_big)
    }
}

/// Encodes `plan` for the row kernel, dropping empty segments, with units of about
/// `unit` elements (at least 1).
///
/// # Errors
/// [`Error::InvalidPlan`] when an index does not fit the kernel's 64-bit words or the
/// unit table would not fit this host's memory.
pub(crate) fn encode_rows(plan: &CopyPlan, unit: usize) -> Result<RowPlan> {
    let unit = word(unit.max(1))?;
    let mut segments = Vec::with_capacity(plan.segments().len().saturating_mul(ROW_WORDS));
    let mut units = Vec::new();
    let mut total = 0usize;
    for (k, s) in plan.segments().iter().filter(|s| !s.is_empty()).enumerate() {
        let j = RowJob::new(s)?;
        let mode = j.mode();
        segments.push(word(j.source)?);
        segments.extend([j.array_off, j.buffer_off]);
        segments.extend(j.ext);
        segments.extend(j.sa);
        segments.extend(j.sb);
        segments.extend([i64::from(j.negate), mode as i64]);
        let k = word(k)?;
        let (rows, n) = (j.rows()?, j.ext[3]);
        let mut push = |r: i64, nr: i64, c: i64, nc: i64| -> Result<()> {
            units
                .try_reserve(UNIT_WORDS)
                .map_err(|_| Error::plan("the row kernel's unit table does not fit in memory"))?;
            units.extend([k, r, nr, c, nc]);
            Ok(())
        };
        if mode == Mode::Tiles && n.saturating_mul(TILE) > unit {
            // Bands of TILE rows cut into column ranges of whole tiles, inside runs along
            // axis 2 where a run holds a whole tile (a band across a run's end would cut
            // its tiles).
            let cols = (unit / TILE / TILE * TILE).max(TILE);
            let run = if j.ext[2] >= TILE { j.ext[2] } else { rows };
            let mut r0 = 0;
            while r0 < rows {
                let end = r0 + run.min(rows - r0);
                let mut r = r0;
                while r < end {
                    let nr = TILE.min(end - r);
                    let mut c = 0;
                    while c < n {
                        let nc = cols.min(n - c);
                        push(r, nr, c, nc)?;
                        c += nc;
                    }
                    r += nr;
                }
                r0 = end;
            }
        } else if n > unit {
            for r in 0..rows {
                let mut c = 0;
                while c < n {
                    let nc = unit.min(n - c);
                    push(r, 1, c, nc)?;
                    c += nc;
                }
            }
        } else {
            let mut per = (unit / n).max(1);
            // Whole tiles per unit.
            if mode == Mode::Tiles {
                per -= per % TILE;
            }
            let mut r = 0;
            while r < rows {
                let nr = per.min(rows - r);
                push(r, nr, 0, n)?;
                r += nr;
            }
        }
        total = total.checked_add(s.len()).ok_or_else(too_big)?;
    }
    Ok(RowPlan { segments, units, total })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(offset: usize, dims: &[(usize, isize)]) -> RowJob {
        RowJob::new(&Segment::new(0, offset, dims, 0).unwrap()).unwrap()
    }

    #[test]
    fn walks_the_array_in_memory_order() {
        // A transpose: array rows of 8 (stride 1) become the inner axis; the buffer is
        // strided along them and its consecutive rows are adjacent.
        let t = job(0, &[(8, 1), (5, 8)]);
        assert_eq!((t.ext, t.sa, t.sb), ([1, 1, 5, 8], [0, 0, 8, 1], [0, 0, 1, 5]));
        assert_eq!(t.mode(), Mode::Tiles);
        // A flipped dense box: the outer axis walks forwards, the rows stay reversed.
        let f = job(23, &[(2, -12), (12, -1)]);
        assert_eq!((f.array_off, f.buffer_off), (11, 12));
        assert_eq!((f.ext, f.sa, f.sb), ([1, 1, 2, 12], [0, 0, 12, -1], [0, 0, -12, 1]));
        assert_eq!(f.mode(), Mode::Reversed);
        // Dense on both sides: one row; a strip of 3 of 5 does not fold.
        assert_eq!(job(0, &[(2, 12), (3, 4), (4, 1)]).ext, [1, 1, 1, 24]);
        let strip = job(1, &[(4, 5), (1, 7), (3, 1)]);
        assert_eq!((strip.ext, strip.sa, strip.mode()), ([1, 1, 4, 3], [0, 0, 5, 1], Mode::Copy));
        assert_eq!(job(0, &[(6, 3)]).mode(), Mode::Strided);
    }

    #[test]
    fn cuts_units_of_whole_rows_or_columns() {
        let long = Segment::new(0, 0, &[(2, 100), (10, 1)], 0).unwrap();
        let rows = Segment::new(0, 0, &[(7, 10), (3, 1)], 20).unwrap().negated(true);
        let plan = CopyPlan::new(vec![200], 41, vec![long, rows]).unwrap();
        let enc = encode_rows(&plan, 4).unwrap();
        assert_eq!((enc.nseg(), enc.total), (2, 41));
        // Rows of 10 in columns of 4, 4, 2; rows of 3 one per unit.
        let units: Vec<&[i64]> = enc.units.chunks(UNIT_WORDS).collect();
        assert_eq!(units[..3], [[0, 0, 1, 0, 4], [0, 0, 1, 4, 4], [0, 0, 1, 8, 2]]);
        assert_eq!(units[6], [1, 0, 1, 0, 3]);
        assert_eq!(enc.nunits(), 6 + 7);
        assert_eq!(&enc.segments[ROW_WORDS + 15..], &[1, Mode::Copy as i64]);
        let enc = encode_rows(&plan, 7).unwrap();
        assert_eq!(&enc.units[enc.units.len() - UNIT_WORDS..], &[1, 6, 1, 0, 3]);
        assert_eq!(enc.nunits(), 2 * 2 + 4);
    }

    #[test]
    fn orients_transposes_for_tiles() {
        // Reversed inside rows: axis 3 walks forwards, the buffer takes the reversal.
        let t = job(7, &[(8, -1), (5, 8)]);
        assert_eq!((t.array_off, t.buffer_off), (0, 35));
        assert_eq!((t.ext, t.sa, t.sb, t.mode()), ([1, 1, 5, 8], [0, 0, 8, 1], [0, 0, 1, -5], Mode::Tiles));
        // A rotation: the outer axis, walked forwards, left the buffer reversed across
        // rows; axis 2 turns back so the buffer's rows run forwards.
        let r = job(32, &[(8, 1), (5, -8)]);
        assert_eq!((r.array_off, r.buffer_off), (32, 0));
        assert_eq!((r.ext, r.sa, r.sb, r.mode()), ([1, 1, 5, 8], [0, 0, -8, 1], [0, 0, 1, 5], Mode::Tiles));
        // Not transposes: a reversed row stays reversed, a strided one strided.
        assert_eq!(job(7, &[(8, -1)]).mode(), Mode::Reversed);
        assert_eq!(job(14, &[(8, -2), (5, 16)]).mode(), Mode::Strided);
    }

    #[test]
    fn cuts_tiles_into_bands_of_whole_tiles() {
        let seg = Segment::new(0, 0, &[(100, 1), (140, 100)], 0).unwrap();
        let plan = CopyPlan::new(vec![14_000], 14_000, vec![seg]).unwrap();
        let units = |unit: usize| -> Vec<Vec<i64>> {
            encode_rows(&plan, unit).unwrap().units.chunks(UNIT_WORDS).map(<[i64]>::to_vec).collect()
        };
        // Rows of 100 exceed a unit's share of a 64-row band: bands of 64 rows in column
        // ranges of one tile, the last band and the last range short.
        let want: Vec<Vec<i64>> = [(0, 64), (64, 64), (128, 12)]
            .iter()
            .flat_map(|&(r, nr)| [vec![0, r, nr, 0, 64], vec![0, r, nr, 64, 36]])
            .collect();
        assert_eq!(TILE, 64);
        assert_eq!(units(64 * 64), want);
        // Whole rows, a multiple of 64 of them per unit.
        assert_eq!(units(200 * 64), [[0, 0, 128, 0, 100], [0, 128, 12, 0, 100]]);
        // Two runs of 100 rows along axis 2: bands start at each run's first row.
        let seg = Segment::new(0, 0, &[(2, 70_000), (600, 1), (100, 600)], 0).unwrap();
        let plan = CopyPlan::new(vec![130_000], 120_000, vec![seg]).unwrap();
        let enc = encode_rows(&plan, 32 * 1024).unwrap();
        let bands: Vec<[i64; 4]> = enc.units.chunks(UNIT_WORDS).map(|u| [u[1], u[2], u[3], u[4]]).collect();
        let want: Vec<[i64; 4]> = [(0, 64), (64, 36), (100, 64), (164, 36)]
            .iter()
            .flat_map(|&(r, nr)| [[r, nr, 0, 512], [r, nr, 512, 88]])
            .collect();
        assert_eq!(bands, want);
    }
}
