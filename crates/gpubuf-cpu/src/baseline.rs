//! The hand-written baseline of a plan's access pattern: the rows of every box moved by a
//! plain loop on the same rayon threads as the plan executor, with nothing else.
//!
//! [`row_gather`] reads each segment's box row by row in ascending array addresses (outer
//! axes sorted by stride, negative strides walked forwards, axes dense in the array folded
//! into longer rows) and writes the rows one after the other into the segment's buffer
//! range; [`row_scatter`] does the reverse. Segments are the tasks, run as the plan
//! executor runs its own: by the calling thread and the rayon pool together. The array side is touched exactly as a plan
//! gather or scatter touches it, the buffer side sequentially, with no rotation, negation,
//! work units, streaming stores or prefetch. For a plan whose boxes are in the array's
//! memory order on both sides (an unrotated halo) this is the plan's own result; for a
//! rotated one the elements land in the segment's buffer range in another order. It is a
//! measure, not a transform: a plan executor slower than this loop over the same rows pays
//! for its own machinery, one as fast as it is limited by the access pattern.
//!
//! ```
//! use gpubuf_core::{Allocator, CopyPlan, DType, MemRef, Segment};
//! use gpubuf_cpu::{baseline, CpuBackend};
//!
//! let cpu = CpuBackend::new();
//! let (a, buf) = (cpu.allocate(64)?, cpu.allocate(32)?);
//! // Two rows of four u32 from a 4 x 4 array, the second row reversed.
//! let seg = Segment::new(0, 4, &[(2, 4), (4, -1)], 0)?;
//! let plan = CopyPlan::new(vec![16], 8, vec![seg])?;
//! baseline::row_gather(&plan, DType::U32, &[MemRef::whole(&a)], MemRef::whole(&buf))?;
//! # Ok::<(), gpubuf_core::Error>(())
//! ```

use crate::borrow::Mode;
use crate::kernels::{Ptr, PARALLEL, SERIAL_BELOW};
use crate::memory::borrow_all;
use crate::CpuMemory;
use gpubuf_core::{check_plan_args, check_scatter_args, CopyPlan, DType, MemRef, Result, Segment};

/// One segment as plain rows, in bytes: the array position of its first row, the row
/// length, and the outer axes (count, stride), outermost first, all strides positive.
struct Walk {
    source: usize,
    start: usize,
    row: usize,
    outer: Vec<(usize, usize)>,
    buffer: usize,
}

impl Walk {
    /// Arithmetic stays in range: [`CopyPlan::new`] keeps every box inside its source and
    /// every element index and byte length of a plan at most `isize::MAX`, and each
    /// position formed here is inside the box.
    fn new(s: &Segment, size: usize) -> Self {
        let mut start = s.offset as isize;
        let mut axes: Vec<(usize, isize)> = Vec::with_capacity(4);
        for d in 0..4 {
            let (e, mut st) = (s.extents[d], s.strides[d]);
            if e > 1 {
                if st < 0 {
                    start += (e as isize - 1) * st;
                    st = -st;
                }
                axes.push((e, st));
            }
        }
        axes.sort_by_key(|&(_, st)| std::cmp::Reverse(st));
        // Fold an axis into the one inside it where they are dense in the array.
        let mut d = axes.len();
        while d >= 2 {
            let (outer, inner) = (axes[d - 2], axes[d - 1]);
            if (inner.0 as isize).checked_mul(inner.1) == Some(outer.1) {
                axes[d - 1] = (outer.0 * inner.0, inner.1);
                axes.remove(d - 2);
            }
            d -= 1;
        }
        let row = match axes.last() {
            Some(&(e, 1)) => {
                axes.pop();
                e
            }
            _ => 1,
        };
        Walk {
            source: s.source,
            start: start as usize * size,
            row: row * size,
            outer: axes.iter().map(|&(e, st)| (e, st as usize * size)).collect(),
            buffer: s.dst_offset * size,
        }
    }

    /// Calls `f(array byte offset, buffer byte offset)` for every row, in array order.
    #[inline]
    fn each_row(&self, mut f: impl FnMut(usize, usize)) {
        let mut idx = vec![0usize; self.outer.len()];
        let (mut at, mut b) = (self.start, self.buffer);
        loop {
            f(at, b);
            b += self.row;
            // The odometer over the outer axes, innermost first.
            let mut d = self.outer.len();
            loop {
                if d == 0 {
                    return;
                }
                d -= 1;
                let (e, st) = self.outer[d];
                idx[d] += 1;
                if idx[d] < e {
                    at += st;
                    break;
                }
                at -= (e - 1) * st;
                idx[d] = 0;
            }
        }
    }
}

