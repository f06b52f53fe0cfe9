//! Copy-plan execution on the CPU: rows of every segment, in parallel with rayon.
//!
//! Each segment's axes are reordered so the array is walked in memory order (the buffer
//! side then takes strides too). Work is cut into units of whole rows (the innermost axis)
//! of about [`UNIT`] elements, so one huge segment and many small ones both spread over the
//! thread pool. A row contiguous on both sides is a `memcpy` (a vectorised loop when
//! negated); others move element by element at the dtype's width. Plans smaller than
//! [`SERIAL_BELOW`] bytes run on the calling thread.

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

/// One segment prepared for the CPU: its box with the buffer's strides beside the array's,
/// axes reordered so the array is walked in memory order (largest stride outermost).
/// Rotated halo boxes then read long sequential runs and write into a buffer range small
/// enough to stay in cache, instead of jumping through the array in buffer order.
#[derive(Clone, Copy, Debug)]
struct Job {
    source: usize,
    array_off: isize,
    buffer_off: isize,
    ext: [usize; 4],
    /// Strides in the array.
    sa: [isize; 4],
    /// Strides in the buffer.
    sb: [isize; 4],
    negate: bool,
}

impl Job {
    fn new(s: &Segment) -> Self {
        let e = s.extents;
        let sb0 = [(e[1] * e[2] * e[3]) as isize, (e[2] * e[3]) as isize, e[3] as isize, 1];
        let mut order = [0usize, 1, 2, 3];
        // Largest array stride outermost; axes of extent 1 do not matter, put them first.
        order.sort_by_key(|&d| {
            if e[d] == 1 {
                (0, std::cmp::Reverse(usize::MAX))
            } else {
                (1, std::cmp::Reverse(s.strides[d].unsigned_abs()))
            }
        });
        let mut j = Job {
            source: s.source,
            array_off: s.offset as isize,
            buffer_off: s.dst_offset as isize,
            ext: order.map(|d| e[d]),
            sa: order.map(|d| s.strides[d]),
            sb: order.map(|d| sb0[d]),
            negate: s.negate,
        };
        // Walk outer axes with negative array strides backwards, so the array is read (or
        // written) in ascending addresses, which hardware prefetchers follow best; the
        // buffer side takes the reversal instead.
        for d in 0..3 {
            if j.sa[d] < 0 && j.ext[d] > 1 {
                let last = (j.ext[d] - 1) as isize;
                j.array_off += last * j.sa[d];
                j.buffer_off += last * j.sb[d];
                j.sa[d] = -j.sa[d];
                j.sb[d] = -j.sb[d];
            }
        }
        j
    }
}

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
    let jobs: Vec<Job> = plan.segments().iter().filter(|s| !s.is_empty()).map(Job::new).collect();
    let units = work_units(&jobs);
    let run = |&u: &Unit| {
        let j = &jobs[u.0];
        let a = arrays[j.source];
        // SAFETY: forwarded from this function's contract; a job visits exactly the
        // elements of its segment, in another order.
        unsafe {
            match dtype.size() {
                1 => rows::<u8>(j, u, a, buffer, dir, float),
                2 => rows::<u16>(j, u, a, buffer, dir, float),
                4 => rows::<u32>(j, u, a, buffer, dir, float),
                _ => rows::<u64>(j, u, a, buffer, dir, float),
            }
        }
    };
    if plan.total() * dtype.size() < SERIAL_BELOW {
        units.iter().for_each(run);
    } else {
        units.par_iter().for_each(run);
    }
}

/// A unit of work: rows `r0..r1` of job `seg`, columns `c0..c1` of each.
type Unit = (usize, usize, usize, usize, usize);

/// Splits every job into units of about [`UNIT`] elements: runs of whole rows, or column
/// ranges of one row when a row alone is longer than that.
fn work_units(jobs: &[Job]) -> Vec<Unit> {
    let mut units = Vec::with_capacity(jobs.len());
    for (i, j) in jobs.iter().enumerate() {
        let rows = j.ext[0] * j.ext[1] * j.ext[2];
        let n = j.ext[3];
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

/// Moves one unit of job `j`.
///
/// # Safety
/// As [`execute`]; `T` has the dtype's size.
unsafe fn rows<T: Word>(j: &Job, unit: Unit, array: Ptr, buffer: Ptr, dir: Direction, float: bool) {
    let (_, r0, r1, c0, c1) = unit;
    let [_, e1, e2, _] = j.ext;
    let n = c1 - c0;
    let array = array.0 as *mut T;
    let buffer = buffer.0 as *mut T;
    let (i2, i1, i0) = (r0 % e2, (r0 / e2) % e1, r0 / (e1 * e2));
    let (mut i2, mut i1) = (i2, i1);
    let start =
        |s: &[isize; 4]| i0 as isize * s[0] + i1 as isize * s[1] + i2 as isize * s[2] + c0 as isize * s[3];
    let mut pa = j.array_off + start(&j.sa);
    let mut pb = j.buffer_off + start(&j.sb);
    let (sa3, sb3) = (j.sa[3], j.sb[3]);
    for r in r0..r1 {
        if r > r0 {
            // Step to the next row, carrying across the outer extents.
            i2 += 1;
            pa += j.sa[2];
            pb += j.sb[2];
            if i2 == e2 {
                i2 = 0;
                pa += j.sa[1] - e2 as isize * j.sa[2];
                pb += j.sb[1] - e2 as isize * j.sb[2];
                i1 += 1;
                if i1 == e1 {
                    i1 = 0;
                    pa += j.sa[0] - e1 as isize * j.sa[1];
                    pb += j.sb[0] - e1 as isize * j.sb[1];
                }
            }
        }
        // SAFETY: `pa` and `pb` are the row's first element in the array and the buffer
        // (inside both, see below); the pointers are only formed here.
        let (src, dst, ss, ds) = unsafe {
            match dir {
                Direction::Gather => (array.offset(pa) as *const T, buffer.offset(pb), sa3, sb3),
                Direction::Scatter => (buffer.offset(pb) as *const T, array.offset(pa), sb3, sa3),
            }
        };
        // SAFETY: the row's elements `pa + k*sa3` lie in the segment's box, which plan
        // validation proved inside the array, and `pb + k*sb3` in the segment's buffer
        // range; units cover disjoint elements of the box, so no two threads write the
        // same element.
        unsafe {
            match (ss == 1 && ds == 1, j.negate) {
                (true, false) => std::ptr::copy_nonoverlapping(src, dst, n),
                // Contiguous and negated: slices, so the loop vectorises.
                (true, true) => {
                    let (from, to) =
                        (std::slice::from_raw_parts(src, n), std::slice::from_raw_parts_mut(dst, n));
                    if float {
                        to.iter_mut().zip(from).for_each(|(d, v)| *d = v.neg(true));
                    } else {
                        to.iter_mut().zip(from).for_each(|(d, v)| *d = v.neg(false));
                    }
                }
                (false, negate) => {
                    for k in 0..n as isize {
                        let v = *src.offset(k * ss);
                        *dst.offset(k * ds) = if negate { v.neg(float) } else { v };
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
