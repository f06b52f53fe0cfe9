//! The memory pool on every backend.

use gpubuf::pool::{
    alloc_size, bin_number, block_size, DeferredAllocator, ImmediateAllocator, Limit, MemoryPool, PoolConfig,
    GRANULE,
};
use gpubuf::{Allocator, Backend, DeviceMemory, Error, Kernels, MemoryInfo, NDBuffer, Order, Result};
use gpubuf_testkit::backend_tests;
use gpubuf_testkit::gated::Gated;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() })
}

/// Checks the pool's invariants against the blocks the test holds.
fn check_stats<A: Allocator>(pool: &MemoryPool<A>, live: &[gpubuf::PooledBuffer<A>]) {
    let st = pool.stats();
    assert_eq!(st.active_blocks, live.len());
    assert_eq!(st.active_bytes, live.iter().map(|b| b.block_size()).sum::<usize>());
    assert_eq!(st.managed_bytes, st.active_bytes + st.held_bytes, "managed = active + held");
    assert_eq!(pool.active_blocks(), st.active_blocks);
    assert_eq!(pool.held_blocks(), st.held_blocks);
    let report = pool.bin_report();
    assert_eq!(report.iter().map(|r| r.active).sum::<usize>(), live.len());
    assert_eq!(report.iter().map(|r| r.held).sum::<usize>(), st.held_blocks);
    // No two live blocks share a byte.
    let mut ranges: Vec<(usize, usize, usize)> =
        live.iter().map(|b| (b.memory().id(), b.offset(), b.offset() + b.block_size())).collect();
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        assert!(w[0].0 != w[1].0 || w[0].2 <= w[1].1, "blocks overlap: {w:?}");
    }
    for b in live {
        assert!(b.block_size() >= b.len());
        assert!(b.offset() + b.block_size() <= b.memory().len());
        assert_eq!(b.offset() % GRANULE, 0);
    }
}

/// proptest: random allocate/release sequences keep the stats consistent, and everything
/// returns to zero after all is released and `free_held`.
fn stats_stay_consistent<B: Kernels>(b: &B) -> Result<()> {
    let ops = prop::collection::vec((any::<bool>(), 0usize..(3 << 20), any::<prop::sample::Index>()), 1..120);
    runner(32)
        .run(&ops, |ops| {
            let pool = MemoryPool::new(ImmediateAllocator(b.clone()));
            let mut live = Vec::new();
            for (alloc, size, pick) in ops {
                if alloc || live.is_empty() {
                    live.push(pool.allocate(size).map_err(|e| TestCaseError::fail(e.to_string()))?);
                } else {
                    live.swap_remove(pick.index(live.len()));
                }
                check_stats(&pool, &live);
            }
            drop(live);
            pool.free_held();
            let st = pool.stats();
            prop_assert_eq!(
                (st.active_blocks, st.active_bytes, st.held_blocks, st.held_bytes, st.managed_bytes),
                (0, 0, 0, 0, 0)
            );
            Ok(())
        })
        .map_err(|e| Error::invalid(e.to_string()))
}

/// The padding bound: a request is padded by less than size * 2^-bits.
fn padding_is_bounded<B: Kernels>(_b: &B) -> Result<()> {
    let sizes = (1u32..=16, 1usize..(1usize << 40));
    runner(2000)
        .run(&sizes, |(bits, size)| {
            let top = alloc_size(bin_number(size, bits), bits);
            prop_assert!(top >= size);
            // Strict: the padding is below size * 2^-bits (pyopencl's bound, which its own
            // test checks with <=, and for sizes where both sides are 0).
            prop_assert!(((top - size) as f64) < size as f64 / f64::from(1u32 << bits), "{} {}", size, top);
            let block = block_size(size, bits);
            prop_assert!(block.is_some(), "no block size for {} bytes", size);
            let block = block.unwrap_or_default();
            prop_assert!(block >= size && block % GRANULE == 0);
            if size >= GRANULE << bits {
                prop_assert!(block - size <= size >> bits, "block {} for {}", block, size);
            } else {
                prop_assert!(block - size < GRANULE.max(size >> bits) + GRANULE);
            }
            // Sizes in one bin get one block size; the next bin starts above it.
            prop_assert_eq!(bin_number(top, bits), bin_number(size, bits));
            prop_assert!(bin_number(top + 1, bits) > bin_number(size, bits));
            Ok(())
        })
        .map_err(|e| Error::invalid(e.to_string()))
}

