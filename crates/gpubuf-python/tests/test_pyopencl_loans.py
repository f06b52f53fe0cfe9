"""A pool made from pyopencl objects lends each block as a pyopencl buffer over the block's
own cl_mem and takes it back once only the pool refers to the object: the same object is
lent again, a released one never is, and nothing outlives its use."""

import gc

import numpy as np
import pytest

import gpubuf

cl = pytest.importorskip("pyopencl")
cl_array = pytest.importorskip("pyopencl.array")
gpyopencl = pytest.importorskip("gpubuf.pyopencl")

from test_pyopencl import queue  # noqa: E402,F401 (the fixture: a queue pyopencl and gpubuf share)


def _refcount(handle):
    """The OpenCL reference count of a cl_mem, read through a pyopencl object of its own
    (which counts one)."""
    probe = cl.Buffer.from_int_ptr(handle, retain=True)
    return probe.get_info(cl.mem_info.REFERENCE_COUNT) - 1


def test_an_object_no_one_else_holds_is_lent_again(queue):
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    a = cl_array.empty(queue, 1000, np.float32, allocator=pool)
    handle = a.base_data.int_ptr
    assert _refcount(handle) == 2  # the pool's and the lent object's
    del a
    hits = pool.stats()["hits"]
    for _ in range(20):
        b = cl_array.empty(queue, 1000, np.float32, allocator=pool)
        b.fill(3.0)
        assert b.base_data.int_ptr == handle
        assert (b.get() == 3.0).all()
        del b
    b = pool.allocate(3999)  # the same size class as 4000 bytes: the same object again
    assert b.int_ptr == handle and gpyopencl.to_gpubuf(b).shape == (3999,)
    del b
    s = pool.stats()
    assert s["hits"] == hits + 21 and s["misses"] == 1
    assert (pool.active_blocks, pool.held_blocks) == (0, 1)
    assert _refcount(handle) == 1  # the lent object is gone with the counters read


def test_a_held_object_is_never_lent_twice(queue):
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    held = [pool.allocate(4096) for _ in range(20)]
    handles = {b.int_ptr for b in held}
    assert len(handles) == 20
    more = [pool.allocate(4096) for _ in range(5)]
    assert not handles & {b.int_ptr for b in more}
    assert pool.active_blocks == 25


def test_a_released_object_stays_released(queue):
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    b = pool.allocate(1000)
    handle = b.int_ptr
    b.release()
    assert pool.active_blocks == 0
    c = pool.allocate(1000)
    assert c is not b and c.int_ptr == handle
    with pytest.raises(cl.LogicError):
        b.release()
    del b
    gc.collect()
    assert pool.active_blocks == 1
    d = pool.allocate(1000)  # not the released object, though only the pool holds it
    assert d.int_ptr != c.int_ptr and pool.active_blocks == 2


def test_a_block_shared_with_gpubuf_is_not_lent_again(queue):
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    a = cl_array.arange(queue, 256, dtype=np.float32, allocator=pool)
    handle = a.base_data.int_ptr
    g = gpyopencl.to_gpubuf(a)
    del a
    b = cl_array.empty(queue, 256, np.float32, allocator=pool)
    assert b.base_data.int_ptr != handle, "the gpubuf view still uses the block"
    assert (g.to_numpy().view(np.float32) == np.arange(256, dtype=np.float32)).all()
    del b, g
    gc.collect()
    assert pool.active_blocks == 0


def test_sub_regions_are_refused(queue):
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    b = pool.allocate(4096)
    with pytest.raises(gpubuf.InvalidArgumentError):
        b.get_sub_region(0, 1024)
    with pytest.raises(gpubuf.InvalidArgumentError):
        b[0:1024]  # noqa: B018


