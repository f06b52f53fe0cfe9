"""MemoryPool: pyopencl's surface, gpubuf's limit and out-of-memory behaviour, no leaks."""

import gc
import sys
import tracemalloc

import numpy as np
import pytest

import gpubuf


def test_allocate_and_release(backend):
    pool = gpubuf.MemoryPool(backend)
    assert (pool.held_blocks, pool.active_blocks, pool.managed_bytes, pool.active_bytes) == (0, 0, 0, 0)
    b = pool.allocate(1000)
    assert isinstance(b, gpubuf.PooledBuffer)
    assert b.size == 1000 and b.block_size >= 1000 and not b.released
    assert b.backend.name == backend.name
    assert pool.active_blocks == 1 and pool.active_bytes == b.block_size
    assert pool.managed_bytes >= pool.active_bytes
    b.release()
    assert b.released and b.block_size is None and b.size == 1000
    assert pool.active_blocks == 0 and pool.held_blocks >= 1 and pool.active_bytes == 0
    with pytest.raises(gpubuf.InvalidArgumentError):
        b.release()
    # The held block is handed out again: no new memory.
    managed = pool.managed_bytes
    c = pool(1000)
    assert pool.managed_bytes == managed and pool.stats()["hits"] >= 1
    del c
    gc.collect()
    assert pool.active_blocks == 0


def test_context_manager_returns_the_block(backend):
    pool = gpubuf.MemoryPool(backend)
    with pool.allocate(4096) as b:
        assert pool.active_blocks == 1 and b.size == 4096
    assert b.released and pool.active_blocks == 0
    with pytest.raises(KeyError):
        with pool.allocate(10):
            raise KeyError("propagates")
    assert pool.active_blocks == 0
    # Released inside the block: leaving it is fine.
    with pool.allocate(10) as b:
        b.release()
    assert pool.active_blocks == 0


def test_free_held_and_stop_holding(backend):
    pool = gpubuf.MemoryPool(backend)
    blocks = [pool.allocate(n) for n in (100, 5000, 70000, 3 << 20)]
    for b in blocks:
        b.release()
    assert pool.held_blocks >= 1 and pool.managed_bytes > 0
    pool.free_held()
    assert pool.held_blocks == 0 and pool.managed_bytes == 0
    pool.stop_holding()
    b = pool.allocate(100)
    assert pool.managed_bytes > 0
    b.release()
    assert pool.held_blocks == 0 and pool.managed_bytes == 0


def test_bins_follow_pyopencl(cpu):
    pool = gpubuf.MemoryPool(cpu)
    for size in [1, 2, 3, 100, 1000, 1 << 20, (1 << 20) + 1, 10**9]:
        b = pool.bin_number(size)
        assert pool.alloc_size(b) >= size
        if b > 0:
            assert pool.alloc_size(b - 1) < size
    # pyopencl's values with 4 leading bits.
    assert pool.bin_number(1000) == (9 << 4) | 15
    assert pool.alloc_size((9 << 4) | 15) == 1023
    assert gpubuf.MemoryPool(cpu, leading_bits_in_bin_id=2).bin_number(1000) == (9 << 2) | 3
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.MemoryPool(cpu, leading_bits_in_bin_id=17)
    for bad in (-1, 2**40, "4"):
        with pytest.raises(gpubuf.InvalidArgumentError):
            gpubuf.MemoryPool(cpu, leading_bits_in_bin_id=bad)
    with pytest.raises(gpubuf.InvalidArgumentError):
        pool.bin_number(-1)


