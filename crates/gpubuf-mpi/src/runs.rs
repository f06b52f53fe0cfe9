//! A halo message as one copy: the sender's pack plan (its quantities to the message) and
//! the receiver's unpack plan (the message to its quantities) composed into runs that move
//! elements straight from the sender's quantities to the receiver's, each run contiguous
//! on both sides.

use gpubuf_core::{CopyPlan, DType, Error, Result};
use gpubuf_cpu::negate_in_place;

/// Numbers per run in the sender's description ([`pack_runs`]).
pub(crate) const RUN_WORDS: usize = 5;

/// The sender's side: its pack plan as runs, [`RUN_WORDS`] numbers each (source quantity,
/// element offset in it, element offset in the message, length, negated), each run
/// contiguous in both the quantity and the message.
pub(crate) fn pack_runs(plan: &CopyPlan) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::new();
    for s in plan.segments() {
        let (q, neg) = (s.source as u64, u64::from(s.negate));
        s.for_each(|k, at| {
            let (at, pos) = (at as u64, (s.dst_offset + k) as u64);
            if let Some(r) = out.rchunks_exact_mut(RUN_WORDS).next() {
                if r[0] == q && r[4] == neg && r[1] + r[3] == at && r[2] + r[3] == pos {
                    r[3] += 1;
                    return;
                }
            }
            out.extend_from_slice(&[q, at, pos, 1, neg]);
        });
    }
    out
}

/// One run: `len` elements from element `src` of the sender's quantity `src_q` to element
/// `dst` of this rank's quantity `dst_q`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    pub src_q: usize,
    pub src: usize,
    pub dst_q: usize,
    pub dst: usize,
    pub len: usize,
    pub negate: bool,
}

/// The composed copy of one link's incoming message.
#[derive(Debug)]
pub(crate) struct Pull {
    pub runs: Vec<Run>,
    /// Elements of each sender quantity the runs read, from its first element.
    pub src_extent: Vec<usize>,
}

fn bad(what: &str) -> Error {
    Error::invalid(format!("a neighbour's halo message does not fit this rank's: {what}"))
}

/// Composes the sender's runs (from [`pack_runs`], for `quantities` quantities) with this
/// rank's `unpack` plan of the same message.
///
/// # Errors
/// [`Error::InvalidArgument`] when the runs name a quantity past `quantities`, reach
/// outside the message, do not cover it exactly once in total length, or land on a
/// message element the unpack plan does not place (the two ranks' halo specs differ).
pub(crate) fn compose(sender: &[u64], unpack: &CopyPlan, quantities: usize) -> Result<Pull> {
    const UNSET: (u32, u8, usize) = (u32::MAX, 0, 0);
    let len = unpack.buffer_len();
    if sender.len() % RUN_WORDS != 0 {
        return Err(bad("a truncated run list"));
    }
    // Where each message element lands here: (quantity, negated, element offset).
    let mut lands = vec![UNSET; len];
    for s in unpack.segments() {
        let q = u32::try_from(s.source).map_err(|_| bad("too many quantities"))?;
        s.for_each(|k, at| {
            if let Some(slot) = lands.get_mut(s.dst_offset + k) {
                *slot = (q, u8::from(s.negate), at);
            }
        });
    }
    let mut runs: Vec<Run> = Vec::new();
    let mut src_extent = vec![0usize; quantities];
    let mut total = 0usize;
    for r in sender.chunks_exact(RUN_WORDS) {
        let n = |v: u64| usize::try_from(v).map_err(|_| bad("an offset past the address space"));
        let (src_q, src, pos, count, neg) = (n(r[0])?, n(r[1])?, n(r[2])?, n(r[3])?, r[4] != 0);
        let end =
            pos.checked_add(count).filter(|&e| e <= len).ok_or_else(|| bad("a run past the message"))?;
        let src_end = src.checked_add(count).ok_or_else(|| bad("a run past the address space"))?;
        let extent = src_extent.get_mut(src_q).ok_or_else(|| bad("a run from a quantity past the list"))?;
        *extent = (*extent).max(src_end);
        total = total.checked_add(count).ok_or_else(|| bad("runs longer than the message"))?;
        for (i, &(dq, dneg, dst)) in lands[pos..end].iter().enumerate() {
            if (dq, dneg, dst) == UNSET {
                return Err(bad("an element the unpack plan does not place"));
            }
            let (dq, negate, src) = (dq as usize, neg != (dneg != 0), src + i);
            if let Some(last) = runs.last_mut() {
                if last.src_q == src_q
                    && last.dst_q == dq
                    && last.negate == negate
                    && last.src + last.len == src
                    && last.dst + last.len == dst
                {
                    last.len += 1;
                    continue;
                }
            }
            runs.push(Run { src_q, src, dst_q: dq, dst, len: 1, negate });
        }
    }
    if total != len {
        return Err(bad("runs that do not cover the message"));
    }
    Ok(Pull { runs, src_extent })
}

