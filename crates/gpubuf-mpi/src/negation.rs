//! Negation at the receiver: a vector component crossing a rotated edge is negated, and
//! the transformer's pack plan does that as it gathers, which keeps such a message out of
//! MPI's derived datatypes (MPI can gather, not negate). Where both ranks of a link hold
//! host memory, they agree at setup to move those messages raw instead: the sender
//! gathers without negating (a datatype, or the pack plan with its negation cleared), and
//! the receiver negates the elements in place once the message is in its halos. The
//! values in the halos are the same bits either way (negation is exact, see
//! [`DType::negate_bytes`]).

use crate::hostplan;
use crate::runs::{pack_runs, RUN_WORDS};
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{CopyPlan, DType, Element, Error, Kernels, Result};
use gpubuf_cpu::negate_in_place;

/// The element ranges `(start, len)` of the message that `plan` (a pack plan) negates,
/// in message order, adjacent ranges merged.
pub(crate) fn negated_ranges(plan: &CopyPlan) -> Vec<(usize, usize)> {
    let runs = pack_runs(plan);
    let mut ranges: Vec<(usize, usize)> =
        runs.chunks_exact(RUN_WORDS).filter(|r| r[4] != 0).map(|r| (r[2] as usize, r[3] as usize)).collect();
    ranges.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
    for (start, len) in ranges {
        match merged.last_mut() {
            Some(last) if last.0 + last.1 >= start => last.1 = last.1.max(start + len - last.0),
            _ => merged.push((start, len)),
        }
    }
    merged
}

/// `plan` with no segment negating.
///
/// # Errors
/// None in practice: the plan's own segments, unchanged but for the flag.
pub(crate) fn without_negation(plan: &CopyPlan) -> Result<CopyPlan> {
    let segments = plan.segments().iter().map(|s| s.negated(false)).collect();
    CopyPlan::new(plan.source_lens().to_vec(), plan.buffer_len(), segments)
}

/// Where the message elements `ranges` (from the sender's [`negated_ranges`]) land in this
/// rank's quantities through its `unpack` plan: `(quantity, element offset, len)` runs.
///
/// # Errors
/// [`Error::InvalidArgument`] for ranges that are not sorted, overlap, or reach past the
/// message (a neighbour whose plan is not this rank's mirror).
pub(crate) fn receiver_runs(
    unpack: &CopyPlan,
    ranges: &[(usize, usize)],
) -> Result<Vec<(usize, usize, usize)>> {
    let bad = || Error::invalid("a neighbour's negated ranges do not fit this rank's halo message");
    let mut end = 0usize;
    for &(start, len) in ranges {
        let stop = start.checked_add(len).ok_or_else(bad)?;
        if start < end || len == 0 || stop > unpack.buffer_len() {
            return Err(bad());
        }
        end = stop;
    }
    let runs = pack_runs(unpack);
    let mut runs: Vec<&[u64]> = runs.chunks_exact(RUN_WORDS).collect();
    runs.sort_unstable_by_key(|r| r[2]);
    let mut out = Vec::new();
    let mut k = 0usize;
    for r in runs {
        let (q, at, pos, len) = (r[0] as usize, r[1] as usize, r[2] as usize, r[3] as usize);
        // Ranges wholly before this run are done with (runs come in message order).
        while k < ranges.len() && ranges[k].0 + ranges[k].1 <= pos {
            k += 1;
        }
        let mut j = k;
        while j < ranges.len() && ranges[j].0 < pos + len {
            let lo = ranges[j].0.max(pos);
            let hi = (ranges[j].0 + ranges[j].1).min(pos + len);
            if lo < hi {
                out.push((q, at + (lo - pos), hi - lo));
            }
            j += 1;
        }
    }
    Ok(out)
}

/// Whether a link's messages of `dtype` can be negated at the receiver here: plain
/// (non-complex) elements of 1, 2, 4 or 8 bytes.
pub(crate) fn supported(dtype: DType) -> bool {
    !dtype.is_complex() && dtype.negatable() && [1, 2, 4, 8].contains(&dtype.size())
}

