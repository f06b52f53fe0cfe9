"""``python -m gpubuf.bench pool``: the pool's hit from Python against the same hit in Rust
and against pyopencl's ``MemoryPool``, and pyopencl array workloads on gpubuf's pool
against pyopencl's own.

Everything compared takes turns within each repetition (ours, Rust, pyopencl, ...; the
order reversed every other repetition, so that none always runs first), so that all see
the same period of the machine, and each figure is the median over the repetitions. Entries, per block size (bytes):

- ``hit_ns/<size>``: ``pool.allocate(size).release()`` from Python; baseline the same hit
  in Rust (no Python in the loop).
- ``vs_pyopencl/<size>``: the same Python hit; baseline pyopencl's pool on the same device.
- ``pyopencl_buffers_vs_pyopencl/<size>``: the hit of a gpubuf pool made from pyopencl's
  queue, whose blocks are ``pyopencl.Buffer`` objects; baseline pyopencl's pool.
- ``array_us/<n>``: ``pyopencl.array.empty(queue, n, float32, allocator=pool)``, a kernel
  over it (``fill``), and its release, with gpubuf's pool made from the queue; baseline
  the same with pyopencl's pool. Turns of 50 loops, six times ``reps`` of them each.
"""

import os
import statistics
import time

from . import Backend, ImmediateAllocator, MemoryPool
from ._gpubuf import _pool_hit_ns
from .bench import _entry

POOL_SIZES = [256, 65536, 4 << 20, 64 << 20]
ARRAY_SIZES = [4096, 1 << 20]


def pyopencl_queue():
    """A pyopencl queue on the device gpubuf's OpenCL backend uses, or None (no pyopencl,
    or pyopencl finds no such device)."""
    try:
        import pyopencl as cl
    except ImportError:
        return None
    want = os.environ.get("GPUBUF_OPENCL_DEVICE", "")
    name = Backend("opencl").info.get("name", "")
    try:
        devices = [d for p in cl.get_platforms() for d in p.get_devices()]
    except cl.Error:  # pyopencl's own loader found no platform
        return None
    for dev in devices:
        if dev.name == name or (want and want.lower() in dev.name.lower()):
            return cl.CommandQueue(cl.Context([dev]))
    return None


def _hits(pool, size, iters):
    t0 = time.perf_counter()
    for _ in range(iters):
        pool.allocate(size).release()
    return (time.perf_counter() - t0) * 1e9 / iters


def _arrays(queue, pool, n, iters):
    import numpy as np
    import pyopencl.array as cl_array

    t0 = time.perf_counter()
    for _ in range(iters):
        a = cl_array.empty(queue, n, np.float32, allocator=pool)
        a.fill(1.0)
        del a
    queue.finish()
    return (time.perf_counter() - t0) * 1e6 / iters


def bench_pool(backend, reps=15, quick=False):
    """The pool figures on ``backend`` (module docs); the pyopencl entries on OpenCL when
    pyopencl is installed and finds gpubuf's device."""
    iters = 200 if quick else 5000
    pool = MemoryPool(backend)
    queue = pyopencl_queue() if backend.name == "opencl" else None
    if queue is not None:
        import pyopencl.tools as cl_tools

        theirs = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(queue))
        ours_cl = MemoryPool(ImmediateAllocator(queue))
    out = []
    for size in POOL_SIZES:
        runs = {"py": lambda: _hits(pool, size, iters), "rust": lambda: _pool_hit_ns(pool, size, iters)}
        if queue is not None:
            runs["pyopencl"] = lambda: _hits(theirs, size, iters)
            runs["cl"] = lambda: _hits(ours_cl, size, iters)
        times = {k: [] for k in runs}
        order = list(runs)
        for rep in range(reps + 1):
            for k in order if rep % 2 else order[::-1]:  # each goes first half the time
                t = runs[k]()
                if rep:  # the first round warms every pool
                    times[k].append(t)
        py = statistics.median(times["py"])
        out.append(_entry(f"hit_ns/{size}", py, "ns", statistics.median(times["rust"])))
        if queue is not None:
            cl = statistics.median(times["pyopencl"])
            out.append(_entry(f"vs_pyopencl/{size}", py, "ns", cl))
            out.append(_entry(f"pyopencl_buffers_vs_pyopencl/{size}", statistics.median(times["cl"]), "ns", cl))
    if queue is not None:
        # Short turns, six times as many: this VM's speed changes within tens of
        # milliseconds, and turns of 300 loops (about 10 ms) left medians that one side's
        # bad patch could move by a third.
        n_iters = 10 if quick else 50
        for n in ARRAY_SIZES:
            times = {"ours": [], "theirs": []}
            pair = [("ours", ours_cl), ("theirs", theirs)]
            for rep in range(6 * reps + 1):
                for k, p in pair if rep % 2 else pair[::-1]:
                    t = _arrays(queue, p, n, n_iters)
                    if rep:
                        times[k].append(t)
            out.append(_entry(f"array_us/{n}", statistics.median(times["ours"]), "us", statistics.median(times["theirs"])))
    return out