def test_objects_outliving_their_pool_give_their_block_back(queue):
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    kept = pool.allocate(1000)
    pool.allocate(2000)  # dropped at once: only the pool refers to it
    handle = kept.int_ptr
    probe = cl.Buffer.from_int_ptr(handle, retain=True)
    del pool
    gc.collect()
    assert isinstance(kept, gpyopencl.PooledBuffer)
    assert probe.get_info(cl.mem_info.REFERENCE_COUNT) == 3  # the pool's, kept's, probe's
    del kept
    gc.collect()
    assert probe.get_info(cl.mem_info.REFERENCE_COUNT) == 1, "the block went back and the pool ended"


def test_after_stop_holding_a_buffer_gives_its_block_back_at_its_end(queue):
    """As pyopencl's pool: once it stopped holding, a block is freed when its buffer
    object ends, with no later call into the pool needed."""
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    before = cl_array.empty(queue, 1000, np.float32, allocator=pool)  # lent while holding
    pool.allocate(1000)  # dropped at once: its block is held
    pool.stop_holding()
    assert (pool.active_blocks, pool.held_blocks) == (1, 0)
    after = cl_array.empty(queue, 1000, np.float32, allocator=pool)
    after.fill(2.0)
    assert (after.get() == 2.0).all()
    probes = [cl.Buffer.from_int_ptr(a.base_data.int_ptr, retain=True) for a in (before, after)]
    for p in probes:
        assert p.get_info(cl.mem_info.REFERENCE_COUNT) == 3  # the pool's, the array's, the probe's
    del before, after
    for p in probes:
        assert p.get_info(cl.mem_info.REFERENCE_COUNT) == 1, "the block went back at the buffer's end"
    assert pool.active_blocks == pool.held_blocks == 0
    again = pool.allocate(1000)  # a new object, never one lent before
    again.release()
    with pytest.raises(cl.LogicError):
        again.release()
    del again
    gc.collect()
    assert (pool.active_blocks, pool.managed_bytes) == (0, 0)


def test_a_request_past_the_limit_takes_back_dropped_objects_first(queue):
    """Blocks of objects dropped since the pool last looked go back before a request fails
    for want of memory: the request then succeeds, and the pool stays within its limit."""
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue), limit=1 << 20)
    dropped = [pool.allocate(300_000) for _ in range(3)]
    del dropped
    b = pool.allocate(600_000)
    assert b.size >= 600_000
    assert pool.managed_bytes <= 1 << 20
    with pytest.raises(gpubuf.OutOfMemoryError):
        pool.allocate(600_000)  # b is live: no room, whatever is reclaimed
    assert pool.active_blocks == 1


def test_an_object_released_through_pyopencls_base_class(queue):
    """pyopencl's own MemoryObject.release called on a lent object drops the object's
    reference only: the block, which the pool keeps alive, still works wherever the object
    is lent again, and gpubuf's release() gives it back once."""
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    b = pool.allocate(1000)
    cl.MemoryObject.release(b)
    lent = id(b)
    del b
    c = pool.allocate(1000)
    assert id(c) == lent, "the same object again: only the pool referred to it"
    data = np.arange(250, dtype=np.float32)
    cl.enqueue_copy(queue, c, data)
    out = np.empty_like(data)
    cl.enqueue_copy(queue, out, c)
    queue.finish()
    assert (out == data).all()
    c.release()
    assert pool.active_blocks == 0
    with pytest.raises(cl.LogicError):
        c.release()
    assert pool.active_blocks == 0 and pool.allocate(1000).size >= 1000


def test_many_live_objects_and_mixed_sizes(queue):
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    rng = np.random.default_rng(3)
    live = {}
    for step in range(3000):
        k = int(rng.integers(0, 200))
        if k in live and rng.random() < 0.5:
            del live[k]
        else:
            n = int(rng.integers(1, 5000))
            b = pool.allocate(n)
            assert b.size >= n
            live[k] = b
        handles = [b.int_ptr for b in live.values()]
        if step % 500 == 0:
            assert len(set(handles)) == len(handles), "one block lent twice"
            assert pool.active_blocks == len(live)
    live.clear()
    del b
    assert pool.active_blocks == 0


