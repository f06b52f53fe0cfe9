//! Helpers shared by the pool tests: a proptest runner, the invariant check, and an
//! allocator with a budget that counts what it has out.
#![allow(dead_code)]

use gpubuf::pool::{MemoryPool, GRANULE};
use gpubuf::{Allocator, DeviceMemory, Error, Kernels, MemoryInfo, Result};
use proptest::test_runner::{Config, TestRunner};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A runner of `cases` cases that writes no regression files.
pub fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() })
}

/// Checks the pool's invariants against the blocks the test holds.
pub fn check_stats<A: Allocator>(pool: &MemoryPool<A>, live: &[gpubuf::PooledBuffer<A>]) {
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

/// An allocator that refuses once `budget` bytes are outstanding (an out-of-memory on
/// demand); it records the most bytes ever outstanding and can be made slow.
#[derive(Clone)]
pub struct Budget<A> {
    pub inner: A,
    pub budget: usize,
    pub used: Arc<AtomicUsize>,
    pub peak: Arc<AtomicUsize>,
    pub calls: Arc<AtomicUsize>,
    pub delay: Duration,
    /// Bytes each allocation is short of the request (a broken allocator).
    pub short: Arc<AtomicUsize>,
}

pub struct Counted<M: DeviceMemory> {
    pub mem: M,
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

pub fn budget<B: Kernels>(b: &B, bytes: usize) -> Budget<B> {
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

/// Where a block lies: (allocation, offset).
pub fn place<A: Allocator>(b: &gpubuf::PooledBuffer<A>) -> (usize, usize) {
    (b.memory().id(), b.offset())
}
