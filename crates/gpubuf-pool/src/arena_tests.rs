//! Unit tests of the arena: stream-ordered reuse and the accounting of splits and merges.
use super::*;
use crate::stream::Pending;
use std::sync::atomic::{AtomicBool, Ordering};

struct Manual(AtomicBool);
impl Pending for Manual {
    fn complete(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

fn arena() -> Arena<()> {
    let mut a = Arena::new(64 * 16);
    a.add_segment(Arc::new(()), 1 << 20, false);
    a
}

#[test]
fn a_block_freed_on_a_stream_goes_elsewhere_only_after_its_event() {
    let mut a = arena();
    let t = a.take(4096, 7, false, Some(1), 256).unwrap();
    let ev = Arc::new(Manual(AtomicBool::new(false)));
    a.release(t, 7, vec![(1, ev.clone())], true);
    // Another stream must not get the block while stream 1's work may still use it.
    let other = a.take(4096, 7, false, Some(2), 256).unwrap();
    assert_ne!(other.offset, t.offset);
    // The host (no stream) must wait for every event too.
    assert!(a.take(4096, 7, false, None, 256).map(|x| x.offset) != Some(t.offset));
    // The freeing stream gets it back at once: its own order covers the reuse.
    let again = a.take(4096, 7, false, Some(1), 256).unwrap();
    assert_eq!(again.offset, t.offset);
    a.release(again, 7, vec![(1, ev.clone())], true);
    ev.0.store(true, Ordering::SeqCst);
    let now = a.take(4096, 7, false, Some(2), 256).unwrap();
    assert_eq!(now.offset, t.offset, "after the event completes any stream may reuse it");
}

#[test]
fn record_stream_events_hold_the_block_for_every_other_stream() {
    let mut a = arena();
    let t = a.take(8192, 9, false, Some(1), 256).unwrap();
    let e1 = Arc::new(Manual(AtomicBool::new(true)));
    let e3 = Arc::new(Manual(AtomicBool::new(false)));
    a.release(t, 9, vec![(1, e1), (3, e3.clone())], false);
    // Stream 1's event is done but stream 3 still uses the block: only stream 3 may
    // take it now.
    let x = a.take(8192, 9, false, Some(1), 256).unwrap();
    assert_ne!(x.offset, t.offset);
    let y = a.take(8192, 9, false, Some(3), 256).unwrap();
    assert_eq!(y.offset, t.offset);
    a.release(x, 9, Vec::new(), false);
    a.release(y, 9, Vec::new(), false);
    assert_eq!(a.active_blocks, 0);
    assert_eq!(a.held_bytes(), a.managed);
    // Everything coalesced back into one free block.
    assert_eq!(a.free_blocks.len(), 1);
}

#[test]
fn splitting_and_coalescing_keep_the_accounting() {
    let mut a = arena();
    let xs: Vec<Taken> = (0..8).map(|_| a.take(65536, 20, false, None, 256).unwrap()).collect();
    assert_eq!(a.active_bytes, 8 * 65536);
    assert_eq!(a.active_bytes + a.held_bytes(), a.managed);
    for (i, x) in xs.iter().enumerate() {
        a.release(*x, 20, Vec::new(), i % 2 == 0);
        assert_eq!(a.active_bytes + a.held_bytes(), a.managed);
    }
    a.flush_quick();
    assert_eq!(a.free_blocks.len(), 1);
    let freed = a.release_free_segments(|_| true);
    assert_eq!(freed.len(), 1);
    assert_eq!((a.managed, a.held_bytes(), a.held_blocks()), (0, 0, 0));
}
