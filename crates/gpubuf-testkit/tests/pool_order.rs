//! Stream-ordered reuse with events that stay pending until the test completes them
//! (`gpubuf_testkit::gated::Gated`), stream identities, and the limit under concurrent
//! growth, on every backend.

mod pool_support;

use gpubuf::pool::{ImmediateAllocator, Limit, MemoryPool, PoolConfig};
use gpubuf::{Backend, Error, Kernels, Result};
use gpubuf_testkit::backend_tests;
use gpubuf_testkit::gated::Gated;
use pool_support::{budget, check_stats, place};
use std::sync::atomic::Ordering;
use std::sync::Barrier;
use std::time::Duration;

/// Stream-ordered reuse, with events that stay pending until the test completes them: a
/// block freed on a stream goes back out at once on that stream, and to another stream or
/// the host only once every stream that used it is done; the bytes written before the free
/// are intact when the block is reused.
fn stream_ordered_reuse<B: Kernels>(b: &B) -> Result<()> {
    let g = Gated::new(b.clone());
    let pool = MemoryPool::new(ImmediateAllocator(g.clone()));
    let (s1, s2) = (g.new_stream()?, g.new_stream()?);
    let x = pool.allocate_on(100_000, &g, &s1)?;
    let at = place(&x);
    g.fill(&s1, x.memref(), &[7])?;
    drop(x);
    assert_eq!(g.pending(), 1, "the free recorded an event on s1");
    // Pending: the host and s2 must get other memory, s1 gets it back at once.
    let host = pool.allocate(100_000)?;
    assert_ne!(place(&host), at, "the host got a block s1 may still be using");
    let on_s2 = pool.allocate_on(100_000, &g, &s2)?;
    assert_ne!(place(&on_s2), at, "s2 got a block s1 may still be using");
    let mut y = pool.allocate_on(100_000, &g, &s1)?;
    assert_eq!(place(&y), at, "s1 reuses its own block at once");
    // Used on s2 too: after s1 completes, only s2 may take it; after s2, anyone.
    y.record_stream(&g, &s2);
    drop(y);
    g.complete(&s1)?;
    let on_s1 = pool.allocate_on(100_000, &g, &s1)?;
    assert_ne!(place(&on_s1), at, "s1 got a block s2 may still be using");
    let host2 = pool.allocate(100_000)?;
    assert_ne!(place(&host2), at, "the host got a block s2 may still be using");
    let z = pool.allocate_on(100_000, &g, &s2)?;
    assert_eq!(place(&z), at, "s2's events are the only ones left: s2 may take it");
    drop(z);
    g.complete(&s2)?;
    let w = pool.allocate(100_000)?;
    assert_eq!(place(&w), at, "all done: the host gets it");
    let mut back = vec![0u8; 100_000];
    g.read(g.default_stream(), w.memory(), w.offset(), &mut back)?;
    assert!(back.iter().all(|&v| v == 7), "the bytes written on s1 are intact");
    drop((host, on_s2, on_s1, host2, w));
    check_stats(&pool, &[]);
    Ok(())
}

/// Many blocks waiting on a stream whose events have not completed (more than any search
/// window) neither hide the free memory beside them nor make the pool grow: the host and
/// another stream are served from the rest of the segment, the stream itself from its own
/// blocks, and nothing is allocated until the segment is really used up.
fn waiting_blocks_do_not_grow_the_pool<B: Kernels>(b: &B) -> Result<()> {
    let g = Gated::new(b.clone());
    let pool = MemoryPool::new(ImmediateAllocator(g.clone()));
    let (s1, s2) = (g.new_stream()?, g.new_stream()?);
    let blocks: Vec<_> = (0..40).map(|_| pool.allocate_on(4096, &g, &s1)).collect::<Result<_>>()?;
    let waiting: Vec<_> = blocks.iter().map(place).collect();
    drop(blocks);
    let managed = pool.managed_bytes();
    assert_eq!(managed, 2 << 20, "one small segment");
    let mut live = Vec::new();
    for i in 0..100 {
        let blk = if i % 2 == 0 { pool.allocate(4096)? } else { pool.allocate_on(4096, &g, &s2)? };
        assert!(!waiting.contains(&place(&blk)), "request {i} got a block s1 may still be using");
        live.push(blk);
    }
    assert_eq!(pool.managed_bytes(), managed, "the pool grew while free memory was usable");
    for _ in 0..40 {
        let own = pool.allocate_on(4096, &g, &s1)?;
        assert!(waiting.contains(&place(&own)), "s1 takes its own waiting blocks first");
        live.push(own);
    }
    assert_eq!(pool.managed_bytes(), managed);
    check_stats(&pool, &live);
    drop(live);
    g.complete_all()?;
    pool.free_held();
    assert_eq!(pool.managed_bytes(), 0);
    Ok(())
}

/// Stream identities are never reused: a stream created after another was destroyed gets
/// a new one (drivers reuse handles, and a pool that took the handle for the identity
/// would hand a block of the old stream's pending work to the new stream at once).
fn stream_ids_are_never_reused<B: Kernels>(b: &B) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    seen.insert(b.stream_id(b.default_stream()));
    for i in 0..64 {
        let s = b.new_stream()?;
        let id = b.stream_id(&s);
        assert_eq!(b.stream_id(&s.clone()), id, "a clone is the same stream");
        assert!(seen.insert(id), "stream {i} got the identity {id} of an earlier stream");
        drop(s);
    }
    Ok(())
}