/// An allocator that refuses once `budget` bytes are outstanding (an out-of-memory on
/// demand); it records the most bytes ever outstanding and can be made slow.
#[derive(Clone)]
struct Budget<A> {
    inner: A,
    budget: usize,
    used: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    calls: Arc<AtomicUsize>,
    delay: Duration,
    /// Bytes each allocation is short of the request (a broken allocator).
    short: Arc<AtomicUsize>,
}

struct Counted<M: DeviceMemory> {
    mem: M,
    used: Arc<AtomicUsize>,
}

impl<M: DeviceMemory> std::fmt::Debug for Counted<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.mem.fmt(f)
    }
}

impl<M: DeviceMemory> DeviceMemory for Counted<M> {
    fn len(&self) -> usize {
        self.mem.len()
    }
    fn id(&self) -> usize {
        self.mem.id()
    }
}

impl<M: DeviceMemory> Drop for Counted<M> {
    fn drop(&mut self) {
        self.used.fetch_sub(self.mem.len(), Ordering::SeqCst);
    }
}

impl<A: Allocator> Allocator for Budget<A> {
    type Memory = Counted<A::Memory>;
    fn allocate(&self, bytes: usize) -> Result<Self::Memory> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let refuse = |now: usize| Error::OutOfMemory {
            requested: bytes,
            available: Some(self.budget.saturating_sub(now)),
            pool: None,
        };
        // Take the bytes atomically, so concurrent callers cannot pass the budget together.
        let now = self
            .used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                now.checked_add(bytes).filter(|&t| t <= self.budget)
            })
            .map_err(refuse)?;
        self.peak.fetch_max(now + bytes, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        match self.inner.allocate(bytes - self.short.load(Ordering::SeqCst).min(bytes)) {
            Ok(mem) => {
                // Give back the shortfall: `Counted` returns what `mem` really holds.
                self.used.fetch_sub(bytes - mem.len(), Ordering::SeqCst);
                Ok(Counted { mem, used: self.used.clone() })
            }
            Err(e) => {
                self.used.fetch_sub(bytes, Ordering::SeqCst);
                Err(e)
            }
        }
    }
    fn memory_info(&self) -> Option<MemoryInfo> {
        Some(MemoryInfo {
            free: self.budget.saturating_sub(self.used.load(Ordering::SeqCst)) as u64,
            total: self.budget as u64,
        })
    }
}

fn budget<B: Kernels>(b: &B, bytes: usize) -> Budget<B> {
    Budget {
        inner: b.clone(),
        budget: bytes,
        used: Arc::new(AtomicUsize::new(0)),
        peak: Arc::new(AtomicUsize::new(0)),
        calls: Arc::new(AtomicUsize::new(0)),
        delay: Duration::ZERO,
        short: Arc::new(AtomicUsize::new(0)),
    }
}

