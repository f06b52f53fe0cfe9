//! Hostile input for the memory pool: every constructor and operation with extreme values
//! (0, 1, usize::MAX, 2^62, NaN, infinities, u32::MAX bits, ...), in random sequences with
//! streams whose events stay pending. Nothing may panic; failures are typed errors
//! (`OutOfMemory` for requests, `InvalidArgument` for settings); the accounting stays exact
//! after every step (the pool's counters against the blocks held and against the bytes the
//! allocator has out); and afterwards the pool is still usable.

use gpubuf::cpu::{CpuBackend, CpuMemory};
use gpubuf::pool::{
    alloc_size, bin_number, block_size, DeferredAllocator, ImmediateAllocator, Limit, MemoryPool, PoolConfig,
    PooledBuffer, GRANULE, MAX_LEADING_BITS,
};
use gpubuf::{Allocator, Backend, DeviceMemory, Error, MemoryInfo, Result};
use gpubuf_testkit::gated::{Gated, GatedStream};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Largest single allocation the test allocator grants (bigger requests are refused as
/// out of memory without touching the host).
const CAP: usize = 8 << 20;

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() })
}

/// A CPU allocator with a budget of outstanding bytes, per-request cap, and lazily backed
/// memory (so hostile segment sizes cost nothing); it counts what it has out.
#[derive(Clone)]
struct Capped {
    cpu: CpuBackend,
    budget: usize,
    out: Arc<AtomicUsize>,
}

#[derive(Debug)]
struct Counted {
    mem: CpuMemory,
    out: Arc<AtomicUsize>,
}

impl DeviceMemory for Counted {
    fn len(&self) -> usize {
        self.mem.len()
    }
    fn id(&self) -> usize {
        self.mem.id()
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.out.fetch_sub(self.mem.len(), Ordering::SeqCst);
    }
}

impl Allocator for Capped {
    type Memory = Counted;
    fn allocate(&self, bytes: usize) -> Result<Counted> {
        let refuse = || Error::OutOfMemory { requested: bytes, available: None, pool: None };
        if bytes > CAP {
            return Err(refuse());
        }
        self.out
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |o| {
                o.checked_add(bytes).filter(|&t| t <= self.budget)
            })
            .map_err(|_| refuse())?;
        match self.cpu.allocate(bytes) {
            Ok(mem) => Ok(Counted { mem, out: self.out.clone() }),
            Err(e) => {
                self.out.fetch_sub(bytes, Ordering::SeqCst);
                Err(e)
            }
        }
    }
    fn memory_info(&self) -> Option<MemoryInfo> {
        Some(MemoryInfo { free: self.budget as u64, total: self.budget as u64 })
    }
}

fn capped(budget: usize) -> Capped {
    Capped { cpu: gpubuf_testkit::cpu(), budget, out: Arc::new(AtomicUsize::new(0)) }
}

/// Sizes: the edges, powers of two around them, and ordinary ones.
fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        prop::sample::select(vec![
            0,
            1,
            GRANULE - 1,
            GRANULE,
            GRANULE + 1,
            4096,
            (1 << 20) - 1,
            1 << 20,
            (1 << 20) + 1,
            2 << 20,
            CAP,
            CAP + 1,
            1 << 32,
            1 << 62,
            (1 << 62) + 1,
            usize::MAX / 2,
            usize::MAX / 2 + 1,
            usize::MAX - GRANULE,
            usize::MAX - 1,
            usize::MAX,
        ]),
        0usize..(3 << 20),
        any::<usize>(),
    ]
}

fn ratio() -> impl Strategy<Value = f64> {
    prop::sample::select(vec![
        0.0,
        -0.0,
        0.2,
        1.0,
        1e300,
        f64::MIN_POSITIVE,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        -1.0,
    ])
}

fn limit() -> impl Strategy<Value = Option<Limit>> {
    prop_oneof![
        Just(None),
        size().prop_map(|b| Some(Limit::Bytes(b))),
        prop::sample::select(vec![4 << 20, 16 << 20, 64 << 20]).prop_map(|b| Some(Limit::Bytes(b))),
        ratio().prop_map(|f| Some(Limit::Fraction(f))),
        prop::sample::select(vec![1e-300, 0.5, 1.0, 1.0 + 1e-12]).prop_map(|f| Some(Limit::Fraction(f))),
    ]
}

