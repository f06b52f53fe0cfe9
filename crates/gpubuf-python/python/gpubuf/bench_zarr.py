"""``python -m gpubuf.bench zarr``: reads and writes of a chunked, compressed zarr array
between a store and device memory through gpubuf's prototype, against zarr's default
prototype plus the copy between numpy and the device (on the CPU backend: zarr's default
prototype alone, reading into and writing from numpy). What each figure measures is in
docs/python.md."""

import tempfile
import time

import numpy as np

from . import NDBuffer
from .bench import _entry

#: The array (4096 x 4096 float32, 64 MiB), its chunks (2 MiB) and the shards of the
#: sharded case (8 chunks each).
SHAPE, CHUNKS, SHARDS = (4096, 4096), (512, 1024), (1024, 2048)
QUICK_SHAPE, QUICK_CHUNKS, QUICK_SHARDS = (1024, 1024), (256, 256), (512, 512)



def _data(shape):
    y, x = np.meshgrid(np.linspace(0, 40, shape[0]), np.linspace(0, 30, shape[1]), indexing="ij")
    return (np.sin(x) * np.cos(y) * 100).astype(np.float32)


def _case(backend, tmp, name, shards, reps, quick):
    """Times reads and writes of one array; returns ``(read entry, write entry)``."""
    import zarr

    from .zarr import enable

    shape, chunks = (QUICK_SHAPE, QUICK_CHUNKS) if quick else (SHAPE, CHUNKS)
    if shards is not None and quick:
        shards = QUICK_SHARDS
    data = _data(shape)
    # A margin on every side: edge chunks (and shards) are read and written in part.
    sel = (slice(37, shape[0] - 29), slice(101, shape[1] - 6))
    nbytes = data[sel].nbytes
    z = zarr.create_array(f"{tmp}/{name}.zarr", shape=shape, chunks=chunks, shards=shards, dtype="float32")
    z[...] = data
    cpu = backend.name == "cpu"
    value = np.ascontiguousarray(data[sel] + 1)
    dev_value = NDBuffer.from_numpy(value, backend)
    times = {}  # key: seconds of each timed round

    def zarr_default():
        # zarr's default prototype into numpy, then uploaded; from the device array
        # downloaded to numpy.
        t0 = time.perf_counter()
        host = z.get_basic_selection(sel)
        if not cpu:
            NDBuffer.from_numpy(host, backend)
            backend.synchronize()
        t1 = time.perf_counter()
        z.set_basic_selection(sel, value if cpu else dev_value.to_numpy())
        return t1 - t0, time.perf_counter() - t1

    def gpubuf():
        # gpubuf's classes as zarr's default, as a user sets them (sharded arrays need
        # that: zarr's sharding codec accepts its default prototype only).
        with enable(backend.name):
            t0 = time.perf_counter()
            z.get_basic_selection(sel)
            backend.synchronize()
            t1 = time.perf_counter()
            z.set_basic_selection(sel, dev_value)
            backend.synchronize()
            return t1 - t0, time.perf_counter() - t1

    for rnd in range(reps + 2):
        # Interleaved, each side first in every other round.
        order = (("base", zarr_default), ("gpubuf", gpubuf))
        for key, run in order if rnd % 2 else order[::-1]:
            read, write = run()
            if rnd >= 2:
                times.setdefault(f"read_{key}", []).append(read)
                times.setdefault(f"write_{key}", []).append(write)
    got = z.get_basic_selection(sel)
    if not np.array_equal(got, value):
        raise RuntimeError(f"zarr bench {name}: the region read back differs from what was written")
    gbps = {k: nbytes / float(np.median(v)) / 1e9 for k, v in times.items()}
    return (
        _entry(f"{name}/read_gbps", gbps["read_gpubuf"], "GB/s", gbps["read_base"]),
        _entry(f"{name}/write_gbps", gbps["write_gpubuf"], "GB/s", gbps["write_base"]),
    )


def bench_zarr(backend, reps=15, quick=False):
    """``unsharded/`` and ``sharded/`` ``read_gbps`` and ``write_gbps`` on ``backend``
    (the median of ``reps`` interleaved rounds after two untimed ones)."""
    from .zarr import buffer_prototype

    # The device of the named prototype (what zarr's configuration names).
    backend = buffer_prototype(backend.name).nd_buffer.backend
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, shards in (("unsharded", None), ("sharded", SHARDS)):
            out += _case(backend, tmp, name, shards, reps, quick)
    return out
