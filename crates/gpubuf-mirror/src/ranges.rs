//! [`RangeSet`]: disjoint byte ranges that merge when closer than a gap, with a cap.

use std::collections::BTreeMap;
use std::ops::Range;

/// How pending ranges merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirtyPolicy {
    /// Ranges whose gap is at most this many bytes merge (0: exact ranges, only touching
    /// ones merge; `usize::MAX`: one convex hull, glumpy's behaviour).
    pub gap: usize,
    /// Most ranges kept; past it the closest neighbours merge.
    pub max_ranges: usize,
}

impl Default for DirtyPolicy {
    fn default() -> Self {
        DirtyPolicy { gap: 0, max_ranges: 4096 }
    }
}

impl DirtyPolicy {
    /// Exact ranges (gap 0).
    pub fn exact() -> Self {
        Self::default()
    }

    /// glumpy's single convex hull.
    pub fn hull() -> Self {
        DirtyPolicy { gap: usize::MAX, max_ranges: 1 }
    }
}

/// Disjoint, sorted byte ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    map: BTreeMap<usize, usize>,
}

impl RangeSet {
    /// The ranges, in order.
    pub fn ranges(&self) -> Vec<Range<usize>> {
        self.map.iter().map(|(&s, &e)| s..e).collect()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Number of ranges.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Bytes covered.
    pub fn bytes(&self) -> usize {
        self.map.iter().map(|(s, e)| e - s).sum()
    }

    /// The first bytes of `r` that the set holds (the intersection of `r` with the first
    /// range that meets it), or `None` when they share no byte.
    pub fn overlap(&self, r: Range<usize>) -> Option<Range<usize>> {
        if r.start >= r.end {
            return None;
        }
        // The last range starting at or before `r.start`, then the first starting after it.
        let before = self.map.range(..=r.start).next_back();
        let after = self.map.range(r.start..r.end).next();
        [before, after]
            .into_iter()
            .flatten()
            .map(|(&s, &e)| s.max(r.start)..e.min(r.end))
            .find(|x| x.start < x.end)
    }

    /// The parts of the ranges in `self` that `other` does not hold, in order.
    pub fn difference(&self, other: &RangeSet) -> Vec<Range<usize>> {
        let mut out = Vec::with_capacity(self.map.len());
        for (&s, &e) in &self.map {
            let mut at = s;
            let first = other.map.range(..=s).next_back().map_or(s, |(&os, _)| os);
            for (&os, &oe) in other.map.range(first..e) {
                if oe <= at {
                    continue;
                }
                if os > at {
                    out.push(at..os);
                }
                at = oe;
                if at >= e {
                    break;
                }
            }
            if at < e {
                out.push(at..e);
            }
        }
        out
    }

    /// Removes every range.
    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// Adds `r`, merging with ranges no more than `policy.gap` bytes away, then enforces
    /// `policy.max_ranges`. An empty or reversed `r` adds nothing.
    pub fn insert(&mut self, r: Range<usize>, policy: DirtyPolicy) {
        self.merge_in(r, policy);
        if self.map.len() > policy.max_ranges.max(1) {
            self.cap(policy.max_ranges.max(1));
        }
    }

    /// Adds every range of `ranges` as [`RangeSet::insert`] does, enforcing
    /// `policy.max_ranges` once at the end (much cheaper than one by one past the cap).
    pub fn insert_all(&mut self, ranges: impl IntoIterator<Item = Range<usize>>, policy: DirtyPolicy) {
        for r in ranges {
            self.merge_in(r, policy);
        }
        if self.map.len() > policy.max_ranges.max(1) {
            self.cap(policy.max_ranges.max(1));
        }
    }

    /// Adds `r`, merging with ranges no more than `policy.gap` bytes away (no cap).
    fn merge_in(&mut self, r: Range<usize>, policy: DirtyPolicy) {
        if r.start >= r.end {
            return;
        }
        let (mut start, mut end) = (r.start, r.end);
        let lo = start.saturating_sub(policy.gap);
        // Candidates: the last range starting at or before `lo`, and every range starting
        // before `end + gap`.
        let first = self.map.range(..=lo).next_back().map(|(&s, _)| s).unwrap_or(lo);
        let hi = end.saturating_add(policy.gap);
        let touching: Vec<(usize, usize)> = self
            .map
            .range(first..=hi)
            .filter(|(&s, &e)| e.saturating_add(policy.gap) >= start && s <= hi)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in touching {
            self.map.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        self.map.insert(start, end);
    }

    /// Merges the closest neighbours until at most `cap` ranges remain.
    fn cap(&mut self, cap: usize) {
        if self.map.len() == cap + 1 {
            // One over (an insert past the cap): merge the closest neighbours, in O(n).
            let mut best: Option<(usize, usize)> = None; // (gap, start of the right range)
            let mut prev_end: Option<usize> = None;
            for (&s, &e) in &self.map {
                if let Some(pe) = prev_end {
                    if best.is_none_or(|(g, _)| s - pe < g) {
                        best = Some((s - pe, s));
                    }
                }
                prev_end = Some(e);
            }
            if let Some((_, s)) = best {
                if let Some(e) = self.map.remove(&s) {
                    if let Some((_, left_end)) = self.map.range_mut(..s).next_back() {
                        *left_end = e;
                    }
                }
            }
        }
        while self.map.len() > cap {
            let v = self.ranges();
            let mut gaps: Vec<usize> = v.windows(2).map(|w| w[1].start - w[0].end).collect();
            // Merge every gap up to the one that brings the count down to `cap`.
            let nth = (v.len() - cap).saturating_sub(1).min(gaps.len() - 1);
            let limit = *gaps.select_nth_unstable(nth).1;
            let mut merged: Vec<Range<usize>> = Vec::with_capacity(v.len());
            for r in v {
                match merged.last_mut() {
                    Some(last) if r.start - last.end <= limit => last.end = r.end,
                    _ => merged.push(r),
                }
            }
            self.map = merged.into_iter().map(|r| (r.start, r.end)).collect();
        }
    }

    /// Removes the bytes of `r` from the set (splitting ranges as needed); an empty or
    /// reversed `r` removes nothing.
    pub fn remove(&mut self, r: Range<usize>) {
        if r.start >= r.end {
            return;
        }
        // Only the last range starting at or before `r.start` and those starting inside `r`
        // can meet it (the ranges are disjoint).
        let first = self.map.range(..=r.start).next_back().map_or(r.start, |(&s, _)| s);
        let hits: Vec<(usize, usize)> =
            self.map.range(first..r.end).filter(|(_, &e)| e > r.start).map(|(&s, &e)| (s, e)).collect();
        for (s, e) in hits {
            self.map.remove(&s);
            if s < r.start {
                self.map.insert(s, r.start);
            }
            if e > r.end {
                self.map.insert(r.end, e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_ranges_merge_only_when_touching() {
        let mut s = RangeSet::default();
        let p = DirtyPolicy::exact();
        s.insert(10..20, p);
        s.insert(30..40, p);
        s.insert(20..25, p);
        assert_eq!(s.ranges(), vec![10..25, 30..40]);
        s.insert(24..31, p);
        assert_eq!(s.ranges(), vec![10..40]);
        s.remove(15..18);
        assert_eq!(s.ranges(), vec![10..15, 18..40]);
        assert_eq!(s.bytes(), 27);
    }

    #[test]
    fn gaps_and_caps() {
        let mut s = RangeSet::default();
        let p = DirtyPolicy { gap: 8, max_ranges: 3 };
        s.insert(0..4, p);
        s.insert(10..12, p);
        assert_eq!(s.ranges(), vec![0..12]);
        s.insert(100..104, p);
        s.insert(200..204, p);
        s.insert(220..224, p);
        assert_eq!(s.len(), 3);
        assert_eq!(s.ranges(), vec![0..12, 100..104, 200..224]);
        let mut h = RangeSet::default();
        h.insert(20..32, DirtyPolicy::hull());
        h.insert(4..8, DirtyPolicy::hull());
        assert_eq!(h.ranges(), vec![4..32]);
    }

    #[test]
    fn caps_merge_the_closest_and_removes_span_ranges() {
        let mut s = RangeSet::default();
        let p = DirtyPolicy { gap: 0, max_ranges: 3 };
        for r in [0..2, 10..12, 13..14, 40..41] {
            s.insert(r, p);
        }
        assert_eq!(s.ranges(), vec![0..2, 10..14, 40..41]);
        let mut t = RangeSet::default();
        t.insert_all([50..51, 0..2, 10..12, 13..14, 40..41, 30..31], DirtyPolicy { gap: 0, max_ranges: 2 });
        assert_eq!(t.ranges(), vec![0..14, 30..51]);
        s.remove(1..41);
        assert_eq!(s.ranges(), vec![0..1]);
        t.remove(5..35);
        assert_eq!(t.ranges(), vec![0..5, 35..51]);
    }

    #[test]
    #[allow(clippy::reversed_empty_ranges)] // reversed ranges are the point
    fn reversed_ranges_change_nothing() {
        let mut s = RangeSet::default();
        s.insert(0..100, DirtyPolicy::exact());
        s.insert(60..40, DirtyPolicy::exact());
        s.remove(50..10);
        s.remove(usize::MAX..0);
        assert_eq!(s.ranges(), vec![0..100]);
    }

    #[test]
    fn overlap_and_difference() {
        let mut s = RangeSet::default();
        let p = DirtyPolicy::exact();
        s.insert(10..20, p);
        s.insert(30..40, p);
        assert_eq!(s.overlap(0..10), None);
        assert_eq!(s.overlap(15..35), Some(15..20));
        assert_eq!(s.overlap(20..31), Some(30..31));
        assert_eq!(s.overlap(40..usize::MAX), None);
        let mut hull = RangeSet::default();
        hull.insert(0..64, p);
        assert_eq!(hull.difference(&s), vec![0..10, 20..30, 40..64]);
        assert_eq!(s.difference(&hull), Vec::<Range<usize>>::new());
        assert_eq!(s.difference(&RangeSet::default()), s.ranges());
        let mut inner = RangeSet::default();
        inner.insert(12..14, p);
        inner.insert(16..18, p);
        inner.insert(35..50, p);
        assert_eq!(s.difference(&inner), vec![10..12, 14..16, 18..20, 30..35]);
    }
}