def test_a_released_object_never_comes_back_for_its_old_block(queue):
    # b's loan is left behind while its block goes to c; later loans leave around it, so
    # the pool looks at b's loan again while c holds the block.
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    b = pool.allocate(1000)
    others = [pool.allocate(5000 * (i + 1)) for i in range(8)]
    b.release()
    c = pool.allocate(1000)  # b's block
    del b
    for o in others:
        o.release()
    del o, others
    pool.allocate(1).release()  # looks at the newest loans
    d = pool.allocate(1000)
    assert d.int_ptr != c.int_ptr and pool.active_blocks == 2
    cl.enqueue_copy(queue, d, np.ones(250, np.float32)).wait()


def test_the_private_release_takes_only_pooled_buffers(queue):
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    plain = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, 1024)
    for other in (plain, 5, None, gpubuf.MemoryPool(gpubuf.Backend.from_pyopencl(queue)).allocate(16)):
        with pytest.raises(gpubuf.InvalidArgumentError):
            gpubuf._gpubuf._pyopencl_release(other)
    cl.enqueue_copy(queue, plain, np.ones(256, np.float32)).wait()  # untouched
    b = pool.allocate(1000)
    gpubuf._gpubuf._pyopencl_release(b)  # as b.release(): the object lets go of the block
    assert pool.active_blocks == 0
    with pytest.raises(cl.LogicError):
        b.release()


def test_a_pool_ending_while_an_error_is_raised_keeps_the_error(queue):
    kept = []

    def pool_with_a_loan():
        pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
        kept.append(pool.allocate(1000))
        return pool

    a = gpubuf.NDBuffer.from_numpy(np.zeros((4, 5)), gpubuf.Backend.from_pyopencl(queue))
    # The pool, a temporary argument, ends as the call's error is raised.
    with pytest.raises(gpubuf.GpubufError):
        a.set_region((slice(None),), np.ones((3, 3)), pool_with_a_loan())
    assert type(kept[0]).__name__ == "_OrphanPooledBuffer"


def test_an_object_lent_again_carries_no_attributes_of_its_last_borrower(queue):
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    b = pool(100)
    handle = b.int_ptr
    b.owner_tag = "request A"
    del b
    c = pool(100)
    assert c.int_ptr == handle  # the same object, lent again
    assert not hasattr(c, "owner_tag") and c.__dict__ == {}
    c.other = 1  # attributes still work, as on pyopencl's pooled buffers
    assert c.other == 1


def test_a_cycle_through_a_lent_object_and_its_pool_is_collected(queue):
    def cycle():
        pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
        x = pool(1 << 20)
        x.pool = pool  # buffer -> pool -> (its loans) buffer
        return x.int_ptr

    handle = cycle()
    watcher = cl.Buffer.from_int_ptr(handle, retain=True)
    gc.collect()
    assert watcher.get_info(cl.mem_info.REFERENCE_COUNT) == 1  # the block was freed


def test_the_class_of_a_lent_object_is_fixed(queue):
    # After stop_holding the class's __del__ gives the block back: assigning another
    # class would lose it, and is refused, as pyopencl refuses it on its PooledBuffer.
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    held = pool(4096)
    pool.stop_holding()
    fresh = pool(4096)
    for b in (held, fresh):
        for cls in (cl.Buffer, gpyopencl.PooledBuffer):
            with pytest.raises(TypeError):
                b.__class__ = cls
        b.tag = 1  # other attributes are set as before
        assert b.tag == 1
    probes = [cl.Buffer.from_int_ptr(b.int_ptr, retain=True) for b in (held, fresh)]
    del held, fresh, b
    for p in probes:
        assert p.get_info(cl.mem_info.REFERENCE_COUNT) == 1, "the block went back at the buffer's end"
    assert pool.active_blocks == 0
