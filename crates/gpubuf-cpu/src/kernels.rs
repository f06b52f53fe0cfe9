//! Copy-plan execution on the CPU: rows of every segment, in parallel with rayon.
//!
//! Each segment's axes are reordered so the array is walked in memory order (the buffer
//! side then takes strides too), and axes contiguous on both sides are folded into longer
//! rows. Work is cut into units of whole rows (the innermost axis) of about [`UNIT`]
//! elements, and consecutive units (of one huge segment or of many small ones) are
//! grouped into tasks of about [`TASK_BYTES`], which the calling thread and rayon helpers
//! claim from one counter ([`crate::team`]): the caller starts at once instead of waiting
//! for a pool thread to be scheduled. How each row moves (copy, streaming stores,
//! prefetch) is in [`crate::rows`]. Plans smaller than [`SERIAL_BELOW`] bytes run on the
//! calling thread alone.

use crate::borrow::Mode;
use crate::memory::{CpuMemory, Span};
use gpubuf_core::{CopyPlan, DType, MemRef, Segment};

/// Elements per parallel work unit (rows are never split).
const UNIT: usize = 32 * 1024;
/// Plans moving fewer bytes than this run serially (a hand-over to another thread costs
/// more than it saves below it).
pub(crate) const SERIAL_BELOW: usize = 256 * 1024;

/// Whether work may go to rayon's pool. Not under Miri: rayon's deques use
/// crossbeam-epoch, which Miri's default aliasing model (Stacked Borrows) rejects inside
/// that crate (crossbeam-rs/crossbeam#545, open; it passes under Tree Borrows). Serially,
/// Miri still checks every access of the same row code.
pub(crate) const PARALLEL: bool = !cfg!(miri);

/// Which way the plan moves data.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Direction {
    /// Arrays -> buffer.
    Gather,
    /// Buffer -> arrays.
    Scatter,
}

#[derive(Clone, Copy)]
pub(crate) struct Ptr(pub(crate) *mut u8);
// SAFETY: the pointers are only dereferenced at element positions the plan validation
// proved disjoint for writes (buffer ranges for gather, `check_scatter` for scatter) and
// inside the byte ranges the caller has borrowed for the whole call (for writing where it
// writes, see `crate::borrow`).
unsafe impl Send for Ptr {}
// SAFETY: as above.
unsafe impl Sync for Ptr {}

impl Ptr {
    /// The pointer (a method, so closures capture the whole `Send` wrapper).
    pub(crate) fn get(self) -> *mut u8 {
        self.0
    }
}

/// One segment prepared for the CPU: its box with the buffer's strides beside the array's,
/// axes reordered so the array is walked in memory order (largest stride outermost).
/// Rotated halo boxes then read long sequential runs and write into a buffer range small
/// enough to stay in cache, instead of jumping through the array in buffer order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Job {
    pub(crate) source: usize,
    pub(crate) array_off: isize,
    pub(crate) buffer_off: isize,
    pub(crate) ext: [usize; 4],
    /// Strides in the array.
    pub(crate) sa: [isize; 4],
    /// Strides in the buffer.
    pub(crate) sb: [isize; 4],
    pub(crate) negate: bool,
}

/// Arithmetic in jobs and rows stays in `isize` without wrapping: [`CopyPlan::new`] keeps
/// every length and element index of a plan at most `isize::MAX`, so products of extents
/// (at most a segment's length) and every position inside a box or its buffer range fit,
/// and the row walk ([`crate::rows`]) only forms positions inside them.
impl Job {
    fn new(s: &Segment) -> Self {
        let e = s.extents;
        let sb0 = [(e[1] * e[2] * e[3]) as isize, (e[2] * e[3]) as isize, e[3] as isize, 1];
        // Largest array stride outermost; axes of extent 1 do not matter, put them first.
        let order = gpubuf_core::encode::memory_order(s);
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
        j.merge();
        j
    }