fn config() -> impl Strategy<Value = PoolConfig> {
    let bits = prop_oneof![
        4 => prop::sample::select(vec![0u32, 1, 4, 8, 16]),
        1 => prop::sample::select(vec![17u32, 63, 64, u32::MAX]),
    ];
    let seg =
        prop::sample::select(vec![1usize, 255, GRANULE, 4096, 2 << 20, CAP, CAP + 1, 1 << 62, usize::MAX]);
    let small_max = prop::sample::select(vec![0usize, 1, 4096, 1 << 20, usize::MAX]);
    let zero_or_seg = prop_oneof![1 => Just(0usize), 8 => seg];
    let held = prop::sample::select(vec![0usize, 1, 8 << 20, usize::MAX]);
    let window = prop::sample::select(vec![0u32, 1, 2, 1024, u32::MAX - 1, u32::MAX]);
    let quick = prop::sample::select(vec![0usize, 1, 8, usize::MAX]);
    let ratio = prop_oneof![4 => prop::sample::select(vec![0.0, 0.2, 1e300, f64::INFINITY]), 1 => ratio()];
    (
        bits,
        any::<bool>(),
        limit(),
        ratio,
        held,
        window,
        small_max,
        zero_or_seg.clone(),
        zero_or_seg,
        quick,
        any::<bool>(),
    )
        .prop_map(
            |(
                bits,
                immediate,
                limit,
                ratio,
                held,
                window,
                small_max,
                small_seg,
                large_round,
                quick,
                whole,
            )| {
                PoolConfig {
                    leading_bits_in_bin_id: bits,
                    immediate,
                    limit,
                    held_ratio: ratio,
                    min_held_bytes: held,
                    window,
                    small_max,
                    small_segment: small_seg,
                    large_round,
                    quick_per_bin: quick,
                    whole_blocks: whole,
                }
            },
        )
}

#[derive(Debug, Clone)]
enum Op {
    Allocate(usize),
    AllocateOn(usize, usize),
    Release(prop::sample::Index),
    RecordStream(prop::sample::Index, usize),
    Complete(usize),
    CompleteAll,
    TrimTo(usize),
    FreeHeld,
    StopHolding,
    SetLimit(Option<Limit>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => size().prop_map(Op::Allocate),
        3 => (size(), 0usize..3).prop_map(|(s, t)| Op::AllocateOn(s, t)),
        4 => any::<prop::sample::Index>().prop_map(Op::Release),
        1 => (any::<prop::sample::Index>(), 0usize..3).prop_map(|(i, t)| Op::RecordStream(i, t)),
        1 => (0usize..3).prop_map(Op::Complete),
        1 => Just(Op::CompleteAll),
        1 => size().prop_map(Op::TrimTo),
        1 => Just(Op::FreeHeld),
        1 => Just(Op::StopHolding),
        1 => limit().prop_map(Op::SetLimit),
    ]
}

/// The pool's counters agree with the blocks held and with the allocator.
fn exact(
    pool: &MemoryPool<Capped>,
    live: &[PooledBuffer<Capped>],
    out: usize,
) -> std::result::Result<(), TestCaseError> {
    let st = pool.stats();
    prop_assert_eq!(st.active_blocks, live.len());
    prop_assert_eq!(st.active_bytes, live.iter().map(|b| b.block_size()).sum::<usize>());
    prop_assert_eq!(st.managed_bytes, st.active_bytes + st.held_bytes, "managed = active + held");
    prop_assert_eq!(st.managed_bytes, out, "the allocator has out what the pool manages");
    prop_assert!(st.peak_managed_bytes >= st.managed_bytes && st.peak_active_bytes >= st.active_bytes);
    let report = pool.bin_report();
    prop_assert_eq!(report.iter().map(|r| r.active).sum::<usize>(), live.len());
    prop_assert_eq!(report.iter().map(|r| r.held).sum::<usize>(), st.held_blocks);
    for b in live {
        prop_assert!(b.block_size() >= b.len());
        prop_assert!(b.offset().checked_add(b.block_size()).is_some_and(|e| e <= b.memory().len()));
    }
    Ok(())
}

/// A request's result: a block of at least the size, or OutOfMemory naming the request.
fn accept(
    r: Result<PooledBuffer<Capped>>,
    bytes: usize,
) -> std::result::Result<Option<PooledBuffer<Capped>>, TestCaseError> {
    match r {
        Ok(b) => {
            prop_assert_eq!(b.len(), bytes);
            prop_assert!(b.block_size() >= bytes);
            Ok(Some(b))
        }
        Err(Error::OutOfMemory { requested, .. }) => {
            prop_assert_eq!(requested, bytes);
            Ok(None)
        }
        Err(e) => Err(TestCaseError::fail(format!("allocate({bytes}): untyped failure {e}"))),
    }
}