/// The out-of-memory ladder: when the allocator fails, held blocks are freed (largest
/// first) and the request retried; only then is OutOfMemory returned, with the stats.
fn oom_ladder_frees_held_blocks<B: Kernels>(b: &B) -> Result<()> {
    let alloc = budget(b, 16 << 20);
    let cfg = PoolConfig { min_held_bytes: 64 << 20, ..PoolConfig::default() };
    let pool = MemoryPool::with_config(alloc.clone(), cfg)?;
    // Hold most of the budget: three 3 MiB blocks (4 MiB segments each), released.
    let blocks: Vec<_> = (0..3).map(|_| pool.allocate(3 << 20)).collect::<Result<_>>()?;
    drop(blocks);
    assert_eq!(pool.held_bytes(), 12 << 20, "the pool holds them");
    // 10 MiB does not fit beside them: the pool must free held segments and retry.
    let big = pool.allocate(10 << 20)?;
    assert!(pool.stats().managed_bytes <= 16 << 20);
    // Nothing left to free: a typed error with the pool's counters.
    match pool.allocate(10 << 20) {
        Err(Error::OutOfMemory { requested, pool: Some(stats), .. }) => {
            assert_eq!(requested, 10 << 20);
            assert_eq!(stats.active_blocks, 1);
            // Every held segment was freed before giving up: only the big block's own
            // segment (12 MiB, with its unused tail) remains.
            assert_eq!(stats.managed_bytes, 12 << 20);
        }
        other => panic!("expected OutOfMemory with stats, got {other:?}"),
    }
    drop(big);
    assert!(pool.allocate(10 << 20).is_ok(), "retryable: works again once memory is free");
    Ok(())
}

/// The memory limit: held blocks are freed before the limit is declared exceeded.
fn limit_is_enforced<B: Kernels>(b: &B) -> Result<()> {
    let cfg =
        PoolConfig { limit: Some(Limit::Bytes(8 << 20)), min_held_bytes: 64 << 20, ..PoolConfig::default() };
    let pool = MemoryPool::with_config(ImmediateAllocator(b.clone()), cfg)?;
    let a = pool.allocate(4 << 20)?;
    drop(a);
    assert!(pool.held_bytes() > 0);
    let c = pool.allocate(6 << 20)?; // needs the held 4 MiB segment gone
    assert!(pool.managed_bytes() <= 8 << 20);
    match pool.allocate(4 << 20) {
        Err(Error::OutOfMemory { available: Some(av), pool: Some(st), .. }) => {
            assert_eq!(st.limit, Some(8 << 20));
            assert!(av <= 2 << 20);
        }
        other => panic!("expected the limit to refuse, got {other:?}"),
    }
    drop(c);
    pool.set_limit(Some(Limit::Bytes(1 << 20)))?;
    assert!(pool.managed_bytes() <= 1 << 20, "lowering the limit frees held memory");
    let frac = MemoryPool::with_config(
        budget(b, 100 << 20),
        PoolConfig { limit: Some(Limit::Fraction(0.1)), ..PoolConfig::default() },
    )?;
    assert_eq!(frac.stats().limit, Some(10 << 20));
    assert!(MemoryPool::with_config(
        b.clone(),
        PoolConfig { limit: Some(Limit::Fraction(1.5)), ..PoolConfig::default() }
    )
    .is_err());
    Ok(())
}

/// stop_holding: held memory goes, and later frees return straight to the allocator.
fn stop_holding_returns_memory<B: Kernels>(b: &B) -> Result<()> {
    let alloc = budget(b, 64 << 20);
    let pool = MemoryPool::new(alloc.clone());
    let x = pool.allocate(3 << 20)?;
    let y = pool.allocate(1000)?;
    drop(y);
    assert!(pool.held_bytes() > 0);
    pool.stop_holding();
    assert_eq!(pool.held_blocks(), 0);
    drop(x);
    assert_eq!(pool.managed_bytes(), 0);
    assert_eq!(alloc.used.load(Ordering::SeqCst), 0, "the allocator got every byte back");
    Ok(())
}

