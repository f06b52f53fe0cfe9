//! Extreme numbers in the public API of gpubuf-core: typed errors, never a panic, a wrapped
//! size or a misleading answer. Each test names the call that panicked (debug) or wrapped
//! (release) before it was checked.

use gpubuf_core::encode::{encode, EncodedPlan};
use gpubuf_core::{
    check_plan_args, CopyPlan, DType, DeviceMemory, Error, Layout, MemRef, Order, Segment, MAX_DIMS,
};

const BIG: usize = 1 << 62;

#[test]
fn layout_new_rejects_spans_outside_isize() {
    // The last element sits past isize::MAX: indices would wrap in isize arithmetic.
    assert!(Layout::new(vec![3], vec![isize::MAX], 0).is_err());
    assert!(Layout::new(vec![2], vec![1], usize::MAX).is_err());
    assert!(Layout::new(vec![2], vec![1], isize::MAX as usize).is_err());
    assert!(Layout::new(vec![2], vec![1], isize::MAX as usize - 1).is_err());
    assert!(Layout::new(vec![2], vec![1], isize::MAX as usize - 2).is_ok());
    // Below element 0 of the storage.
    assert!(Layout::new(vec![2], vec![-1], 0).is_err());
    assert!(Layout::new(vec![2, 2], vec![isize::MIN, 1], 0).is_err());
    // Empty views address nothing: any strides and offset are fine.
    let e = Layout::new(vec![0, 3], vec![isize::MIN, isize::MAX], usize::MAX).unwrap();
    assert_eq!(e.span().unwrap(), None);
    assert!(e.check_fits(0).is_ok());
    // Extents whose product (zeros aside) overflows are refused, as numpy does.
    assert!(Layout::new(vec![0, usize::MAX, 2], vec![0, 0, 0], 0).is_err());
}

#[test]
fn layout_contiguous_never_saturates_strides() {
    // Size 0 but strides would overflow: numpy says "array is too big"; so do we.
    assert!(Layout::contiguous(&[0, usize::MAX, usize::MAX], Order::C).is_err());
    assert!(Layout::contiguous(&[usize::MAX, 0, 2], Order::F).is_err());
    let l = Layout::contiguous(&[0, 1 << 30, 1 << 30], Order::C).unwrap();
    assert_eq!(l.strides(), &[1 << 60, 1 << 30, 1]);
    assert_eq!(l.size(), 0);
    assert!(l.is_c_contiguous());
}

#[test]
fn layout_index_of_never_wraps() {
    let l = Layout::contiguous(&[BIG, 1], Order::C).unwrap();
    assert_eq!(l.index_of(&[BIG - 1, 0]).unwrap(), BIG - 1);
    assert!(matches!(l.index_of(&[usize::MAX, 0]), Err(Error::OutOfBounds { end: usize::MAX, .. })));
    // A view moved beyond any storage by with_offset: an error, not a wrapped index.
    let moved = Layout::contiguous(&[4], Order::C).unwrap().with_offset(usize::MAX);
    assert!(moved.index_of(&[3]).is_err());
    assert!(moved.check_fits(usize::MAX).is_err());
    assert!(moved.span().is_err());
}

#[test]
fn layout_flipped_and_sliced_never_wrap() {
    let l = Layout::new(vec![1], vec![isize::MIN], 0).unwrap();
    assert!(l.flipped(0).is_err(), "isize::MIN cannot be negated");
    let moved = Layout::contiguous(&[3, 4], Order::C).unwrap().with_offset(usize::MAX - 2);
    assert!(moved.flipped(0).is_err());
    assert!(moved.sliced(&[1..2, 0..4]).is_err());
    // Empty results keep the offset: they address nothing.
    let l = Layout::new(vec![0, 5], vec![1, isize::MAX / 8], 7).unwrap();
    let s = l.sliced(&[0..0, 4..5]).unwrap();
    assert_eq!((s.shape(), s.offset()), (&[0, 1][..], 7));
    assert_eq!(l.flipped(1).unwrap().offset(), 7);
    // Still usable after the errors.
    let c = Layout::contiguous(&[3, 4], Order::C).unwrap();
    assert_eq!(c.flipped(0).unwrap().index_of(&[0, 0]).unwrap(), 8);
}