/// The limit in bytes a pool over `a` would get for `l` (`Err` when it refuses it).
fn expected_limit(l: Option<Limit>, budget: usize) -> std::result::Result<Option<usize>, ()> {
    match l {
        None => Ok(None),
        Some(Limit::Bytes(b)) => Ok(Some(b)),
        Some(Limit::Fraction(f)) if f > 0.0 && f <= 1.0 => Ok(Some((budget as f64 * f) as usize)),
        Some(Limit::Fraction(_)) => Err(()),
    }
}

fn run_ops(cfg: PoolConfig, budget: usize, ops: Vec<Op>) -> std::result::Result<(), TestCaseError> {
    let alloc = capped(budget);
    let valid = cfg.leading_bits_in_bin_id <= MAX_LEADING_BITS
        && cfg.small_segment > 0
        && cfg.large_round > 0
        && !cfg.held_ratio.is_nan()
        && cfg.held_ratio >= 0.0
        && expected_limit(cfg.limit, budget).is_ok();
    let pool = match MemoryPool::with_config(alloc.clone(), cfg.clone()) {
        Ok(p) => {
            prop_assert!(valid, "accepted {:?}", cfg);
            p
        }
        Err(Error::InvalidArgument(_)) => {
            prop_assert!(!valid, "refused {:?}", cfg);
            return Ok(());
        }
        Err(e) => return Err(TestCaseError::fail(format!("config {cfg:?}: untyped failure {e}"))),
    };
    let mut limit = expected_limit(cfg.limit, budget).unwrap_or(None);
    prop_assert_eq!(pool.stats().limit, limit);
    let g = Gated::new(gpubuf_testkit::cpu());
    let streams: Vec<GatedStream<CpuBackend>> = (0..3)
        .map(|_| g.new_stream())
        .collect::<Result<_>>()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut live: Vec<PooledBuffer<Capped>> = Vec::new();
    for op in ops {
        let before = pool.managed_bytes();
        match op {
            Op::Allocate(n) => live.extend(accept(pool.allocate(n), n)?),
            Op::AllocateOn(n, s) => live.extend(accept(pool.allocate_on(n, &g, &streams[s]), n)?),
            Op::Release(i) if !live.is_empty() => live.swap_remove(i.index(live.len())).release(),
            Op::Release(_) => {}
            Op::RecordStream(i, s) if !live.is_empty() => {
                let n = live.len();
                live[i.index(n)].record_stream(&g, &streams[s]);
            }
            Op::RecordStream(..) => {}
            Op::Complete(s) => g.complete(&streams[s]).map_err(|e| TestCaseError::fail(e.to_string()))?,
            Op::CompleteAll => g.complete_all().map_err(|e| TestCaseError::fail(e.to_string()))?,
            Op::TrimTo(n) => pool.trim_to(n),
            Op::FreeHeld => pool.free_held(),
            Op::StopHolding => pool.stop_holding(),
            Op::SetLimit(l) => match (pool.set_limit(l), expected_limit(l, budget)) {
                (Ok(()), Ok(bytes)) => limit = bytes,
                (Err(Error::InvalidArgument(_)), Err(())) => {}
                (r, e) => {
                    return Err(TestCaseError::fail(format!("set_limit({l:?}): {r:?}, expected {e:?}")))
                }
            },
        }
        let after = pool.managed_bytes();
        if let Some(l) = limit {
            prop_assert!(
                after <= before || after <= l,
                "grew from {} to {} past the limit {}",
                before,
                after,
                l
            );
        }
        exact(&pool, &live, alloc.out.load(Ordering::SeqCst))?;
        // Keep the host's memory use small: at most 12 blocks live.
        if live.len() > 12 {
            live.remove(0);
        }
    }
    // Still usable: with everything back and no limit, a valid request succeeds, its bytes
    // round-trip, and every counter returns to zero.
    drop(live);
    g.complete_all().map_err(|e| TestCaseError::fail(e.to_string()))?;
    pool.set_limit(None).map_err(|e| TestCaseError::fail(e.to_string()))?;
    pool.free_held();
    exact(&pool, &[], alloc.out.load(Ordering::SeqCst))?;
    prop_assert_eq!(pool.managed_bytes(), 0);
    let probe = 1000;
    let bits = cfg.leading_bits_in_bin_id;
    let blk = block_size(probe, bits).unwrap_or(usize::MAX);
    let seg = if cfg.whole_blocks {
        Some(blk)
    } else if blk > cfg.small_max {
        blk.checked_next_multiple_of(cfg.large_round)
    } else {
        Some(cfg.small_segment.max(blk))
    };
    let fits = seg.is_some_and(|s| s <= CAP && s <= budget);
    match pool.allocate(probe) {
        Ok(b) => {
            prop_assert!(fits, "a segment over the cap was granted");
            let cpu = gpubuf_testkit::cpu();
            let data: Vec<u8> = (0..probe).map(|i| (i % 251) as u8).collect();
            cpu.write(cpu.default_stream(), &b.memory().mem, b.offset(), &data)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let mut back = vec![0u8; probe];
            cpu.read(cpu.default_stream(), &b.memory().mem, b.offset(), &mut back)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(back, data);
            exact(&pool, std::slice::from_ref(&b), alloc.out.load(Ordering::SeqCst))?;
        }
        Err(Error::OutOfMemory { .. }) => prop_assert!(!fits, "a valid request failed after hostile input"),
        Err(e) => return Err(TestCaseError::fail(format!("probe: untyped failure {e}"))),
    }
    pool.free_held();
    prop_assert_eq!(pool.managed_bytes(), 0);
    prop_assert_eq!(alloc.out.load(Ordering::SeqCst), 0, "the allocator got every byte back");
    Ok(())
}

