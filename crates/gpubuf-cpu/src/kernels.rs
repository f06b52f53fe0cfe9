//! Copy-plan execution on the CPU: rows of every segment, in parallel with rayon.
//!
//! Work is cut into units of whole rows (the innermost extent) of about [`UNIT`] elements,
//! so one huge segment and many small ones both spread over the thread pool. A row with
//! stride 1 and no negation is a `memcpy`; others move element by element at the dtype's
//! width. Plans smaller than [`SERIAL_BELOW`] bytes run on the calling thread.

use gpubuf_core::{CopyPlan, DType, Segment};
use rayon::prelude::*;

/// Elements per parallel work unit (rows are never split).
const UNIT: usize = 32 * 1024;
/// Plans moving fewer bytes than this run serially (rayon's fork cost dominates below it).
pub(crate) const SERIAL_BELOW: usize = 256 * 1024;

/// Which way the plan moves data.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Direction {
    /// Arrays -> buffer.
    Gather,
    /// Buffer -> arrays.
    Scatter,
}

#[derive(Clone, Copy)]
struct Ptr(*mut u8);
// SAFETY: the pointers are only dereferenced at element positions the plan validation
// proved disjoint for writes (buffer ranges for gather, `check_scatter` for scatter) and
// inside the allocations whose locks the caller holds for the whole call.
unsafe impl Send for Ptr {}
// SAFETY: as above.
unsafe impl Sync for Ptr {}

impl Ptr {
    /// The pointer (a method, so closures capture the whole `Send` wrapper).
    fn get(self) -> *mut u8 {
        self.0
    }
}

trait Word: Copy + Send + Sync {
    fn neg(self, float: bool) -> Self;
}

macro_rules! word {
    ($t:ty) => {
        impl Word for $t {
            #[inline(always)]
            fn neg(self, float: bool) -> Self {
                if float {
                    self ^ (1 << (<$t>::BITS - 1))
                } else {
                    self.wrapping_neg()
                }
            }
        }
    };
}
word!(u8);
word!(u16);
word!(u32);
word!(u64);

/// Executes `plan`.
///
/// # Safety
/// * `arrays[i]` points to at least `plan.source_lens()[i]` elements of `dtype`, and
///   `buffer` to at least `plan.buffer_len()` elements, all aligned to the dtype's size and
///   valid for the whole call (reads, plus writes on the side being written);
/// * the buffer shares no byte with any array, and with [`Direction::Scatter`] the arrays
///   share no byte with each other and `plan.check_scatter()` has passed;
/// * nothing else accesses the written memory during the call.
pub(crate) unsafe fn execute(
    plan: &CopyPlan,
    dtype: DType,
    arrays: &[*mut u8],
    buffer: *mut u8,
    dir: Direction,
) {
    let arrays: Vec<Ptr> = arrays.iter().map(|&p| Ptr(p)).collect();
    let buffer = Ptr(buffer);
    let float = dtype.is_float();
    let units = work_units(plan.segments());
    let job = |&u: &Unit| {
        let s = &plan.segments()[u.0];
        let a = arrays[s.source];
        // SAFETY: forwarded from this function's contract.
        unsafe {
            match dtype.size() {
                1 => rows::<u8>(s, u, a, buffer, dir, float),
                2 => rows::<u16>(s, u, a, buffer, dir, float),
                4 => rows::<u32>(s, u, a, buffer, dir, float),
                _ => rows::<u64>(s, u, a, buffer, dir, float),
            }
        }
    };
    if plan.total() * dtype.size() < SERIAL_BELOW {
        units.iter().for_each(job);
    } else {
        units.par_iter().for_each(job);
    }
}

/// A unit of work: rows `r0..r1` of segment `seg`, columns `c0..c1` of each.
type Unit = (usize, usize, usize, usize, usize);

/// Splits every non-empty segment into units of about [`UNIT`] elements: runs of whole
/// rows, or column ranges of one row when a row alone is longer than that.
fn work_units(segments: &[Segment]) -> Vec<Unit> {
    let mut units = Vec::with_capacity(segments.len());
    for (i, s) in segments.iter().enumerate().filter(|(_, s)| !s.is_empty()) {
        let rows = s.extents[0] * s.extents[1] * s.extents[2];
        let n = s.extents[3];
        if n > UNIT {
            for r in 0..rows {
                for c in (0..n).step_by(UNIT) {
                    units.push((i, r, r + 1, c, (c + UNIT).min(n)));
                }
            }
            continue;
        }
        let per = (UNIT / n).max(1);
        let mut r = 0;
        while r < rows {
            let end = (r + per).min(rows);
            units.push((i, r, end, 0, n));
            r = end;
        }
    }
    units
}

/// Moves one unit of segment `s`.
///
/// # Safety
/// As [`execute`]; `T` has the dtype's size.
unsafe fn rows<T: Word>(s: &Segment, unit: Unit, array: Ptr, buffer: Ptr, dir: Direction, float: bool) {
    let (_, r0, r1, c0, c1) = unit;
    let [_, e1, e2, row] = s.extents;
    let n = c1 - c0;
    let [s0, s1, s2, s3] = s.strides;
    let array = array.0 as *mut T;
    let buffer = buffer.0 as *mut T;
    for r in r0..r1 {
        let (i2, i1, i0) = (r % e2, (r / e2) % e1, r / (e1 * e2));
        let base =
            s.offset as isize + i0 as isize * s0 + i1 as isize * s1 + i2 as isize * s2 + c0 as isize * s3;
        // SAFETY: `base + k*s3` for k < n lies inside the source box, which plan validation
        // proved inside the array; `dst_offset + r*row + c0 + k` lies inside the buffer range.
        unsafe {
            let a = array.offset(base);
            let b = buffer.add(s.dst_offset + r * row + c0);
            match (dir, s3 == 1 && !s.negate) {
                (Direction::Gather, true) => std::ptr::copy_nonoverlapping(a, b, n),
                (Direction::Scatter, true) => std::ptr::copy_nonoverlapping(b, a, n),
                (Direction::Gather, false) => {
                    for k in 0..n {
                        let v = *a.offset(k as isize * s3);
                        *b.add(k) = if s.negate { v.neg(float) } else { v };
                    }
                }
                (Direction::Scatter, false) => {
                    for k in 0..n {
                        let v = *b.add(k);
                        *a.offset(k as isize * s3) = if s.negate { v.neg(float) } else { v };
                    }
                }
            }
        }
    }
}

/// Copies `len` bytes, split over the rayon pool when large (the same thread count the
/// plan kernels use, so plan-vs-copy ratios compare like with like).
///
/// # Safety
/// `src` is valid for `len` reads and `dst` for `len` writes; the ranges do not overlap
/// and nothing else writes `dst` or `src` during the call.
pub(crate) unsafe fn par_memcpy(dst: *mut u8, src: *const u8, len: usize) {
    const CHUNK: usize = 256 * 1024;
    if len < SERIAL_BELOW {
        // SAFETY: forwarded from the contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    let (d, s) = (Ptr(dst), Ptr(src as *mut u8));
    (0..len.div_ceil(CHUNK)).into_par_iter().for_each(|k| {
        let at = k * CHUNK;
        let n = CHUNK.min(len - at);
        // SAFETY: chunk `k` covers bytes `at..at + n`, inside both ranges; chunks are
        // disjoint, so no two threads write the same byte.
        unsafe { std::ptr::copy_nonoverlapping(s.get().add(at), d.get().add(at), n) };
    });
}
