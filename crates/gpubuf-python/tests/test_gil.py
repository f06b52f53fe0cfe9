"""Long copies release the GIL: another Python thread runs while they do."""

import threading
import time

import numpy as np

import gpubuf


def _ticks_during(work):
    """Runs ``work`` while a thread records the time every millisecond; returns the ticks
    that fell inside the call (its first and last 10% left out), and the call's duration."""
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    t = threading.Thread(target=tick)
    t.start()
    time.sleep(0.02)
    start = time.perf_counter()
    work()
    end = time.perf_counter()
    stop.set()
    t.join()
    margin = (end - start) * 0.1
    inside = [x for x in ticks if start + margin < x < end - margin]
    return inside, end - start


def test_gil_released_during_long_copies(backend):
    x = np.ones(48 << 20, dtype=np.uint8)
    a = gpubuf.NDBuffer.from_numpy(x, backend)
    measured = 0
    for work in (
        lambda: gpubuf.NDBuffer.from_numpy(x, backend),
        lambda: a.copy().to_backend(gpubuf.Backend("cpu")),
        lambda: [gpubuf.NDBuffer.from_numpy(x, backend) for _ in range(4)],
    ):
        inside, took = _ticks_during(work)
        if took < 0.02:
            continue  # too quick to tell on this machine
        measured += 1
        assert len(inside) >= 2, f"no other thread ran during a {took:.3f} s copy"
    assert measured > 0, "every copy was too quick to tell"


def test_pool_hit_keeps_the_gil_and_a_miss_releases_it(backend):
    releases = gpubuf._gpubuf._pool_gil_releases
    pool = gpubuf.MemoryPool(backend)
    before = releases()
    b = pool.allocate(1 << 16)  # a miss: the pool allocates a segment from the device
    assert releases() == before + 1 and pool.stats()["misses"] == 1
    b.release()
    for _ in range(100):  # hits: the held block again, no device call, the GIL kept
        pool.allocate(1 << 16).release()
    assert releases() == before + 1 and pool.stats()["hits"] >= 100
    # Arrays of the pool allocate with the GIL already released: not counted again.
    a = pool.empty((3 << 20,), "uint8")
    assert releases() == before + 1 and a.size == 3 << 20


def test_other_threads_run_during_a_pool_miss(cpu):
    # A 512 MiB segment that must exist on return (touched page by page) takes a while.
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(cpu))
    inside, took = _ticks_during(lambda: pool.allocate(512 << 20).release())
    if took < 0.02:
        return  # too quick to tell on this machine
    assert len(inside) >= 2, f"no other thread ran during a {took:.3f} s pool miss"