    /// Folds an axis into the one inside it where both sides are contiguous across the
    /// two: an unrotated edge halo is then one long row per array row, not one per level.
    fn merge(&mut self) {
        let mut axes: Vec<(usize, isize, isize)> =
            (0..4).filter(|&d| self.ext[d] > 1).map(|d| (self.ext[d], self.sa[d], self.sb[d])).collect();
        let mut d = axes.len();
        while d >= 2 {
            let (outer, inner) = (axes[d - 2], axes[d - 1]);
            // `span * stride` may leave the box (and isize): then it matches nothing.
            let span = inner.0 as isize;
            let dense = |outer: isize, inner: isize| span.checked_mul(inner) == Some(outer);
            if dense(outer.1, inner.1) && dense(outer.2, inner.2) {
                axes[d - 1] = (outer.0 * inner.0, inner.1, inner.2);
                axes.remove(d - 2);
            }
            d -= 1;
        }
        let pad = 4 - axes.len();
        for k in 0..4 {
            let (e, a, b) = if k < pad { (1, 0, 0) } else { axes[k - pad] };
            self.ext[k] = e;
            self.sa[k] = a;
            self.sb[k] = b;
        }
    }

    /// Rows in the job.
    pub(crate) fn rows(&self) -> usize {
        self.ext[0] * self.ext[1] * self.ext[2]
    }

    /// How many consecutive rows are contiguous in the array (1 when each row stands
    /// alone): the array's runs are this many rows long.
    pub(crate) fn run_rows(&self) -> usize {
        let [e0, e1, e2, n] = self.ext;
        if self.sa[3] != 1 || e2 == 1 || self.sa[2] != n as isize {
            return 1;
        }
        if e1 == 1 || self.sa[1] != (e2 * n) as isize {
            return e2;
        }
        if e0 == 1 || self.sa[0] != (e1 * e2 * n) as isize {
            return e1 * e2;
        }
        e0 * e1 * e2
    }
}

/// The byte ranges a run of `plan` (checked by `check_plan_args` against these ranges)
/// touches, one per range given and in that order, to borrow: for each array, from the
/// lowest to one past the highest element any segment reaches (empty when none reads it),
/// borrowed `array_mode`; for the buffer, the plan's `buffer_len` elements, borrowed
/// `buffer_mode`. Offsets count from each allocation's first byte. A bound that cannot be
/// computed (never for a valid plan) falls back to the whole range given.
pub(crate) fn plan_spans<'a>(
    plan: &CopyPlan,
    size: usize,
    arrays: &[MemRef<'a, CpuMemory>],
    array_mode: Mode,
    buffer: MemRef<'a, CpuMemory>,
    buffer_mode: Mode,
) -> Vec<Span<'a>> {
    // Lowest and one-past-highest element of each source, in i128 (no overflow: at most
    // MAX_DIMS products of two values below 2^64).
    let mut reach: Vec<Option<(i128, i128)>> = vec![None; arrays.len()];
    for s in plan.segments().iter().filter(|s| !s.is_empty()) {
        let (mut lo, mut hi) = (s.offset as i128, s.offset as i128);
        for (&n, &st) in s.extents.iter().zip(&s.strides) {
            let r = (n as i128 - 1) * st as i128;
            if r < 0 {
                lo += r;
            } else {
                hi += r;
            }
        }
        if let Some(slot) = reach.get_mut(s.source) {
            let (l, h) = slot.unwrap_or((lo, hi + 1));
            *slot = Some((l.min(lo), h.max(hi + 1)));
        }
    }
    let bytes = |a: &MemRef<'a, CpuMemory>, lo: i128, hi: i128| -> Option<(usize, usize)> {
        let lo = usize::try_from(lo).ok()?.checked_mul(size)?;
        let hi = usize::try_from(hi).ok()?.checked_mul(size)?;
        (lo <= hi && hi <= a.len).then_some((a.offset.checked_add(lo)?, hi - lo))
    };
    let mut spans: Vec<Span<'a>> = arrays
        .iter()
        .zip(&reach)
        .map(|(a, r)| {
            let (start, len) = match *r {
                None => (a.offset, 0),
                Some((lo, hi)) => bytes(a, lo, hi).unwrap_or((a.offset, a.len)),
            };
            (a.memory, start, len, array_mode)
        })
        .collect();
    let buffer_bytes = plan.buffer_len().checked_mul(size).filter(|&b| b <= buffer.len).unwrap_or(buffer.len);
    spans.push((buffer.memory, buffer.offset, buffer_bytes, buffer_mode));
    spans
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
    // SAFETY: this function's contract.
    unsafe { execute_on(plan, dtype, arrays, buffer, dir, true) }
}

