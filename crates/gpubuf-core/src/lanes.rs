//! Plans over lanes: a complex element moves as its two float lanes, so the kernels of
//! every backend need no 16-byte type and negate a complex number by negating each lane.

use crate::{CopyPlan, DType, Error, Result, Segment, MAX_DIMS};
use std::borrow::Cow;

/// Most segments [`CopyPlan::split_lanes`] makes by splitting five-axis boxes (each moves
/// at least 8 elements): past it the split is refused rather than built, so a declared
/// plan cannot make it allocate without bound.
pub const MAX_SPLIT_SEGMENTS: usize = 1 << 24;

impl CopyPlan {
    /// The same movement with each element split into `lanes` consecutive lanes: offsets,
    /// strides and lengths scaled by `lanes`, and an innermost axis of `lanes` lanes
    /// (merged into the innermost axis where that one is dense). A negating segment
    /// negates every lane. `lanes == 1` gives the plan itself.
    ///
    /// A segment whose four axes are all in use and whose innermost axis is strided becomes
    /// one segment per index of its outermost axis.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `lanes` is 0; [`Error::InvalidPlan`] when a scaled
    /// length or index passes `isize::MAX`, or when the split would make more than
    /// [`MAX_SPLIT_SEGMENTS`] segments (copy such a view to a contiguous array first).
    pub fn split_lanes(&self, lanes: usize) -> Result<CopyPlan> {
        if lanes == 0 {
            return Err(Error::invalid("an element has at least one lane"));
        }
        if lanes == 1 {
            return Ok(self.clone());
        }
        let too_long = || Error::plan(format!("a plan over {lanes} lanes an element passes isize::MAX"));
        let scale =
            |n: usize| n.checked_mul(lanes).filter(|&m| m <= isize::MAX as usize).ok_or_else(too_long);
        let lanes_i = isize::try_from(lanes).map_err(|_| too_long())?;
        let source_lens = self.source_lens().iter().map(|&n| scale(n)).collect::<Result<Vec<_>>>()?;
        let mut segments = Vec::with_capacity(self.segments().len());
        let mut split = 0usize;
        for s in self.segments().iter().filter(|s| !s.is_empty()) {
            // The axes in use (extent above 1), outermost first, strides in lanes.
            let mut dims = Vec::with_capacity(MAX_DIMS + 1);
            for (&e, &st) in s.extents.iter().zip(&s.strides) {
                if e > 1 {
                    dims.push((e, st.checked_mul(lanes_i).ok_or_else(too_long)?));
                }
            }
            match dims.last_mut() {
                Some((e, st)) if *st == lanes_i => (*e, *st) = (scale(*e)?, 1),
                _ => dims.push((lanes, 1)),
            }
            let (offset, dst) = (scale(s.offset)?, scale(s.dst_offset)?);
            if dims.len() <= MAX_DIMS {
                segments.push(Segment::new(s.source, offset, &dims, dst)?.negated(s.negate));
                continue;
            }
            // Five axes: one segment per index of the outermost.
            let (n0, s0) = dims[0];
            split = split.saturating_add(n0);
            if split > MAX_SPLIT_SEGMENTS {
                return Err(Error::plan(format!(
                    "splitting the plan into lanes takes more than {MAX_SPLIT_SEGMENTS} segments: copy \
                     the strided view to a contiguous array first"
                )));
            }
            let inner = &dims[1..];
            let step = inner.iter().try_fold(1usize, |a, &(e, _)| a.checked_mul(e)).ok_or_else(too_long)?;
            for i in 0..n0 {
                // Inside the source span and the buffer, both checked by `CopyPlan::new`
                // to fit isize: the products of a valid plan cannot overflow, checked anyway.
                let at = isize::try_from(i).ok().and_then(|i| i.checked_mul(s0));
                let at = at.and_then(|a| offset.checked_add_signed(a)).ok_or_else(too_long)?;
                let to = i.checked_mul(step).and_then(|k| dst.checked_add(k)).ok_or_else(too_long)?;
                segments.push(Segment::new(s.source, at, inner, to)?.negated(s.negate));
            }
        }
        CopyPlan::new(source_lens, scale(self.buffer_len())?, segments)
    }
}