#[test]
fn segment_len_saturates_and_new_rejects_overflow() {
    let s = Segment { extents: [usize::MAX, 2, 1, 1], ..Segment::new(0, 0, &[], 0).unwrap() };
    assert_eq!(s.len(), usize::MAX);
    assert_eq!(s.checked_len(), None);
    assert!(!s.is_empty());
    assert!(Segment::new(0, 0, &[(usize::MAX, 1), (2, 1)], 0).is_err());
    let z = Segment { extents: [usize::MAX, 0, usize::MAX, 2], ..s };
    assert!(z.is_empty());
}

#[test]
fn segment_for_each_never_wraps() {
    // Built field by field (no validation): for_each visits nothing rather than wrapping.
    let bad = Segment { offset: 0, extents: [1, 1, 1, 3], strides: [0, 0, 0, isize::MAX], ..seg(0, 1) };
    let mut n = 0;
    bad.for_each(|_, _| n += 1);
    assert_eq!(n, 0);
    let below = Segment { offset: 0, strides: [0, 0, 0, -1], extents: [1, 1, 1, 2], ..seg(0, 1) };
    below.for_each(|_, _| n += 1);
    assert_eq!(n, 0);
    let mut seen = Vec::new();
    Segment::new(0, 4, &[(2, -2), (2, 1)], 0).unwrap().for_each(|k, at| seen.push((k, at)));
    assert_eq!(seen, vec![(0, 4), (1, 5), (2, 2), (3, 3)]);
}

fn seg(offset: usize, n: usize) -> Segment {
    Segment::new(0, offset, &[(n, 1)], 0).unwrap()
}

#[test]
fn segment_from_layout_never_wraps() {
    // Merging axes multiplies stride by extent: must not overflow.
    let l = Layout::new(vec![2, 2], vec![isize::MAX / 2, 1], 0).unwrap();
    let segs = Segment::from_layout(0, &l, 0).unwrap();
    assert_eq!(segs.iter().map(Segment::len).sum::<usize>(), 4);
    // Buffer offsets past usize: an error.
    let five = Layout::new(vec![2, 2, 2, 2, 2], vec![1, 2, 4, 8, 32], 0).unwrap();
    assert_eq!(Segment::from_layout(0, &five, 0).unwrap().len(), 2);
    assert!(Segment::from_layout(0, &five, usize::MAX - 3).is_err());
    // A view moved past any storage.
    let moved = five.clone().with_offset(usize::MAX);
    assert!(Segment::from_layout(0, &moved, 0).is_err());
}

#[test]
fn plans_reject_lengths_past_isize() {
    assert!(CopyPlan::new(vec![usize::MAX], 4, vec![seg(0, 4)]).is_err());
    assert!(CopyPlan::new(vec![4], usize::MAX, vec![seg(0, 4)]).is_err());
    assert!(CopyPlan::new(vec![isize::MAX as usize], isize::MAX as usize, vec![seg(0, 4)]).is_ok());
    // A box whose far corner overflows i128 arithmetic-free checks.
    let wild = Segment {
        extents: [usize::MAX, usize::MAX, 1, 1],
        strides: [isize::MIN, isize::MIN, 0, 0],
        ..seg(0, 1)
    };
    assert!(CopyPlan::new(vec![4], 4, vec![wild]).is_err());
    let long = Segment { extents: [usize::MAX, 3, 1, 1], strides: [0; MAX_DIMS], ..seg(0, 1) };
    assert!(CopyPlan::new(vec![4], usize::MAX / 2, vec![long]).is_err());
}

