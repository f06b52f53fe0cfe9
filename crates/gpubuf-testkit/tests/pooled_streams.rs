//! Bufferizers and halo transformers on a stream of their own: pooled buffers go back to
//! their pool stream-ordered (a block the component used on a stream is not handed to the
//! host or another stream while that stream's work on it may still be queued), and the
//! bufferizer's views, used on the default stream, are ordered with its appends.
//! Deterministic through `gpubuf_testkit::gated::Gated` (events pending until the test
//! completes them) on every backend, plus the data races themselves on OpenCL, whose copies
//! and launches are asynchronous.

use gpubuf::bufferizer::Bufferizer;
use gpubuf::halo::{Boundary, Dim, HaloDataTransformer, HaloExchangeSpec, QuantityHaloSpec};
use gpubuf::mirror::{DirtyPolicy, Mirror};
use gpubuf::pool::{ImmediateAllocator, MemoryPool};
use gpubuf::{
    Allocator, Backend, Buffer, DType, DeviceMemory, Kernels, NDBuffer, Order, PooledBuffer, Result,
};
use gpubuf_testkit::backend_tests;
use gpubuf_testkit::gated::Gated;
use ndarray::Array1;

/// Where a buffer lies: (allocation, first byte, end).
type Place = (usize, usize, usize);

fn of_buffer<B: Kernels>(b: &Buffer<B>) -> Place {
    (b.memory().id(), b.offset(), b.offset() + b.len())
}

fn of_block<A: Allocator>(b: &PooledBuffer<A>) -> Place {
    (b.memory().id(), b.offset(), b.offset() + b.block_size())
}

fn overlaps(a: Place, b: Place) -> bool {
    a.0 == b.0 && a.1 < b.2 && b.1 < a.2
}

/// Asserts that none of `host` shares a byte with any of `used`.
fn disjoint(host: &[Place], used: &[Place], what: &str) {
    for h in host {
        for u in used {
            assert!(!overlaps(*h, *u), "{what}: the host got block {h:?}, still in use at {u:?}");
        }
    }
}

/// The bufferizer's slots (the first buffer, the one `allocate()` replaces, a batch handed
/// out by `take_batch`) go back to the pool only once the work queued on the bufferizer's
/// stream is done.
fn bufferizer_blocks_wait_for_their_stream<B: Kernels>(b: &B) -> Result<()> {
    let g = Gated::new(b.clone());
    let pool = MemoryPool::new(ImmediateAllocator(g.clone()));
    let s = g.new_stream()?;
    let n = 4096;
    let src = NDBuffer::<_, f32>::create(&g, &[n], Order::C, Some(1.0))?;
    let mut z = Bufferizer::<_, f32>::builder(&g, &[n], 1).stream(&s).pool(&pool).build()?;
    let mut used = vec![of_buffer(z.view()?.buffer())];
    z.append_one(&src)?;
    z.allocate()?; // the first slot goes back with its copy queued on `s`
    used.push(of_buffer(z.view()?.buffer()));
    z.append_one(&src)?;
    let batch = z.take_batch()?;
    used.push(of_buffer(z.view()?.buffer()));
    z.append_one(&src)?;
    drop(batch);
    drop(z);
    // The default stream (where work on a batch runs) is done; the bufferizer's is not.
    g.complete(g.default_stream())?;
    let host: Vec<PooledBuffer<_>> = (0..4).map(|_| pool.allocate(n * 4)).collect::<Result<_>>()?;
    disjoint(&host.iter().map(of_block).collect::<Vec<_>>(), &used, "bufferizer");
    assert!(g.pending() > 0, "the frees recorded events on the bufferizer's stream");
    g.complete_all()?;
    drop(host);
    assert_eq!(pool.active_blocks(), 0, "every block went back");
    Ok(())
}