/// The held-memory policy: a steady loop keeps its blocks (no misses after the first
/// round), a workload that shrank gives its memory back once the window has passed, and
/// `trim_to` frees wholly free segments down to the bound.
fn held_memory_is_bounded<B: Kernels>(b: &B) -> Result<()> {
    let alloc = budget(b, 1 << 30);
    let config = PoolConfig { min_held_bytes: 1 << 20, window: 64, ..PoolConfig::default() };
    let pool = MemoryPool::with_config(alloc.clone(), config)?;
    let sizes = [3000, 70_000, 500_000, 3 << 20, 5 << 20];
    for _ in 0..200 {
        let live: Vec<_> = sizes.iter().map(|&s| pool.allocate(s)).collect::<Result<_>>()?;
        drop(live);
    }
    let st = pool.stats();
    assert!(st.misses <= sizes.len() as u64, "a steady loop missed {} times", st.misses);
    assert_eq!(st.hits + st.misses, 200 * sizes.len() as u64);

    // Grow to 32 large blocks, free them, then run small: the memory goes back.
    let big: Vec<_> = (0..32).map(|_| pool.allocate(3 << 20)).collect::<Result<_>>()?;
    let grown = pool.managed_bytes();
    assert!(grown >= 32 * (3 << 20));
    drop(big);
    for _ in 0..300 {
        drop(pool.allocate(4096)?);
    }
    let small = pool.managed_bytes();
    assert!(small <= 4 << 20, "after shrinking the pool still manages {small} of {grown} bytes");
    assert_eq!(alloc.used.load(Ordering::SeqCst), small, "the allocator got the rest back");

    // trim_to: held bytes down to the bound (whole segments only).
    let keep: Vec<_> = (0..4).map(|_| pool.allocate(1 << 20)).collect::<Result<_>>()?;
    drop(keep);
    pool.trim_to(0);
    assert_eq!(pool.held_bytes(), 0);
    assert_eq!(pool.managed_bytes(), 0);
    Ok(())
}

/// Requests no memory can meet (block sizes near or past `usize::MAX`, or far beyond the
/// device) are `OutOfMemory` errors naming the request, not panics or wrapped sizes, and
/// leave the pool as it was.
fn huge_requests_are_out_of_memory<B: Kernels>(b: &B) -> Result<()> {
    let pool = MemoryPool::new(ImmediateAllocator(b.clone()));
    let keep = pool.allocate(1000)?;
    for bytes in [usize::MAX, usize::MAX - 255, usize::MAX / 2 + 1, 1 << 62, (1 << 60) + 12345] {
        match pool.allocate(bytes) {
            Err(Error::OutOfMemory { requested, .. }) => assert_eq!(requested, bytes),
            other => panic!("{bytes} bytes: expected OutOfMemory, got {other:?}"),
        }
    }
    assert_eq!(block_size(usize::MAX, 4), None);
    let st = pool.stats();
    assert_eq!((st.active_blocks, st.active_bytes), (1, keep.block_size()));
    Ok(())
}

/// Immediate and deferred allocators both serve the pool; the pool uses the immediate
/// path unless configured otherwise.
fn immediate_and_deferred<B: Kernels>(b: &B) -> Result<()> {
    let counting = budget(b, 1 << 30);
    let i = MemoryPool::new(ImmediateAllocator(counting.clone()));
    let x = i.allocate(5000)?;
    b.write(b.default_stream(), &x.memory().mem, x.offset(), &[1u8; 5000])?;
    assert_eq!(counting.calls.load(Ordering::SeqCst), 1);
    let d = MemoryPool::new(DeferredAllocator(b.clone()));
    let x = d.allocate(5000)?;
    b.write(b.default_stream(), x.memory(), x.offset(), &[2u8; 5000])?;
    let mut back = [0u8; 5000];
    b.read(b.default_stream(), x.memory(), x.offset(), &mut back)?;
    assert!(back.iter().all(|&v| v == 2));
    assert_eq!(d.allocate(0)?.len(), 0, "allocate(0) is valid");
    let y = d.allocate(4096)?;
    let (held, active) = (d.held_blocks(), d.active_blocks());
    y.release();
    assert_eq!((d.held_blocks(), d.active_blocks()), (held + 1, active - 1), "release() returns the block");
    Ok(())
}