/// The plan a kernel runs for elements of `dtype`, and the element type it runs it with:
/// `plan` and `dtype` themselves for a real type; for a complex64 plan that negates
/// nothing, `plan` itself moved as `uint64` (one 8-byte move an element); for any other
/// complex plan, the plan over its float lanes ([`CopyPlan::split_lanes`]), whose negation
/// negates each lane.
///
/// A plan whose lanes pass `isize::MAX` (declared lengths of more than `isize::MAX / 2`
/// complex elements) gives an empty lane plan: no memory holds such a source or buffer,
/// so [`crate::check_plan_args`] refuses every launch of it with
/// [`Error::OutOfBounds`] before a kernel runs, as it refuses the same lengths of a real
/// type; preparing it succeeds, as it does for a real type.
///
/// # Errors
/// [`Error::InvalidPlan`] when the lane split would take more than
/// [`MAX_SPLIT_SEGMENTS`] segments.
pub fn lane_plan(plan: &CopyPlan, dtype: DType) -> Result<(Cow<'_, CopyPlan>, DType)> {
    if dtype.lanes() == 1 {
        return Ok((Cow::Borrowed(plan), dtype));
    }
    if dtype == DType::Complex64 && !plan.negates() {
        return Ok((Cow::Borrowed(plan), DType::U64));
    }
    // Lengths past isize::MAX lanes: no launch can pass the length checks.
    let max = isize::MAX as usize / dtype.lanes();
    if plan.buffer_len() > max || plan.source_lens().iter().any(|&n| n > max) {
        return Ok((Cow::Owned(CopyPlan::empty()), dtype.lane()));
    }
    Ok((Cow::Owned(plan.split_lanes(dtype.lanes())?), dtype.lane()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every (buffer lane, source, source lane) pair a plan moves, with its negation.
    fn moves(plan: &CopyPlan, lanes: usize) -> Vec<(usize, usize, usize, bool)> {
        let mut out = Vec::new();
        for s in plan.segments() {
            s.for_each(|k, at| {
                for l in 0..lanes {
                    out.push(((s.dst_offset + k) * lanes + l, s.source, at * lanes + l, s.negate));
                }
            });
        }
        out.sort_unstable();
        out
    }

    fn check(plan: &CopyPlan) {
        let split = plan.split_lanes(2).unwrap();
        assert_eq!(moves(plan, 2), moves(&split, 1));
        assert_eq!(split.buffer_len(), plan.buffer_len() * 2);
        assert_eq!(split.total(), plan.total() * 2);
    }

    #[test]
    fn lanes_move_what_the_elements_move() {
        let dense = Segment::new(0, 3, &[(4, 10), (5, 1)], 0).unwrap();
        let strided = Segment::new(0, 0, &[(2, 3)], 20).unwrap().negated(true);
        check(&CopyPlan::new(vec![60], 30, vec![dense, strided]).unwrap());
        // Four axes in use, innermost strided: split along the outermost.
        let four = Segment::new(1, 100, &[(3, 60), (2, -20), (2, 5), (3, 2)], 1).unwrap();
        let plan = CopyPlan::new(vec![1, 300], 40, vec![four]).unwrap();
        check(&plan);
        assert_eq!(plan.split_lanes(2).unwrap().segments().len(), 3);
        // Four axes, innermost dense: merged, one segment.
        let four = Segment::new(0, 0, &[(3, 60), (2, 20), (2, 5), (3, 1)], 0).unwrap();
        let plan = CopyPlan::new(vec![300], 36, vec![four]).unwrap();
        check(&plan);
        assert_eq!(plan.split_lanes(2).unwrap().segments().len(), 1);
        // Broadcasts (stride 0) and empty segments.
        let zero = Segment::new(0, 7, &[(4, 0)], 0).unwrap();
        let empty = Segment::new(0, 0, &[(0, 1)], 4).unwrap();
        check(&CopyPlan::new(vec![8], 4, vec![zero, empty]).unwrap());
    }

    #[test]
    fn lanes_refuse_zero_and_overflow() {
        let plan = CopyPlan::new(vec![4], 4, vec![Segment::new(0, 0, &[(4, 1)], 0).unwrap()]).unwrap();
        assert!(plan.split_lanes(0).is_err());
        assert_eq!(plan.split_lanes(1).unwrap(), plan);
        let huge = CopyPlan::new(vec![isize::MAX as usize], 1, vec![]).unwrap();
        assert!(matches!(huge.split_lanes(2), Err(Error::InvalidPlan(_))));
        // A declared box of 2^40 five-axis splits is refused at once, not built.
        let outer = 1usize << 40;
        let seg = Segment::new(0, 0, &[(outer, 64), (2, 16), (2, 4), (2, 2)], 0).unwrap();
        let plan = CopyPlan::new(vec![outer * 64], outer * 8, vec![seg]).unwrap();
        assert!(matches!(plan.split_lanes(2), Err(Error::InvalidPlan(_))));
        assert!(matches!(lane_plan(&plan, DType::Complex128), Err(Error::InvalidPlan(_))));
        // Under the bound it splits.
        let seg = Segment::new(0, 0, &[(5, 64), (2, 16), (2, 4), (2, 2)], 0).unwrap();
        let plan = CopyPlan::new(vec![320], 40, vec![seg]).unwrap();
        assert_eq!(plan.split_lanes(2).unwrap().segments().len(), 5);
    }

    #[test]
    fn lane_plan_borrows_for_real_types() {
        let plan = CopyPlan::new(vec![4], 4, vec![Segment::new(0, 0, &[(4, 1)], 0).unwrap()]).unwrap();
        let (p, d) = lane_plan(&plan, DType::F64).unwrap();
        assert!(matches!(p, Cow::Borrowed(_)));
        assert_eq!(d, DType::F64);
        let (p, d) = lane_plan(&plan, DType::Complex128).unwrap();
        assert_eq!((p.buffer_len(), d), (8, DType::F64));
        // complex64 moves as one 8-byte word unless the plan negates.
        let (p, d) = lane_plan(&plan, DType::Complex64).unwrap();
        assert!(matches!(p, Cow::Borrowed(_)));
        assert_eq!(d, DType::U64);
        let negating = CopyPlan::new(vec![4], 4, vec![plan.segments()[0].negated(true)]).unwrap();
        let (p, d) = lane_plan(&negating, DType::Complex64).unwrap();
        assert_eq!((p.buffer_len(), d), (8, DType::F32));
        // Past isize::MAX lanes: an empty plan (launches are refused by the length checks).
        let huge = CopyPlan::new(vec![isize::MAX as usize], 4, plan.segments().to_vec()).unwrap();
        let (p, _) = lane_plan(&huge, DType::Complex128).unwrap();
        assert!(p.segments().is_empty() && p.source_lens().is_empty());
    }
}