/// A batch is read through `NDBuffer` operations, which run on the default stream: its
/// block also waits for that stream's work, not only the bufferizer's.
fn bufferizer_batch_waits_for_the_default_stream<B: Kernels>(b: &B) -> Result<()> {
    let g = Gated::new(b.clone());
    let pool = MemoryPool::new(ImmediateAllocator(g.clone()));
    let s = g.new_stream()?;
    let mut z = Bufferizer::<_, f32>::builder(&g, &[1024], 2).stream(&s).pool(&pool).build()?;
    z.append_one(ndarray::Array1::from_elem(1024, 2.0f32).view())?;
    let batch = z.take_batch()?;
    let used = [of_buffer(batch.buffer()), of_buffer(z.view()?.buffer())];
    let copy = NDBuffer::<_, f32>::zeros(&g, &[1, 1024])?;
    copy.copy_from(&batch)?; // queued on the default stream
    drop((batch, z));
    g.complete(&s)?;
    let host: Vec<PooledBuffer<_>> = (0..4).map(|_| pool.allocate(8192)).collect::<Result<_>>()?;
    disjoint(&host.iter().map(of_block).collect::<Vec<_>>(), &used, "batch");
    g.complete_all()?;
    assert_eq!(copy.to_vec()?, vec![2.0f32; 1024]);
    Ok(())
}

/// A batch (read on the default stream) comes after the appends queued on the bufferizer's
/// stream, and appends into a reused buffer come after the previous batch's consumer's
/// work on the default stream.
fn bufferizer_views_are_ordered_with_the_default_stream<B: Kernels>(b: &B) -> Result<()> {
    let g = Gated::new(b.clone());
    let s = g.new_stream()?;
    let d = g.default_stream().clone();
    let mut z = Bufferizer::<_, f32>::builder(&g, &[64], 2).stream(&s).build()?;
    z.append_one(Array1::from_elem(64, 3.0f32).view())?;
    let batch = z.take_batch()?;
    let read = g.record_event(&d)?;
    g.complete(&d)?;
    assert!(!g.event_complete(&read)?, "the batch's reads wait for the appends");
    g.complete(&s)?;
    assert!(g.event_complete(&read)?);
    assert_eq!(batch.to_vec()?, vec![3.0f32; 64]);
    drop(batch); // its consumer's work, queued on the default stream, may still run
    z.append_one(Array1::from_elem(64, 4.0f32).view())?;
    let second = z.take_batch()?; // appends now go to the first batch's buffer again
    let write = g.record_event(&s)?;
    g.complete(&s)?;
    assert!(!g.event_complete(&write)?, "appends into the reused buffer wait for its consumer");
    g.complete(&d)?;
    assert!(g.event_complete(&write)?);
    assert_eq!(second.to_vec()?, vec![4.0f32; 64]);
    Ok(())
}

/// A device array appended on the bufferizer's stream is read after the work queued on the
/// default stream, where `NDBuffer` operations (its fill here) run.
fn device_appends_wait_for_the_default_stream<B: Kernels>(b: &B) -> Result<()> {
    let g = Gated::new(b.clone());
    let s = g.new_stream()?;
    let src = NDBuffer::<_, f32>::create(&g, &[64], Order::C, Some(5.0))?; // fill queued on the default stream
    let mut z = Bufferizer::<_, f32>::builder(&g, &[64], 4).stream(&s).build()?;
    z.append_one(&src)?;
    let copied = g.record_event(&s)?;
    g.complete(&s)?;
    assert!(!g.event_complete(&copied)?, "the append waits for the fill");
    g.complete(g.default_stream())?;
    g.complete(&s)?;
    assert!(g.event_complete(&copied)?);
    // A host input needs no ordering: no event is recorded for it.
    let before = g.pending();
    z.append_one(Array1::from_elem(64, 1.0f32).view())?;
    assert_eq!(g.pending(), before, "host appends record nothing");
    z.append_list(&[(&src).into(), (&src).into()])?; // one wait for the whole list
    g.complete_all()?;
    let batch = z.take_batch()?;
    g.complete_all()?;
    let mut want = vec![5.0f32; 64];
    want.extend(vec![1.0f32; 64]);
    want.extend(vec![5.0f32; 128]);
    assert_eq!(batch.to_vec()?, want[..]);
    Ok(())
}

