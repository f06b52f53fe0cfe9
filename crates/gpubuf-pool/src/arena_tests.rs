//! Unit tests of the arena: stream-ordered reuse and the accounting of splits and merges.
use super::*;
use crate::stream::Pending;
use std::any::TypeId;
use std::sync::atomic::{AtomicBool, Ordering};

struct Manual(AtomicBool);
impl Pending for Manual {
    fn complete(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

fn s(n: u64) -> Option<StreamKey> {
    Some((TypeId::of::<()>(), n))
}

fn ev(n: u64, e: &Arc<Manual>) -> (StreamKey, Arc<dyn Pending>) {
    ((TypeId::of::<()>(), n), e.clone())
}

fn arena() -> Arena<()> {
    let mut a = Arena::new();
    a.add_segment(Arc::new(()), 1 << 20, false);
    a
}

fn check(a: &Arena<()>) {
    assert_eq!(a.active_bytes + a.held_bytes(), a.managed, "managed = active + held");
}

#[test]
fn a_block_freed_on_a_stream_goes_elsewhere_only_after_its_event() {
    let mut a = arena();
    let t = a.take(4096, 7, false, s(1), 256).unwrap();
    let e = Arc::new(Manual(AtomicBool::new(false)));
    a.release(t, 7, vec![ev(1, &e)], true);
    // Another stream must not get the block while stream 1's work may still use it.
    let other = a.take(4096, 7, false, s(2), 256).unwrap();
    assert_ne!(other.offset, t.offset);
    // The host (no stream) must wait for every event too.
    assert!(a.take(4096, 7, false, None, 256).map(|x| x.offset) != Some(t.offset));
    // The freeing stream gets it back at once: its own order covers the reuse.
    let again = a.take(4096, 7, false, s(1), 256).unwrap();
    assert_eq!(again.offset, t.offset);
    a.release(again, 7, vec![ev(1, &e)], true);
    e.0.store(true, Ordering::SeqCst);
    let now = a.take(4096, 7, false, s(2), 256).unwrap();
    assert_eq!(now.offset, t.offset, "after the event completes any stream may reuse it");
    check(&a);
}

#[test]
fn record_stream_events_hold_the_block_for_every_other_stream() {
    let mut a = arena();
    let t = a.take(8192, 9, false, s(1), 256).unwrap();
    let e1 = Arc::new(Manual(AtomicBool::new(true)));
    let e3 = Arc::new(Manual(AtomicBool::new(false)));
    a.release(t, 9, vec![ev(1, &e1), ev(3, &e3)], false);
    // Stream 1's event is done but stream 3 still uses the block: only stream 3 may
    // take it now.
    let x = a.take(8192, 9, false, s(1), 256).unwrap();
    assert_ne!(x.offset, t.offset);
    let y = a.take(8192, 9, false, s(3), 256).unwrap();
    assert_eq!(y.offset, t.offset);
    a.release(x, 9, Vec::new(), false);
    a.release(y, 9, Vec::new(), false);
    assert_eq!(a.active_blocks, 0);
    assert_eq!(a.held_bytes(), a.managed);
    // Everything coalesced back into one free block.
    assert_eq!(a.free.len(), 1);
}

#[test]
fn many_pending_blocks_never_hide_a_usable_one() {
    // More blocks wait on stream 1 than any search window: the host, stream 2 and stream
    // 1 must each still find what they may take, with one lookup.
    let mut a = arena();
    let e = Arc::new(Manual(AtomicBool::new(false)));
    let held: Vec<Taken> = (0..40).map(|_| a.take(4096, 7, false, s(1), 256).unwrap()).collect();
    for t in &held {
        a.release(*t, 7, vec![ev(1, &e)], false);
    }
    check(&a);
    let waiting: Vec<usize> = held.iter().map(|t| t.offset).collect();
    let host = a.take(4096, 7, false, None, 256).expect("the idle rest of the segment");
    assert!(!waiting.contains(&host.offset));
    let other = a.take(4096, 7, false, s(2), 256).expect("the idle rest of the segment");
    assert!(!waiting.contains(&other.offset));
    let own = a.take(4096, 7, false, s(1), 256).expect("a block of its own stream");
    assert!(waiting.contains(&own.offset));
    check(&a);
    // Once the events complete, flushing merges the waiting blocks back.
    e.0.store(true, Ordering::SeqCst);
    for t in [host, other, own] {
        a.release(t, 7, Vec::new(), false);
    }
    a.flush_quick();
    assert_eq!(a.free.len(), 1);
    assert_eq!(a.free.pending_len(), 0);
    check(&a);
}

#[test]
fn splitting_and_coalescing_keep_the_accounting() {
    let mut a = arena();
    let xs: Vec<Taken> = (0..8).map(|_| a.take(65536, 20, false, None, 256).unwrap()).collect();
    assert_eq!(a.active_bytes, 8 * 65536);
    check(&a);
    for (i, x) in xs.iter().enumerate() {
        a.release(*x, 20, Vec::new(), i % 2 == 0);
        check(&a);
    }
    a.flush_quick();
    assert_eq!(a.free.len(), 1);
    assert!(a.free.contains(0, 0));
    let freed = a.release_free_segments(|_| true);
    assert_eq!(freed.len(), 1);
    assert_eq!((a.managed, a.held_bytes(), a.held_blocks()), (0, 0, 0));
}