/// Executes `plan` between raw host pointers on the calling thread alone, with the
/// executor the CPU backend uses (rows in memory order, `memcpy` rows, tiles for
/// transposes, streaming stores for large gathers): for memory that is not a gpubuf
/// allocation, such as an MPI shared-memory window. `gather` moves the arrays into the
/// buffer, else the buffer into the arrays.
///
/// # Safety
/// * `arrays[i]` points to at least `plan.source_lens()[i]` elements of `dtype`, and
///   `buffer` to at least `plan.buffer_len()` elements, all aligned to the dtype's size and
///   valid for the whole call (reads, plus writes on the side being written);
/// * the buffer shares no byte with any array;
/// * nothing else accesses the written memory during the call.
pub unsafe fn run_plan_serial(
    plan: &CopyPlan,
    dtype: DType,
    arrays: &[*mut u8],
    buffer: *mut u8,
    gather: bool,
) {
    let dir = if gather { Direction::Gather } else { Direction::Scatter };
    // SAFETY: this function's contract; one thread moves every element, so arrays that
    // overlap each other see their writes in plan order, never concurrently.
    unsafe { execute_on(plan, dtype, arrays, buffer, dir, false) }
}

/// Negates `len` elements of `dtype` at `ptr` in place, on the calling thread, with the
/// executor's own negation (its rows' `Word::neg`, gpubuf's rule: floats flip the sign
/// bit, integers wrap, complex numbers negate both lanes); nothing for a `bool`.
///
/// # Safety
/// * `ptr` points to `len` elements of `dtype`, aligned to its lane's size, valid for reads
///   and writes for the whole call;
/// * nothing else accesses those bytes during the call.
pub unsafe fn negate_in_place(ptr: *mut u8, len: usize, dtype: DType) {
    use crate::rows::Word;
    if !dtype.negatable() {
        return;
    }
    let (lane, float) = (dtype.lane(), dtype.lane().is_float());
    // A complex element is `lanes()` consecutive lanes; `len * lanes` lanes lie in the
    // caller's `len` elements, so the product does not overflow.
    let n = len * dtype.lanes();
    /// # Safety
    /// `n` aligned lanes of `W`'s width at `ptr`, nobody else's during the call.
    unsafe fn each<W: Word>(ptr: *mut u8, n: usize, float: bool) {
        // SAFETY: this function's contract.
        let words = unsafe { std::slice::from_raw_parts_mut(ptr.cast::<W>(), n) };
        words.iter_mut().for_each(|w| *w = w.neg(float));
    }
    // SAFETY: the caller's contract: `len` elements of `dtype` are `n` lanes of the lane's
    // width at `ptr`, aligned to it, and nobody else's during the call.
    unsafe {
        match lane.size() {
            1 => each::<u8>(ptr, n, float),
            2 => each::<u16>(ptr, n, float),
            4 => each::<u32>(ptr, n, float),
            _ => each::<u64>(ptr, n, float),
        }
    }
}