impl Pull {
    /// Moves every run: from `srcs[q]` (the sender's quantity `q`, its first element) to
    /// `dsts[q]` (this rank's quantity `q`).
    ///
    /// # Safety
    /// * `srcs[q]` is valid for reads of `src_extent[q]` elements of `dtype`, and nothing
    ///   writes those bytes during the call;
    /// * `dsts[q]` is valid for reads and writes of the unpack plan's source length `q`
    ///   elements (the plan this value was composed with), aligned for `dtype`, disjoint
    ///   from every source, and nothing else reaches those bytes during the call.
    pub(crate) unsafe fn run(&self, srcs: &[*const u8], dsts: &[*mut u8], dtype: DType) -> Result<()> {
        let size = dtype.size();
        if srcs.len() < self.src_extent.len() {
            return Err(bad("fewer source quantities than the runs read"));
        }
        for r in &self.runs {
            let (Some(&s), Some(&d)) = (srcs.get(r.src_q), dsts.get(r.dst_q)) else {
                return Err(bad("a run names a quantity past the lists"));
            };
            // SAFETY: the run lies inside the source's `src_extent` elements (composed so)
            // and inside the destination's plan length (the unpack plan placed each of its
            // elements there); sources and destinations are disjoint, and the destination
            // aligned for `dtype` and nobody else's during the call (the caller's promise).
            unsafe {
                let (from, to) = (s.add(r.src * size), d.add(r.dst * size));
                std::ptr::copy_nonoverlapping(from, to, r.len * size);
                if r.negate {
                    negate_in_place(to, r.len, dtype);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpubuf_core::Segment;

    #[test]
    fn composes_rows_and_negation() -> Result<()> {
        // Sender: a 2x3 box of quantity 1 (row stride 10), then 2 negated elements of
        // quantity 0 reversed.
        let pack = CopyPlan::new(
            vec![20, 40],
            8,
            vec![
                Segment::new(1, 5, &[(2, 10), (3, 1)], 0)?,
                Segment::new(0, 9, &[(2, -1)], 6)?.negated(true),
            ],
        )?;
        let runs = pack_runs(&pack);
        assert_eq!(runs, vec![1, 5, 0, 3, 0, 1, 15, 3, 3, 0, 0, 9, 6, 1, 1, 0, 8, 7, 1, 1]);
        // Receiver: the message's first 6 elements into every other element of quantity 0
        // (contiguous in the sender, not here: one run per element), the last two
        // contiguous into quantity 1, negated again on the way in (they land positive).
        let unpack = CopyPlan::new(
            vec![30, 10],
            8,
            vec![Segment::new(0, 0, &[(6, 2)], 0)?, Segment::new(1, 2, &[(2, 1)], 6)?.negated(true)],
        )?;
        let pull = compose(&runs, &unpack, 2)?;
        assert_eq!(pull.src_extent, vec![10, 18]);
        let src0: Vec<f64> = (0..20).map(f64::from).collect();
        let src1: Vec<f64> = (0..40).map(|v| f64::from(v) + 100.0).collect();
        let (mut dst0, mut dst1) = (vec![0.0f64; 30], vec![0.0f64; 10]);
        // SAFETY: live vectors long enough for the plans; disjoint.
        unsafe {
            pull.run(
                &[src0.as_ptr().cast(), src1.as_ptr().cast()],
                &[dst0.as_mut_ptr().cast(), dst1.as_mut_ptr().cast()],
                DType::F64,
            )?;
        }
        let every_other: Vec<f64> = dst0.iter().step_by(2).take(6).copied().collect();
        assert_eq!(every_other, [105.0, 106.0, 107.0, 115.0, 116.0, 117.0]);
        assert_eq!(&dst1[2..4], &[9.0, 8.0]);
        // Nothing else written.
        let placed = |k: usize| k % 2 == 0 && k < 12;
        assert!(dst0.iter().enumerate().all(|(k, &v)| placed(k) || v == 0.0));
        assert!(dst1.iter().enumerate().all(|(k, &v)| (2..4).contains(&k) || v == 0.0));
        assert_eq!(pull.runs.len(), 6 + 2);
        Ok(())
    }

    #[test]
    fn runs_negated_once_are_negated_by_gpubufs_rule() -> Result<()> {
        // The sender negates its 4 elements, the receiver does not: the copy negates them,
        // -0.0 and NaN by their sign bit, integers wrapping.
        let pack = CopyPlan::new(vec![4], 4, vec![Segment::new(0, 0, &[(4, 1)], 0)?.negated(true)])?;
        let unpack = CopyPlan::new(vec![4], 4, vec![Segment::new(0, 0, &[(4, 1)], 0)?])?;
        let pull = compose(&pack_runs(&pack), &unpack, 1)?;
        let f = [-0.0f32, f32::NAN, 1.5, -f32::INFINITY];
        let i = [i32::MIN, -1, 0, 7];
        let mut got_f = [0.0f32; 4];
        let mut got_i = [0i32; 4];
        // SAFETY: four live, aligned elements on each side; disjoint.
        unsafe {
            pull.run(&[f.as_ptr().cast()], &[got_f.as_mut_ptr().cast()], DType::F32)?;
            pull.run(&[i.as_ptr().cast()], &[got_i.as_mut_ptr().cast()], DType::I32)?;
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got_f), bits(&f).iter().map(|b| b ^ (1 << 31)).collect::<Vec<_>>());
        assert_eq!(got_i, [i32::MIN, 1, 0, -7]);
        Ok(())
    }

    #[test]
    fn refuses_runs_that_do_not_fit() -> Result<()> {
        let unpack = CopyPlan::new(vec![8], 4, vec![Segment::new(0, 0, &[(4, 1)], 0)?])?;
        assert!(compose(&[0, 0, 0, 3], &unpack, 1).is_err()); // truncated
        assert!(compose(&[0, 0, 1, 4, 0], &unpack, 1).is_err()); // past the message
        assert!(compose(&[0, 0, 0, 3, 0], &unpack, 1).is_err()); // short of it
        assert!(compose(&[1, 0, 0, 4, 0], &unpack, 1).is_err()); // quantity past the list
        assert!(compose(&[0, u64::MAX, 0, 4, 0], &unpack, 1).is_err()); // overflow
        let gap = CopyPlan::new(vec![8], 4, vec![Segment::new(0, 0, &[(3, 1)], 0)?])?;
        assert!(compose(&[0, 0, 0, 4, 0], &gap, 1).is_err()); // an element not placed
        Ok(())
    }
}