/// Moves every row of the plan's boxes between the arrays and the buffer.
///
/// # Safety
/// The arguments passed [`check_plan_args`] (and [`check_scatter_args`] when
/// `to_buffer` is false), and the ranges they name are borrowed for the call (for writing
/// on the side written).
unsafe fn run(plan: &CopyPlan, dtype: DType, arrays: &[*mut u8], buffer: *mut u8, to_buffer: bool) {
    let size = dtype.size();
    let walks: Vec<Walk> =
        plan.segments().iter().filter(|s| !s.is_empty()).map(|s| Walk::new(s, size)).collect();
    let arrays: Vec<Ptr> = arrays.iter().map(|&p| Ptr(p)).collect();
    let buffer = Ptr(buffer);
    let one = move |w: &Walk| {
        let a = arrays[w.source].get();
        w.each_row(|pa, pb| {
            // SAFETY: row `pa..pa + row` lies in the segment's box inside the array and
            // `pb..pb + row` in its buffer range (plan validation); the buffer shares no
            // byte with the arrays; segments write disjoint bytes (buffer ranges for a
            // gather, `check_scatter` for a scatter), so no two threads write one byte.
            unsafe {
                let (ra, rb) = (a.add(pa), buffer.get().add(pb));
                if to_buffer {
                    std::ptr::copy_nonoverlapping(ra, rb, w.row);
                } else {
                    std::ptr::copy_nonoverlapping(rb, ra, w.row);
                }
            }
        });
    };
    if plan.total().saturating_mul(size) < SERIAL_BELOW || !PARALLEL {
        walks.iter().for_each(one);
    } else {
        // One task per segment, on the calling thread and the pool, as the plan executor
        // runs its tasks.
        // SAFETY: `team` returns only after every segment was moved, during this call.
        unsafe { crate::team::team(walks.len(), rayon::current_num_threads(), move |k| one(&walks[k])) };
    }
}

/// Reads the rows of every box of `plan` into the box's buffer range, in array order (see
/// the module docs: the bytes of a plan whose boxes are not in array order land permuted
/// within their range).
///
/// # Errors
/// As [`gpubuf_core::Kernels::gather`]: [`check_plan_args`]; a conflicting borrow of the
/// bytes already held by this thread (see [`CpuMemory::with_bytes`]). Nothing is written then.
pub fn row_gather(
    plan: &CopyPlan,
    dtype: DType,
    sources: &[MemRef<'_, CpuMemory>],
    dst: MemRef<'_, CpuMemory>,
) -> Result<()> {
    check_plan_args(plan, dtype, sources, dst)?;
    borrowed(plan, dtype, sources, dst, true)
}

/// Writes each box's buffer range, read in order, into the rows of the box, in array order
/// (the inverse of [`row_gather`]).
///
/// # Errors
/// As [`gpubuf_core::Kernels::scatter`]: [`check_scatter_args`]; a conflicting borrow of
/// the bytes already held by this thread (see [`CpuMemory::with_bytes`]). Nothing is written then.
pub fn row_scatter(
    plan: &CopyPlan,
    dtype: DType,
    src: MemRef<'_, CpuMemory>,
    targets: &[MemRef<'_, CpuMemory>],
) -> Result<()> {
    check_scatter_args(plan, dtype, targets, src)?;
    borrowed(plan, dtype, targets, src, false)
}

fn borrowed(
    plan: &CopyPlan,
    dtype: DType,
    arrays: &[MemRef<'_, CpuMemory>],
    buffer: MemRef<'_, CpuMemory>,
    to_buffer: bool,
) -> Result<()> {
    // A gather reads the arrays and writes the buffer; a scatter the other way round.
    let (array_mode, buffer_mode) =
        if to_buffer { (Mode::Shared, Mode::Exclusive) } else { (Mode::Exclusive, Mode::Shared) };
    let spans = crate::kernels::plan_spans(plan, dtype.size(), arrays, array_mode, buffer, buffer_mode);
    let (_borrows, ptrs) = borrow_all(&spans)?;
    // SAFETY: the checks passed (by the callers), so every range lies inside its
    // allocation with the plan's lengths, the buffer is disjoint from the arrays, and a
    // scatter writes each element once into disjoint targets; the plan touches only the
    // bytes `plan_spans` names, borrowed until `_borrows` drops (for writing where it
    // writes).
    unsafe {
        let array_ptrs: Vec<*mut u8> = arrays.iter().zip(&ptrs).map(|(a, p)| p.add(a.offset)).collect();
        run(plan, dtype, &array_ptrs, ptrs[arrays.len()].add(buffer.offset), to_buffer);
    }
    Ok(())
}