/// A mirror on a stream of its own: downloads (and uploads, which overwrite what the
/// device work reads) wait for the work queued on the default stream, where the device
/// array's `NDBuffer` operations run; work queued on the default stream after an upload
/// waits for it. Both directions, with one range and with more than the plan threshold.
fn mirror_transfers_are_ordered_with_the_default_stream<B: Kernels>(b: &B) -> Result<()> {
    for ranges in [1usize, 20] {
        let g = Gated::new(b.clone());
        let s = g.new_stream()?;
        let d = g.default_stream().clone();
        let host = Array1::<f32>::zeros(64).into_dyn();
        let mut m = Mirror::new(&g, host.view(), DirtyPolicy::exact(), Some(&s))?;
        g.complete_all()?;
        m.device().fill(7.0)?; // device work on the default stream
        for k in 0..ranges {
            m.mark_device_dirty(&m.view(&[3 * k..3 * k + 1])?)?;
        }
        m.download()?;
        let read = g.record_event(&s)?;
        g.complete(&s)?;
        assert!(!g.event_complete(&read)?, "{ranges} range(s): the download waits for the device work");
        g.complete(&d)?;
        g.complete(&s)?;
        assert!(g.event_complete(&read)?);
        assert_eq!(m.host()[[0]], 7.0, "the device's value came back");
        for k in 0..ranges {
            m.set(&[3 * k + 1], 2.0)?;
        }
        m.sync()?;
        let after = g.record_event(&d)?;
        g.complete(&d)?;
        // One write per range returns with the writes possibly still queued; the staged
        // upload past 16 ranges has finished on return (its staging buffer is freed).
        assert_eq!(
            g.event_complete(&after)?,
            ranges > 16,
            "{ranges} range(s): the default stream waits for a queued upload"
        );
        g.complete_all()?;
        assert_eq!(m.device().to_vec()?[1], 2.0);
    }
    Ok(())
}

fn halo_specs(extent: usize, n_halo: usize) -> Result<(QuantityHaloSpec, Vec<HaloExchangeSpec>)> {
    let spec = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[extent, extent], n_halo, 0, DType::F32)?;
    let specs = Boundary::ALL
        .iter()
        .map(|&bd| HaloExchangeSpec::for_boundary(spec.clone(), bd, 1))
        .collect::<Result<Vec<_>>>()?;
    Ok((spec, specs))
}

/// A pooled transformer dropped (without `finalize`) while packs are queued on its own
/// stream: its blocks are not handed to the host before that work is done, even once the
/// stream they were allocated on is.
fn halo_blocks_wait_for_the_stream<B: Kernels>(b: &B) -> Result<()> {
    let g = Gated::new(b.clone());
    let pool = MemoryPool::new(ImmediateAllocator(g.clone()));
    let (spec, specs) = halo_specs(16, 3)?;
    let q = NDBuffer::<_, f32>::create(&g, &spec.shape, Order::C, Some(1.0))?;
    let qs = vec![&q; specs.len()];
    let mut t = HaloDataTransformer::<_, f32>::with_pool(&g, &pool, specs, None)?;
    let used = [of_buffer(t.pack_buffer()?), of_buffer(t.unpack_buffer()?)];
    let bytes = t.buffer_len() * 4;
    let (s1, s2) = (g.new_stream()?, g.new_stream()?);
    t.set_stream(&s1)?;
    t.async_pack(&qs, None)?;
    t.set_stream(&s2)?;
    t.async_unpack(&qs, None)?;
    drop(t);
    // The stream the blocks were allocated on is done, and so is the last one the
    // transformer used; the first one is not.
    g.complete(g.default_stream())?;
    g.complete(&s2)?;
    let host: Vec<PooledBuffer<_>> = (0..4).map(|_| pool.allocate(bytes)).collect::<Result<_>>()?;
    disjoint(&host.iter().map(of_block).collect::<Vec<_>>(), &used, "halo");
    g.complete_all()?;
    drop(host);
    assert_eq!(pool.active_blocks(), 0, "both blocks went back");
    Ok(())
}

backend_tests!(
    bufferizer_blocks_wait_for_their_stream,
    bufferizer_batch_waits_for_the_default_stream,
    bufferizer_views_are_ordered_with_the_default_stream,
    device_appends_wait_for_the_default_stream,
    mirror_transfers_are_ordered_with_the_default_stream,
    halo_blocks_wait_for_the_stream
);