def test_limit_and_out_of_memory(backend):
    pool = gpubuf.MemoryPool(backend, limit=4 << 20)
    assert pool.limit == 4 << 20
    a = pool.allocate(3 << 20)
    with pytest.raises(gpubuf.OutOfMemoryError) as e:
        pool.allocate(3 << 20)
    err = e.value
    assert isinstance(err, MemoryError) and isinstance(err, gpubuf.GpubufError)
    assert err.requested == 3 << 20
    assert err.pool["limit"] == 4 << 20 and err.pool["active_blocks"] == 1
    # The pool still works after the error, and frees room on release.
    assert pool.active_blocks == 1
    a.release()
    b = pool.allocate(3 << 20)
    assert b.size == 3 << 20
    pool.set_limit(None)
    assert pool.limit is None
    c = pool.allocate(3 << 20)
    assert pool.active_blocks == 2
    del b, c
    with pytest.raises(gpubuf.InvalidArgumentError):
        pool.set_limit(1.5)
    assert pool.limit is None
    with pytest.raises(gpubuf.InvalidArgumentError):
        pool.set_limit(True)


def test_impossible_and_negative_sizes(backend):
    pool = gpubuf.MemoryPool(backend)
    with pytest.raises(gpubuf.OutOfMemoryError):
        pool.allocate(2**64 - 1)
    with pytest.raises(gpubuf.InvalidArgumentError):
        pool.allocate(-5)
    with pytest.raises(gpubuf.InvalidArgumentError):
        pool.allocate(2**70)
    with pytest.raises(gpubuf.InvalidArgumentError):
        pool.allocate("10")
    with pytest.raises(gpubuf.InvalidArgumentError):
        pool.allocate(2**200)  # past any 128-bit integer too

    class Index:
        def __init__(self, n):
            self.n = n

        def __index__(self):
            if self.n is None:
                raise RuntimeError("the caller's own error")
            return self.n

    with pytest.raises(RuntimeError, match="the caller's own error"):
        pool.allocate(Index(None))  # an error of the size's own __index__ is kept
    assert pool.allocate(Index(24)).size == 24
    assert pool.active_blocks == 0
    pool.allocate(16).release()


def test_allocators(backend):
    for alloc in (gpubuf.ImmediateAllocator(backend), gpubuf.DeferredAllocator(backend), backend):
        pool = gpubuf.MemoryPool(alloc)
        with pool.allocate(256) as b:
            assert b.size == 256
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.MemoryPool("cpu")


def test_pool_arrays(backend):
    pool = gpubuf.MemoryPool(backend)
    a = pool.zeros((3, 4), "float32")
    assert a.shape == (3, 4) and a.dtype == np.float32 and a.backend.name == backend.name
    np.testing.assert_array_equal(a.to_numpy(), np.zeros((3, 4), np.float32))
    e = pool.empty(10)
    assert e.dtype == np.float64 and pool.active_blocks == 2
    del a, e
    gc.collect()
    assert pool.active_blocks == 0


def test_pooled_buffer_as_ndbuffer(backend):
    pool = gpubuf.MemoryPool(backend)
    b = pool.allocate(64)
    with pytest.raises(gpubuf.LengthMismatchError):
        b.as_ndbuffer(9, "float64")
    assert not b.released
    a = b.as_ndbuffer((2, 4), "float64")
    assert b.released and pool.active_blocks == 1
    with pytest.raises(gpubuf.InvalidArgumentError):
        b.release()
    assert a.shape == (2, 4)
    del a
    gc.collect()
    assert pool.active_blocks == 0


@pytest.mark.parametrize("how", ["release", "with", "drop"])
def test_no_leak_after_10k_cycles(backend, how):
    pool = gpubuf.MemoryPool(backend)
    refs = sys.getrefcount(pool)

    def cycle(n):
        for i in range(n):
            size = 256 + (i % 7) * 1000
            if how == "release":
                pool.allocate(size).release()
            elif how == "with":
                with pool.allocate(size):
                    pass
            else:
                b = pool.allocate(size)
                del b

    cycle(1000)
    managed = pool.managed_bytes
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    cycle(10_000)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert grown < 64 * 1024, f"Python memory grew by {grown} bytes over 10k cycles"
    assert pool.active_blocks == 0 and pool.active_bytes == 0
    assert pool.managed_bytes == managed
    assert sys.getrefcount(pool) == refs