/// A free whose event cannot be recorded leaves the block with its stream: nothing tells
/// when the stream's work on it is done, so neither the host nor another stream gets it
/// (it used to become free for anyone).
fn a_failed_event_keeps_the_block_with_its_stream<B: Kernels>(b: &B) -> Result<()> {
    let g = Gated::new(b.clone());
    let pool = MemoryPool::new(ImmediateAllocator(g.clone()));
    let (s1, s2) = (g.new_stream()?, g.new_stream()?);
    let x = pool.allocate_on(8192, &g, &s1)?;
    let at = place(&x);
    g.fail_records(true);
    drop(x);
    g.fail_records(false);
    let host = pool.allocate(8192)?;
    let other = pool.allocate_on(8192, &g, &s2)?;
    assert!(place(&host) != at && place(&other) != at, "the block left its stream");
    let own = pool.allocate_on(8192, &g, &s1)?;
    assert_eq!(place(&own), at, "its own stream may still reuse it");
    drop((host, other, own));
    g.complete_all()?;
    check_stats(&pool, &[]);
    pool.free_held();
    assert_eq!(pool.managed_bytes(), 0, "the segment is still released");
    Ok(())
}

/// The limit holds when threads grow the pool at once: each of 4 threads asks for a 3 MiB
/// block (a 4 MiB segment) under a 4 MiB limit, released together by a barrier, with an
/// allocator slow enough for them to overlap. One succeeds per round, the others get
/// OutOfMemory; the bytes the allocator ever had out never pass the limit, and the
/// accounting is exact afterwards.
fn limit_holds_under_concurrent_growth<B: Kernels>(b: &B) -> Result<()> {
    let limit = 4 << 20;
    let mut alloc = budget(b, 1 << 30);
    alloc.delay = Duration::from_millis(5);
    let cfg = PoolConfig { limit: Some(Limit::Bytes(limit)), ..PoolConfig::default() };
    let pool = MemoryPool::with_config(alloc.clone(), cfg)?;
    for round in 0..5 {
        let barrier = Barrier::new(4);
        let got: Vec<Option<gpubuf::PooledBuffer<_>>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        match pool.allocate(3 << 20) {
                            Ok(blk) => Ok(Some(blk)),
                            Err(Error::OutOfMemory { .. }) => Ok(None),
                            Err(e) => Err(e),
                        }
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(Error::invalid("thread panicked"))))
                .collect::<Result<Vec<_>>>()
        })?;
        let live: Vec<_> = got.into_iter().flatten().collect();
        assert_eq!(live.len(), 1, "round {round}: exactly one 4 MiB segment fits under the limit");
        assert!(pool.managed_bytes() <= limit, "round {round}: managed {} bytes", pool.managed_bytes());
        assert!(alloc.peak.load(Ordering::SeqCst) <= limit, "round {round}: the allocator had more out");
        check_stats(&pool, &live);
        drop(live);
        pool.free_held();
        assert_eq!(pool.managed_bytes(), 0);
        assert_eq!(alloc.used.load(Ordering::SeqCst), 0);
    }
    let st = pool.stats();
    assert_eq!((st.active_bytes, st.held_bytes, st.managed_bytes), (0, 0, 0));
    assert!(st.peak_managed_bytes <= limit);
    Ok(())
}

/// `PooledBuffer::reuse`, a caller's own cache in front of the pool: a block serves a new
/// request of its size class in place (its length changes, the pool's accounting does
/// not), never one of another class, and never a block used on a stream, which must go
/// back through the pool's events; `count_hits` puts such reuses in the stats.
fn reuse_in_place<B: Kernels>(b: &B) -> Result<()> {
    let g = Gated::new(b.clone());
    let pool = MemoryPool::new(ImmediateAllocator(g.clone()));
    let mut x = pool.allocate(1000)?;
    let (at, block, active) = (place(&x), x.block_size(), pool.active_bytes());
    assert!(x.reuse(1001), "1001 bytes are of 1000's size class");
    assert_eq!((x.len(), x.memref().len, place(&x), x.block_size()), (1001, 1001, at, block));
    assert!(!x.reuse(4000) && !x.reuse(10), "another size class");
    assert_eq!(x.len(), 1001, "a refused reuse leaves the block as it was");
    assert!(!x.reuse(0), "0 bytes are of the smallest class");
    assert_eq!(pool.active_bytes(), active);
    pool.count_hits(3);
    assert_eq!(pool.stats().hits, 3);
    let s = g.new_stream()?;
    let mut y = pool.allocate_on(1000, &g, &s)?;
    assert!(!y.reuse(1000), "a block used on a stream goes back through the pool");
    drop((x, y));
    check_stats(&pool, &[]);
    Ok(())
}

backend_tests!(
    reuse_in_place,
    stream_ordered_reuse,
    waiting_blocks_do_not_grow_the_pool,
    stream_ids_are_never_reused,
    a_failed_event_keeps_the_block_with_its_stream,
    limit_holds_under_concurrent_growth
);