/// Negates the elements `runs` (from [`receiver_runs`]) of `quantities` (the unpack plan's
/// sources, in order), in place, each allocation locked for the call, once the link's
/// message is in their halos and while the update holds them. `Ok(false)` when a quantity
/// is not host memory (nothing negated).
///
/// # Errors
/// As [`hostplan::with_quantities`]; [`Error::InvalidArgument`] for a run past its
/// quantity's `need` elements (not reached: runs come from the same plan).
pub(crate) fn negate_runs<B: Kernels, T: Element>(
    runs: &[(usize, usize, usize)],
    need: &[usize],
    quantities: &[&NDBuffer<B, T>],
) -> Result<bool> {
    let size = T::DTYPE.size();
    let inside = runs
        .iter()
        .all(|&(q, at, len)| need.get(q).is_some_and(|&n| at.checked_add(len).is_some_and(|e| e <= n)));
    if !inside {
        return Err(Error::invalid("a negated run past its quantity's halo"));
    }
    let done = hostplan::with_quantities(need, quantities, |firsts| {
        for &(q, at, len) in runs {
            // SAFETY: `firsts[q]` is quantity `q`'s first element, with `need[q]` elements
            // from there inside its locked allocation (checked by `with_quantities`), and
            // `at + len <= need[q]` (checked above); element offsets keep the alignment.
            // The elements are halo elements of one link whose message is complete (the
            // caller's contract), which nothing else reads or writes now: the update holds
            // the quantities (no other handle of this process reaches them), and the
            // requests of its other links that may still be active read compute-domain
            // elements or write other links' halos, never these.
            unsafe { negate_in_place(firsts[q].wrapping_add(at * size), len, T::DTYPE) };
        }
    })?;
    Ok(done.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpubuf_core::Segment;

    /// Two quantities of 10x16 f64 (row-major); the message holds rows 1..3 of quantity 1
    /// (negated when `negate`), then columns 0..8 of row 5 of quantity 0.
    fn pack(negate: bool) -> CopyPlan {
        let a = Segment::new(1, 16, &[(2, 16), (16, 1)], 0).unwrap().negated(negate);
        let b = Segment::new(0, 80, &[(8, 1)], 32).unwrap();
        CopyPlan::new(vec![160, 160], 40, vec![a, b]).unwrap()
    }

    /// The receiver's unpack of that message: rows 0..2 of quantity 0 (its first 32
    /// elements), then the last 8 elements of row 9 of quantity 1, reversed.
    fn unpack() -> CopyPlan {
        let a = Segment::new(0, 0, &[(32, 1)], 0).unwrap();
        let b = Segment::new(1, 159, &[(8, -1)], 32).unwrap();
        CopyPlan::new(vec![160, 160], 40, vec![a, b]).unwrap()
    }

    #[test]
    fn the_senders_negated_elements_land_where_the_receiver_unpacks_them() {
        assert_eq!(negated_ranges(&pack(true)), vec![(0, 32)]);
        assert!(negated_ranges(&pack(false)).is_empty());
        assert!(!without_negation(&pack(true)).unwrap().negates());
        assert_eq!(receiver_runs(&unpack(), &[(0, 32)]).unwrap(), vec![(0, 0, 32)]);
        // A range across the two segments: the reversed one gives one-element runs.
        let runs = receiver_runs(&unpack(), &[(30, 4)]).unwrap();
        assert_eq!(runs, vec![(0, 30, 2), (1, 159, 1), (1, 158, 1)]);
        for bad in [&[(0, 41)][..], &[(4, 2), (0, 2)], &[(0, 0)], &[(usize::MAX, 2)]] {
            assert!(receiver_runs(&unpack(), bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn plain_elements_of_one_to_eight_bytes_are_supported() {
        assert!(supported(DType::F64) && supported(DType::I8) && supported(DType::F16));
        assert!(!supported(DType::Complex64) && !supported(DType::Complex128) && !supported(DType::Bool));
    }
}
