"""MemoryPool's cache of released blocks: a block released from Python is handed out again
without the pool's lock, and nothing about the pool's behaviour shows the cache."""

import gc
import sys
import threading

import pytest

import gpubuf


def _pooled_buffers():
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is gpubuf.PooledBuffer)


def test_a_released_block_is_handed_out_again(backend):
    pool = gpubuf.MemoryPool(backend)
    pool.allocate(1000).release()
    managed, held = pool.managed_bytes, pool.held_blocks
    for _ in range(10):
        pool.allocate(1000).release()
    s = pool.stats()
    assert (s["hits"], s["misses"]) == (10, 1)
    assert pool.managed_bytes == managed
    assert (pool.active_blocks, pool.held_blocks) == (0, held)


def test_a_request_of_the_same_class_gets_its_own_size(backend):
    pool = gpubuf.MemoryPool(backend)
    b = pool.allocate(1000)
    block = b.block_size
    b.release()
    del b  # the object itself is handed out again
    c = pool.allocate(1001)  # the same size class
    assert (c.size, c.block_size, c.released) == (1001, block, False)
    assert repr(c) == f"gpubuf.PooledBuffer(size=1001, block_size={block})"
    assert len(c.as_ndbuffer(1001, "uint8").shape) == 1
    with pytest.raises(gpubuf.LengthMismatchError):
        pool.allocate(1000).as_ndbuffer(1001, "uint8")


def test_a_released_handle_kept_by_the_user_stays_released(backend):
    pool = gpubuf.MemoryPool(backend)
    b = pool.allocate(1000)
    b.release()
    c = pool.allocate(1000)  # b's block, in another object
    assert c is not b
    assert b.released and b.block_size is None and b.size == 1000
    assert not c.released and c.block_size is not None
    with pytest.raises(gpubuf.InvalidArgumentError):
        b.release()
    with pytest.raises(gpubuf.InvalidArgumentError):
        b.as_ndbuffer(10)
    assert pool.active_blocks == 1
    c.release()
    alone = gpubuf.MemoryPool(backend)
    alone.allocate(1000).release()
    assert pool.active_blocks == 0 and pool.held_blocks == alone.held_blocks
    del b
    d = pool.allocate(999)
    assert not d.released and d.size == 999 and pool.active_blocks == 1


def test_blocks_of_other_classes_are_not_taken(backend):
    pool = gpubuf.MemoryPool(backend)
    for n in (256, 5000, 70000):
        pool.allocate(n).release()
    for n in (3 << 20, 70000 * 2, 5000 * 2, 256 * 2):
        b = pool.allocate(n)
        assert b.block_size >= n and b.size == n
        assert pool.active_blocks == 1
        b.release()
    before = pool.stats()
    for n in (70000, 5000, 256):
        b = pool.allocate(n)
        assert b.block_size >= n and b.size == n
        b.release()
    after = pool.stats()
    assert after["hits"] - before["hits"] == 3 and after["misses"] == before["misses"]
    assert after["managed_bytes"] == before["managed_bytes"]


def test_stop_holding_returns_released_blocks_at_once(backend):
    pool = gpubuf.MemoryPool(backend)
    pool.allocate(1000).release()
    pool.stop_holding()
    assert pool.managed_bytes == 0
    b = pool.allocate(1000)
    refs = sys.getrefcount(b)
    b.release()
    assert sys.getrefcount(b) == refs  # the pool keeps no reference: nothing cached
    assert (pool.held_blocks, pool.managed_bytes) == (0, 0)


def test_the_limit_sees_released_blocks(backend):
    pool = gpubuf.MemoryPool(backend, limit=6 << 20)
    pool.allocate(3 << 20).release()
    # Of another class: fits under the limit only once the released block's memory is
    # given back.
    b = pool.allocate(4 << 20)
    assert b.block_size >= 4 << 20 and pool.managed_bytes <= 6 << 20


def test_a_dropped_pool_leaves_no_object_behind(backend):
    before = _pooled_buffers()
    pool = gpubuf.MemoryPool(backend)
    for n in (100, 1000, 10000):
        pool.allocate(n).release()
    kept = pool.allocate(500)
    del pool
    assert _pooled_buffers() == before + 1
    kept.release()  # its pool object is gone: straight back to the Rust pool
    assert kept.released
    del kept
    assert _pooled_buffers() == before


def test_two_threads_share_a_pool(backend):
    pool = gpubuf.MemoryPool(backend)
    errors = []

    def work(seed):
        try:
            held = []
            for i in range(3000):
                n = 256 * (1 + (i * seed) % 9)
                b = pool.allocate(n)
                assert b.size == n and not b.released and b.block_size >= n
                held.append(b)
                if len(held) > 3:
                    held.pop(i % 3).release()
            for b in held:
                b.release()
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in (3, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert (pool.active_blocks, pool.active_bytes) == (0, 0)
    s = pool.stats()
    assert s["hits"] + s["misses"] == 6000


def test_a_failed_request_loses_no_cached_block(backend):
    pool = gpubuf.MemoryPool(backend)
    pool.allocate(1000).release()
    pool.allocate(1000).release()  # a hit from the cache, the block cached again
    for bad in (2**64 - 1, 2**63, -1, "x"):
        with pytest.raises((gpubuf.OutOfMemoryError, gpubuf.InvalidArgumentError)):
            pool.allocate(bad)
    # The huge requests went to the pool (the cache handed its block back first), whose
    # out-of-memory ladder freed what it held, that block's segment included.
    assert (pool.active_blocks, pool.held_blocks, pool.managed_bytes) == (0, 0, 0)
    b = pool.allocate(1000)
    assert b.size == 1000 and not b.released
    b.release()
    s = pool.stats()
    assert (s["hits"], s["active_blocks"]) == (1, 0)