/// [`execute`], spreading large plans over the task team when `parallel`.
///
/// # Safety
/// As [`execute`] (with `parallel` false, scatter targets may overlap each other).
unsafe fn execute_on(
    plan: &CopyPlan,
    dtype: DType,
    arrays: &[*mut u8],
    buffer: *mut u8,
    dir: Direction,
    parallel: bool,
) {
    let arrays: Vec<Ptr> = arrays.iter().map(|&p| Ptr(p)).collect();
    let buffer = Ptr(buffer);
    let float = dtype.is_float();
    let jobs: Vec<Job> = plan.segments().iter().filter(|s| !s.is_empty()).map(Job::new).collect();
    let units = work_units(&jobs);
    // The plan's bytes fit the buffer (`check_plan_args`): the product never saturates.
    let bytes = plan.total().saturating_mul(dtype.size());
    let stream = dir == Direction::Gather && bytes >= crate::rows::STREAM_FROM;
    let size = dtype.size();
    let run = move |jobs: &[Job], u: Unit| {
        let j = &jobs[u.0];
        let a = arrays[j.source];
        let how = crate::rows::How { dir, float, stream };
        // SAFETY: forwarded from this function's contract; a job visits exactly the
        // elements of its segment, in another order.
        unsafe {
            match size {
                1 => crate::rows::rows::<u8>(j, u, a, buffer, how),
                2 => crate::rows::rows::<u16>(j, u, a, buffer, how),
                4 => crate::rows::rows::<u32>(j, u, a, buffer, how),
                _ => crate::rows::rows::<u64>(j, u, a, buffer, how),
            }
        }
    };
    let tasks = if parallel { tasks(bytes) } else { 1 };
    if tasks <= 1 {
        units.iter().for_each(|&u| run(&jobs, u));
        return;
    }
    // Consecutive units grouped into `tasks` runs of about equal elements, so many small
    // segments cost a few claims, not one hand-over each.
    let per = plan.total().div_ceil(tasks).max(1);
    let mut groups = Vec::with_capacity(tasks + 1);
    let (mut from, mut acc) = (0, 0);
    for (k, u) in units.iter().enumerate() {
        acc += (u.2 - u.1) * (u.4 - u.3);
        if acc >= per {
            groups.push(from..k + 1);
            (from, acc) = (k + 1, 0);
        }
    }
    if from < units.len() {
        groups.push(from..units.len());
    }
    // SAFETY: `team` returns only after every group ran, so the pointers `run` captured
    // are only used during this call (this function's contract); groups cover disjoint
    // units, hence disjoint written elements.
    unsafe {
        crate::team::team(groups.len(), rayon::current_num_threads(), move |g| {
            units[groups[g].clone()].iter().for_each(|&u| run(&jobs, u))
        })
    };
}

/// Tasks a plan of `bytes` is split into: 1 below [`SERIAL_BELOW`] (the calling thread
/// alone), otherwise one per [`TASK_BYTES`]. Tasks are claimed from a counter, not forked,
/// so many cost little, and small ones bound the wait for a thread the scheduler
/// preempted in the middle of one (measured on a loaded machine: docs/halo.md).
fn tasks(bytes: usize) -> usize {
    if bytes < SERIAL_BELOW || !PARALLEL {
        return 1;
    }
    bytes.div_ceil(TASK_BYTES)
}

/// Bytes per task of a parallel plan (as [`par_memcpy`]'s chunks).
const TASK_BYTES: usize = 256 * 1024;

/// A unit of work: rows `r0..r1` of job `seg`, columns `c0..c1` of each.
pub(crate) type Unit = (usize, usize, usize, usize, usize);

/// Splits every job into units of about [`UNIT`] elements: runs of whole rows, or column
/// ranges of one row when a row alone is longer than that.
fn work_units(jobs: &[Job]) -> Vec<Unit> {
    let mut units = Vec::with_capacity(jobs.len());
    for (i, j) in jobs.iter().enumerate() {
        let rows = j.rows();
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

/// Copies `len` bytes, split over the rayon pool when large (the same thread count the
/// plan kernels use, so plan-vs-copy ratios compare like with like).
///
/// # Safety
/// `src` is valid for `len` reads and `dst` for `len` writes; the ranges do not overlap
/// and nothing else writes `dst` or `src` during the call.
pub(crate) unsafe fn par_memcpy(dst: *mut u8, src: *const u8, len: usize) {
    const CHUNK: usize = TASK_BYTES;
    if len < SERIAL_BELOW || !PARALLEL {
        // SAFETY: forwarded from the contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    let (d, s) = (Ptr(dst), Ptr(src as *mut u8));
    let copy = move |k: usize| {
        let at = k * CHUNK;
        let n = CHUNK.min(len - at);
        // SAFETY: chunk `k` covers bytes `at..at + n`, inside both ranges; chunks are
        // disjoint, so no two threads write the same byte.
        unsafe { std::ptr::copy_nonoverlapping(s.get().add(at), d.get().add(at), n) };
    };
    // SAFETY: `team` returns only after every chunk was copied, while the ranges are valid
    // (the contract).
    unsafe { crate::team::team(len.div_ceil(CHUNK), rayon::current_num_threads(), copy) };
}
