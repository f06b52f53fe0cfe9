//! The memory pool on every backend: accounting, padding, the out-of-memory ladder, the
//! limit, held memory, extreme configs, threads and leases. Stream ordering and concurrent
//! growth are in `pool_order.rs`.

mod pool_support;

use gpubuf::pool::{
    alloc_size, bin_number, block_size, DeferredAllocator, ImmediateAllocator, Limit, MemoryPool, PoolConfig,
    GRANULE,
};
use gpubuf::{Error, Kernels, NDBuffer, Order, Result};
use gpubuf_testkit::backend_tests;
use pool_support::{budget, check_stats, runner};
use proptest::prelude::*;
use std::sync::atomic::Ordering;

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

/// `whole_blocks` (pyopencl's layout): every block is its own allocation of exactly its
/// size class's block size, at offset 0, and a held block serves only its own class.
fn whole_blocks_are_pyopencls_layout<B: Kernels>(b: &B) -> Result<()> {
    let ops = prop::collection::vec((any::<bool>(), 0usize..(3 << 20), any::<prop::sample::Index>()), 1..60);
    runner(16)
        .run(&ops, |ops| {
            let cfg = PoolConfig { whole_blocks: true, ..PoolConfig::default() };
            let pool = MemoryPool::with_config(ImmediateAllocator(b.clone()), cfg)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let mut live = Vec::new();
            for (alloc, size, pick) in ops {
                if alloc || live.is_empty() {
                    let blk = pool.allocate(size).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    let want = block_size(size, 4).unwrap_or_default();
                    prop_assert_eq!((blk.offset(), blk.block_size()), (0, want));
                    prop_assert_eq!(gpubuf::DeviceMemory::len(blk.memory()), want);
                    live.push(blk);
                } else {
                    live.swap_remove(pick.index(live.len()));
                }
                check_stats(&pool, &live);
            }
            Ok(())
        })
        .map_err(|e| Error::invalid(e.to_string()))?;
    let pool =
        MemoryPool::with_config(b.clone(), PoolConfig { whole_blocks: true, ..PoolConfig::default() })?;
    drop(pool.allocate(3 << 20)?);
    let other = pool.allocate(1000)?; // another class: a new allocation, not a split
    assert_eq!((other.offset(), other.block_size()), (0, block_size(1000, 4).unwrap_or_default()));
    assert_eq!(pool.stats().hits, 0);
    drop(other);
    drop(pool.allocate(3 << 20)?);
    assert_eq!(pool.stats().hits, 1, "the held block of the class served it");
    Ok(())
}

backend_tests!(
    whole_blocks_are_pyopencls_layout,
    stats_stay_consistent,
    padding_is_bounded,
    oom_ladder_frees_held_blocks,
    limit_is_enforced,
    stop_holding_returns_memory,
    held_memory_is_bounded,
    huge_requests_are_out_of_memory,
    immediate_and_deferred,
    threads_never_share_a_block,
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