/// The last `tail` bytes of `block` read back after the work on `s` is done: they must be
/// the zeros written after the component released the block.
#[cfg(feature = "opencl")]
fn zeros_survive<B: Kernels, A: Allocator<Memory = B::Memory>>(
    b: &B,
    s: &B::Stream,
    block: &PooledBuffer<A>,
) -> Result<bool> {
    b.write(b.default_stream(), block.memory(), block.offset(), &vec![0u8; block.len()])?;
    b.synchronize(s)?;
    b.synchronize(b.default_stream())?;
    let tail = 4096.min(block.len());
    let mut back = vec![1u8; tail];
    b.read(b.default_stream(), block.memory(), block.offset() + block.len() - tail, &mut back)?;
    Ok(back.iter().all(|&x| x == 0))
}

/// The data race itself on OpenCL: copies queued on the bufferizer's stream used to land
/// in a block the host had already been given again.
#[cfg(feature = "opencl")]
#[test]
fn opencl_bufferizer_queued_copies_do_not_overwrite_the_next_owner() -> Result<()> {
    let Some(b) = gpubuf_testkit::opencl() else { return Ok(()) };
    let n = 4 << 20;
    let src = NDBuffer::<_, f32>::create(&b, &[n], Order::C, Some(1.0))?;
    let pool = MemoryPool::new(ImmediateAllocator(b.clone()));
    let s = b.new_stream()?;
    for round in 0..3 {
        let mut z = Bufferizer::<_, f32>::builder(&b, &[n], 1).stream(&s).pool(&pool).build()?;
        for _ in 0..4 {
            z.clear();
            z.append_one(&src)?;
        }
        drop(z);
        let blk = pool.allocate(n * 4)?;
        assert!(zeros_survive(&b, &s, &blk)?, "round {round}: queued copies overwrote the new owner's data");
    }
    Ok(())
}

/// The same for a pooled halo transformer dropped with packs queued on its own stream.
#[cfg(feature = "opencl")]
#[test]
fn opencl_halo_queued_packs_do_not_overwrite_the_next_owner() -> Result<()> {
    let Some(b) = gpubuf_testkit::opencl() else { return Ok(()) };
    let (spec, specs) = halo_specs(1024, 256)?;
    let q = NDBuffer::<_, f32>::create(&b, &spec.shape, Order::C, Some(1.0))?;
    let qs = vec![&q; specs.len()];
    let pool = MemoryPool::new(ImmediateAllocator(b.clone()));
    let s = b.new_stream()?;
    for round in 0..3 {
        let mut t = HaloDataTransformer::<_, f32>::with_pool(&b, &pool, specs.clone(), None)?;
        let bytes = t.buffer_len() * 4;
        t.set_stream(&s)?;
        for _ in 0..8 {
            t.async_pack(&qs, None)?;
        }
        drop(t);
        let blocks = [pool.allocate(bytes)?, pool.allocate(bytes)?];
        for blk in &blocks {
            assert!(
                zeros_survive(&b, &s, blk)?,
                "round {round}: queued packs overwrote the new owner's data"
            );
        }
    }
    Ok(())
}

/// A batch taken from a bufferizer on its own stream and read at once used to be read
/// before the appends had landed (every round on PoCL).
#[cfg(feature = "opencl")]
#[test]
fn opencl_batch_reads_see_the_appends() -> Result<()> {
    let Some(b) = gpubuf_testkit::opencl() else { return Ok(()) };
    let n = 4 << 20;
    let src = NDBuffer::<_, f32>::create(&b, &[n], Order::C, Some(1.0))?;
    let s = b.new_stream()?;
    for round in 0..3 {
        let mut z = Bufferizer::<_, f32>::builder(&b, &[n], 2).stream(&s).build()?;
        z.append_one(&src)?;
        z.append_one(&src)?;
        let batch = z.take_batch()?;
        assert!(
            batch.to_vec()?.iter().all(|&x| x == 1.0),
            "round {round}: the batch was read before its appends"
        );
        b.synchronize(&s)?;
    }
    Ok(())
}