/// Random configs (valid or not) and random operation sequences with extreme values.
#[test]
fn hostile_sequences() {
    let budget = prop::sample::select(vec![3 << 20, 32 << 20, 1 << 30]);
    let case = (config(), budget, prop::collection::vec(op(), 1..60));
    runner(256).run(&case, |(cfg, budget, ops)| run_ops(cfg, budget, ops)).unwrap_or_else(|e| panic!("{e}"));
}

/// The size-class functions take any arguments: a bin and a block size or `None`, never a
/// panic, and the block (when there is one) holds the request.
#[test]
fn size_classes_take_any_arguments() {
    let case = (any::<usize>(), prop_oneof![0u32..=70, any::<u32>()], any::<usize>());
    runner(4000)
        .run(&case, |(size, bits, bin)| {
            let b = bin_number(size, bits);
            let top = alloc_size(b, bits);
            prop_assert!(top >= size.max(1) || size == 0 && top >= 1);
            let _ = alloc_size(bin, bits);
            if let Some(blk) = block_size(size, bits) {
                prop_assert!(blk >= size && blk % GRANULE == 0);
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    for (size, bits) in [(5, 64), (usize::MAX, u32::MAX), (0, 0), (1, 16), (usize::MAX, 0)] {
        let _ = block_size(size, bits);
    }
    assert_eq!(alloc_size(70 << 4, 4), usize::MAX);
}

/// Streams with pending events, hostile sizes and `into_buffer` on the gated CPU backend:
/// a block becomes a buffer, its views keep it, and it returns to the pool after them.
#[test]
fn leases_and_streams_survive_hostile_requests() {
    let g = Gated::new(gpubuf_testkit::cpu());
    let deferred = MemoryPool::new(DeferredAllocator(g.clone()));
    let pool = MemoryPool::new(ImmediateAllocator(g.clone()));
    let s = g.new_stream().expect("stream");
    for bytes in [usize::MAX, 1 << 62, usize::MAX / 2 + 1, usize::MAX - 255] {
        match pool.allocate_on(bytes, &g, &s) {
            Err(Error::OutOfMemory { requested, .. }) => assert_eq!(requested, bytes),
            other => panic!("{bytes}: {other:?}"),
        }
        match deferred.allocate(bytes) {
            Err(Error::OutOfMemory { requested, .. }) => assert_eq!(requested, bytes),
            other => panic!("{bytes}: {other:?}"),
        }
    }
    assert_eq!(deferred.managed_bytes(), 0);
    let mut blk = pool.allocate_on(0, &g, &s).expect("zero bytes are a valid request");
    blk.record_stream(&g, g.default_stream());
    blk.record_stream(&g, &s);
    let buf = blk.into_buffer(&g).expect("a buffer");
    assert_eq!(buf.len(), 0);
    let view = buf.clone();
    drop(buf);
    assert_eq!(pool.active_blocks(), 1);
    drop(view);
    assert_eq!(pool.active_blocks(), 0);
    assert!(g.pending() > 0, "events were recorded on both streams");
    pool.free_held();
    assert_eq!(pool.managed_bytes(), 0);
    g.complete_all().expect("complete");
}