#[test]
fn check_scatter_is_fast_and_never_panics_on_huge_plans() {
    // A broadcast of 2^61 elements over one element: found at the second write.
    let bcast = Segment::new(0, 0, &[(1 << 61, 0)], 0).unwrap();
    let plan = CopyPlan::new(vec![1], 1 << 61, vec![bcast]).unwrap();
    assert!(matches!(plan.check_scatter(), Err(Error::InvalidPlan(_))));
    // Far apart elements: the check's memory follows the writes.
    let far = Segment::new(0, 0, &[(3, 1 << 61)], 0).unwrap();
    let plan = CopyPlan::new(vec![isize::MAX as usize], 3, vec![far]).unwrap();
    assert!(plan.check_scatter().is_ok());
    // A huge dense scatter whose check needs more memory than exists: a typed error. (Not
    // under Miri: it stops the program on an allocation it cannot back instead of
    // reporting the failure, so the error path cannot be reached there.)
    if cfg!(miri) {
        return;
    }
    let dense = Segment::new(0, 0, &[(1 << 62, 1)], 0).unwrap();
    let plan = CopyPlan::new(vec![1 << 62], 1 << 62, vec![dense]).unwrap();
    match plan.check_scatter() {
        Err(Error::OutOfMemory { .. }) => {}
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
}

#[derive(Debug)]
struct Fake {
    len: usize,
    id: usize,
}

impl DeviceMemory for Fake {
    fn len(&self) -> usize {
        self.len
    }
    fn id(&self) -> usize {
        self.id
    }
}

#[test]
fn check_plan_args_never_wraps_byte_lengths() {
    let mem = Fake { len: 64, id: 1 };
    let buf = Fake { len: 64, id: 2 };
    for dtype in DType::ALL {
        // Source declared 2^62 + 16 elements long: its bytes overflow for every dtype wider
        // than a byte, and exceed 64 bytes for every dtype.
        let plan = CopyPlan::new(vec![BIG + 16], 4, vec![seg(0, 4)]).unwrap();
        let r = check_plan_args(&plan, dtype, &[MemRef::whole(&mem)], MemRef::whole(&buf));
        assert!(matches!(r, Err(Error::OutOfBounds { .. })), "{dtype}: {r:?}");
        // Buffer declared 2^62 + 16 elements long.
        let plan = CopyPlan::new(vec![4], BIG + 16, vec![seg(0, 4)]).unwrap();
        let r = check_plan_args(&plan, dtype, &[MemRef::whole(&mem)], MemRef::whole(&buf));
        assert!(matches!(r, Err(Error::OutOfBounds { .. })), "{dtype}: {r:?}");
        // A plan that fits is accepted.
        let plan = CopyPlan::new(vec![4], 4, vec![seg(0, 4)]).unwrap();
        assert!(check_plan_args(&plan, dtype, &[MemRef::whole(&mem)], MemRef::whole(&buf)).is_ok());
    }
}

#[test]
fn memref_overlaps_never_wraps() {
    let m = Fake { len: 64, id: 1 };
    let a = MemRef { memory: &m, offset: usize::MAX, len: 2 };
    let b = MemRef { memory: &m, offset: 0, len: 8 };
    assert!(!a.overlaps(&b));
    assert!(!b.overlaps(&a));
    let c = MemRef { memory: &m, offset: usize::MAX - 1, len: 1 };
    assert!(!a.overlaps(&c) && !c.overlaps(&a));
    let d = MemRef { memory: &m, offset: usize::MAX - 1, len: 2 };
    assert!(a.overlaps(&d) && d.overlaps(&a));
    assert!(a.check().is_err());
}

#[test]
fn encoded_plans_never_underflow() {
    let e = EncodedPlan { segments: vec![], starts: vec![], total: 0 };
    assert_eq!(e.nseg(), 0);
    let plan =
        CopyPlan::new(vec![isize::MAX as usize], 4, vec![Segment::new(0, BIG, &[(4, -1)], 0).unwrap()]);
    let e = encode(&plan.unwrap());
    assert_eq!(e.segments[1], BIG as i64);
    assert_eq!(e.segments[9], -1);
}