/// Threads allocating and freeing at once never get the same bytes: each writes its own
/// pattern and checks it before freeing.
fn threads_never_share_a_block<B: Kernels>(b: &B) -> Result<()> {
    let pool = MemoryPool::new(ImmediateAllocator(b.clone()));
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4u8)
            .map(|t| {
                let pool = pool.clone();
                let b = b.clone();
                s.spawn(move || -> Result<()> {
                    let stream = b.new_stream()?;
                    let mut live = Vec::new();
                    for i in 0..300usize {
                        let size = 256 + (i * 7919 + usize::from(t) * 104729) % 70000;
                        let blk = pool.allocate_on(size, &b, &stream)?;
                        let tag = vec![t.wrapping_mul(31).wrapping_add(i as u8); size];
                        b.write(&stream, blk.memory(), blk.offset(), &tag)?;
                        live.push((blk, tag));
                        if live.len() > 6 {
                            let (blk, tag) = live.remove(i % 6);
                            let mut back = vec![0u8; tag.len()];
                            b.read(&stream, blk.memory(), blk.offset(), &mut back)?;
                            assert!(back == tag, "thread {t}: a block was handed out twice");
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().unwrap_or_else(|_| Err(Error::invalid("thread panicked"))))
    })?;
    check_stats(&pool, &[]);
    pool.free_held();
    assert_eq!(pool.managed_bytes(), 0);
    Ok(())
}

/// Where a block lies: (allocation, offset).
fn place<A: Allocator>(b: &gpubuf::PooledBuffer<A>) -> (usize, usize) {
    (b.memory().id(), b.offset())
}

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

/// An allocator that returns less memory than asked for is refused with a typed error
/// (blocks carved past the end of its allocation would fail every later bounds check); the
/// pool's counters do not move and it works again once the allocator does.
fn a_short_allocation_is_refused<B: Kernels>(b: &B) -> Result<()> {
    let alloc = budget(b, 64 << 20);
    alloc.short.store(4096, Ordering::SeqCst);
    let pool = MemoryPool::new(alloc.clone());
    match pool.allocate(1000) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("returned"), "{m}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    let st = pool.stats();
    assert_eq!((st.managed_bytes, st.active_bytes, st.held_bytes), (0, 0, 0));
    assert_eq!(alloc.used.load(Ordering::SeqCst), 0, "the short allocation was given back");
    alloc.short.store(0, Ordering::SeqCst);
    let x = pool.allocate(1000)?;
    check_stats(&pool, std::slice::from_ref(&x));
    Ok(())
}

/// Configs at the edges work or are refused with a typed error, and never panic: holding
/// everything (`min_held_bytes: usize::MAX`, which made a free overflow), an infinite
/// ratio, a window of 0 or u32::MAX, tiny and huge segment sizes.
fn extreme_configs<B: Kernels>(b: &B) -> Result<()> {
    let d = PoolConfig::default;
    let working = [
        PoolConfig { min_held_bytes: usize::MAX, ..d() },
        PoolConfig { held_ratio: f64::INFINITY, ..d() },
        PoolConfig { window: 0, ..d() },
        PoolConfig { window: u32::MAX, min_held_bytes: 0, ..d() },
        PoolConfig { small_segment: 1, large_round: 1, small_max: 0, ..d() },
        PoolConfig { quick_per_bin: 0, ..d() },
        PoolConfig { quick_per_bin: usize::MAX, leading_bits_in_bin_id: 0, ..d() },
        PoolConfig { leading_bits_in_bin_id: 16, ..d() },
    ];
    for cfg in working {
        let pool = MemoryPool::with_config(budget(b, 64 << 20), cfg.clone())?;
        for _ in 0..3 {
            let live: Vec<_> = [1, 4096, 3 << 20].iter().map(|&n| pool.allocate(n)).collect::<Result<_>>()?;
            check_stats(&pool, &live);
        }
        pool.free_held();
        assert_eq!(pool.managed_bytes(), 0, "{cfg:?}");
    }
    let refused = [
        PoolConfig { leading_bits_in_bin_id: 17, ..d() },
        PoolConfig { leading_bits_in_bin_id: u32::MAX, ..d() },
        PoolConfig { small_segment: 0, ..d() },
        PoolConfig { large_round: 0, ..d() },
        PoolConfig { held_ratio: f64::NAN, ..d() },
        PoolConfig { held_ratio: -1.0, ..d() },
        PoolConfig { limit: Some(Limit::Fraction(f64::NAN)), ..d() },
        PoolConfig { limit: Some(Limit::Fraction(0.0)), ..d() },
    ];
    for cfg in refused {
        match MemoryPool::with_config(budget(b, 64 << 20), cfg.clone()) {
            Err(Error::InvalidArgument(_)) => {}
            other => panic!("{cfg:?}: expected InvalidArgument, got {other:?}"),
        }
    }
    Ok(())
}

/// A pooled block as a Buffer/NDBuffer: it returns to the pool when the last view drops.
fn pooled_buffers_return_on_last_drop<B: Kernels>(b: &B) -> Result<()> {
    let pool = MemoryPool::new(b.clone());
    let blk = pool.allocate(4 * 64)?;
    let buf = blk.into_buffer(b)?;
    let nd = NDBuffer::<B, f32>::from_buffer(buf.clone(), &[8, 8], Order::C)?;
    nd.fill(1.5)?;
    let view = nd.transpose(None)?;
    drop(nd);
    drop(buf);
    assert_eq!(pool.active_blocks(), 1, "a view still holds the block");
    assert!(view.all_equal(1.5)?);
    drop(view);
    assert_eq!(pool.active_blocks(), 0);
    Ok(())
}

backend_tests!(
    stats_stay_consistent,
    padding_is_bounded,
    oom_ladder_frees_held_blocks,
    limit_is_enforced,
    stop_holding_returns_memory,
    held_memory_is_bounded,
    huge_requests_are_out_of_memory,
    immediate_and_deferred,
    threads_never_share_a_block,
    stream_ordered_reuse,
    waiting_blocks_do_not_grow_the_pool,
    limit_holds_under_concurrent_growth,
    stream_ids_are_never_reused,
    a_failed_event_keeps_the_block_with_its_stream,
    extreme_configs,
    a_short_allocation_is_refused,
    pooled_buffers_return_on_last_drop
);

/// An SVM pool on OpenCL devices that report SVM support (skipped with the reason
/// elsewhere): blocks are recycled and their bytes round-trip.
#[cfg(feature = "opencl")]
mod svm_pool {
    use super::*;

    #[test]
    fn opencl() {
        use gpubuf::opencl::SvmAllocator;
        let Some(cl) = gpubuf_testkit::opencl() else { return };
        let svm = match SvmAllocator::new(&cl) {
            Ok(a) => a,
            Err(e) => {
                eprintln!("svm pool skipped: {e}");
                return;
            }
        };
        let pool = MemoryPool::new(svm);
        let a = pool.allocate(10_000).expect("svm block");
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        a.memory().write(a.offset(), &data).expect("svm write");
        let mut back = vec![0u8; 10_000];
        a.memory().read(a.offset(), &mut back).expect("svm read");
        assert_eq!(back, data);
        let at = a.memory().as_ptr() as usize + a.offset();
        drop(a);
        let b = pool.allocate(10_000).expect("svm block");
        assert_eq!(b.memory().as_ptr() as usize + b.offset(), at, "the SVM block was reused");
        assert_eq!(pool.stats().hits, 1);
        drop(b);
        pool.free_held();
        assert_eq!(pool.managed_bytes(), 0);
    }
}
