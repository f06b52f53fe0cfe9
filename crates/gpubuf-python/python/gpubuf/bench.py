"""``python -m gpubuf.bench halo|pool|zarr|mpi``: gpubuf's Python API timed against the Rust
API doing the same work without Python in the loop, and against the Python libraries it
stands in for (pace-util's numpy halo transformer, pyopencl's ``MemoryPool``, zarr-python
reading into numpy), measured in the same process. With ``--json`` it prints one line of the same shape as
``gpubuf bench <name> --json``::

    {"bench", "backend", "device", "results": [{"name", "value", "unit", "baseline", "ratio"}]}

``ratio`` is ``value / baseline``: above 1 means faster for GB/s, below 1 means faster
for ns. ``mpi`` runs under ``mpirun -n 6`` (or ``-n 4``): gpubuf's MPI updater from
Python against pace-util's and against itself in Rust (``gpubuf.bench_mpi``). What each
figure measures is in docs/python.md.
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

from . import Backend, GpubufError, HaloDataTransformer, HaloExchangeSpec, NDBuffer, QuantityHaloSpec
from ._gpubuf import _Evictor, _halo_times

# The cases of `gpubuf bench halo`: (name, arrays, n, rotation, vector); 80 levels, a
# 3-point halo, the four edges of every quantity.
HALO_CASES = [
    ("c192_rot0", 8, 192, 0, False),
    ("c192_rot1", 8, 192, 1, False),
    ("c192_vec_rot1", 8, 192, 1, True),
    ("c48_q30", 30, 48, 0, False),
]
LEVELS, N_HALO = 80, 3
EVICT_BYTES = 128 << 20


def _entry(name, value, unit, baseline=None):
    e = {"name": name, "value": value, "unit": unit}
    if baseline is not None:
        e["baseline"] = baseline
        if baseline > 0:
            e["ratio"] = value / baseline
    return e


def import_pace():
    """pace-util's ``pace.util`` and its transformer module, or None when not installed.
    pace-util 0.9.0 imports ``numpy.lib.index_tricks``, which numpy 2 renamed; the old
    name is mapped to the new module first."""
    try:
        import numpy.lib._index_tricks_impl as tricks

        sys.modules.setdefault("numpy.lib.index_tricks", tricks)
    except ImportError:
        pass
    try:
        import pace.util as pace
        from pace.util import halo_data_transformer as hdt
    except ImportError:
        return None
    return pace, hdt


def edge_slices(n, boundary, interior):
    """The slices of one edge of an (n + 6, n + 6, 80) array with dims (x, y, z): its
    compute-domain points next to ``boundary`` (interior) or its halo there, as
    ``QuantityHaloSpec::boundary_slices`` in Rust."""
    o, e, h = N_HALO, n, N_HALO
    inner = {True: (o, o + h), False: (o - h, o)}  # at the start of an axis
    outer = {True: (o + e - h, o + e), False: (o + e, o + e + h)}  # at its end
    full = slice(o, o + e)
    x, y = full, full
    if boundary == "west":
        x = slice(*inner[interior])
    elif boundary == "east":
        x = slice(*outer[interior])
    elif boundary == "south":
        y = slice(*inner[interior])
    elif boundary == "north":
        y = slice(*outer[interior])
    return (x, y, slice(0, LEVELS))


class _Median:
    def __init__(self):
        self.times = {}

    def add(self, key, seconds):
        self.times.setdefault(key, []).append(seconds)

    def gbps(self, key, nbytes):
        return nbytes / statistics.median(self.times[key]) / 1e9


def _halo_case(backend, evict, case, reps, quick, hdt, pace):
    """Times one case; returns the entries."""
    name, count, n, rotation, vector = case
    if quick:
        n //= 4
    shape = (n + 2 * N_HALO, n + 2 * N_HALO, LEVELS)
    dims = ("x", "y", "z")
    host = [np.full(shape, k + 0.5) for k in range(count)]
    on_cpu = backend.name == "cpu"
    # On the CPU gpubuf packs the numpy arrays in place; elsewhere device arrays.
    arrays = host if on_cpu else [NDBuffer.from_numpy(a, backend) for a in host]
    pairs = count // 2 if vector else count
    edges = ["north", "south", "east", "west"]
    a0 = host[0]
    q = QuantityHaloSpec(N_HALO, a0.strides, a0.itemsize, shape, (N_HALO, N_HALO, 0), (n, n, LEVELS), dims)
    sx = [HaloExchangeSpec(q, edge_slices(n, e, True), rotation, edge_slices(n, e, False)) for e in edges] * pairs
    qx = [arrays[p] for p in range(pairs) for _ in edges]
    qy = [arrays[pairs + p] for p in range(pairs) for _ in edges] if vector else None
    t = HaloDataTransformer.get(np, sx, sx if vector else None, backend=backend)
    nbytes = t.buffer_size * 8

    ops = {}

    def py_op(unpack):
        def run():
            (t.async_unpack if unpack else t.async_pack)(qx, qy)
            t.synchronize()

        return run

    ops["py_pack"], ops["py_unpack"] = py_op(False), py_op(True)
    if pace is not None:
        pq = hdt.QuantityHaloSpec(N_HALO, a0.strides, a0.itemsize, shape, q.origin, q.extent, dims, np, a0.dtype)
        px = [hdt.HaloExchangeSpec(pq, s.pack_slices, rotation, s.unpack_slices) for s in sx]
        ref = hdt.HaloDataTransformer.get(np, px, px if vector else None)
        quantity = [pace.Quantity(a, dims, "m", origin=q.origin, extent=q.extent) for a in host]
        rx = [quantity[p] for p in range(pairs) for _ in edges]
        ry = [quantity[pairs + p] for p in range(pairs) for _ in edges] if vector else None

        def pace_op(unpack):
            def run():
                (ref.async_unpack if unpack else ref.async_pack)(rx, ry)
                ref.synchronize()

            return run

        ops["pace_pack"], ops["pace_unpack"] = pace_op(False), pace_op(True)

    out = []
    for warm in (False, True):
        m = _Median()
        # Interleaved, so drift in the machine's speed hits every figure alike; the first
        # two rounds warm up.
        for rnd in range(reps + 2):
            for unpack in (False, True):
                what = "unpack" if unpack else "pack"
                # The Rust loop: one timed run, preceded by the same eviction or warm run.
                (secs,) = _halo_times(t, qx, qy, unpack, 1, warm, None if warm else evict)
                if rnd >= 2:
                    m.add("rust_" + what, secs)
                for impl in ("py", "pace"):
                    op = ops.get(f"{impl}_{what}")
                    if op is None:
                        continue
                    if warm:
                        op()
                    else:
                        evict()
                    t0 = time.perf_counter()
                    op()
                    if rnd >= 2:
                        m.add(f"{impl}_{what}", time.perf_counter() - t0)
        prefix = f"warm/{name}" if warm else name
        for what in ("pack", "unpack"):
            py = m.gbps("py_" + what, nbytes)
            out.append(_entry(f"{prefix}/{what}_gbps", py, "GB/s", m.gbps("rust_" + what, nbytes)))
            if pace is not None:
                out.append(_entry(f"{prefix}/{what}_vs_pace", py, "GB/s", m.gbps("pace_" + what, nbytes)))
    return out


def bench_halo(backend, reps=15, quick=False):
    """The halo figures on ``backend`` (a ``Backend``): per case and regime (cold: a
    scratch buffer of 128 MiB, 16 MiB with ``quick``, filled before each timed call;
    ``warm/``: right after an untimed run of the same call) ``<case>/pack_gbps`` and
    ``unpack_gbps`` (Python, against the Rust loop) and ``pack_vs_pace``,
    ``unpack_vs_pace`` (Python, against pace-util's numpy transformer, when installed)."""
    found = import_pace()
    pace, hdt = found if found else (None, None)
    evict = _Evictor(backend, (16 << 20) if quick else EVICT_BYTES)
    out = []
    for case in HALO_CASES:
        out += _halo_case(backend, evict, case, reps, quick, hdt, pace)
    return out


def bench_pool(backend, reps=15, quick=False):
    """``gpubuf.bench_pool``: the pool's hit, against Rust and pyopencl's pool."""
    from .bench_pool import bench_pool as run_pool

    return run_pool(backend, reps=reps, quick=quick)


def bench_zarr(backend, reps=15, quick=False):
    """``gpubuf.bench_zarr``: zarr reads and writes, sharded and unsharded."""
    from .bench_zarr import bench_zarr as run_zarr

    return run_zarr(backend, reps=reps, quick=quick)


def bench_mpi(backend, reps=15, quick=False):
    """``gpubuf.bench_mpi`` (under mpirun; host memory: the CPU backend only)."""
    if backend.name != "cpu":
        raise ValueError("python -m gpubuf.bench mpi updates host arrays: --backend cpu")
    from .bench_mpi import bench_mpi as run_mpi

    return run_mpi(backend, reps=reps, quick=quick)


BENCHES = {"halo": bench_halo, "pool": bench_pool, "zarr": bench_zarr, "mpi": bench_mpi}

# The most timed repetitions the command line takes (as `gpubuf bench --reps`).
MAX_REPS = 1_000_000


def run(name, backend="cpu", reps=15, quick=False):
    """Runs benchmark ``name`` on the backend named ``backend``; returns the report dict
    (the JSON shape of ``gpubuf bench --json``)."""
    if name not in BENCHES:
        raise ValueError(f"unknown benchmark {name!r}: one of {', '.join(BENCHES)}")
    if reps < 1:
        raise ValueError("reps is at least 1")
    b = Backend(backend)
    results = BENCHES[name](b, reps=reps, quick=quick)
    return {"bench": name, "backend": b.name, "device": str(b.info.get("name", "")), "results": results}


def _table(report):
    lines = [f"bench {report['bench']} on {report['backend']} ({report['device']})"]
    lines.append(f"{'case':<32} {'value':>12} {'unit':<6} {'baseline':>12} {'ratio':>8}")
    for e in report["results"]:
        base = f"{e['baseline']:.3f}" if "baseline" in e else "-"
        ratio = f"{e['ratio']:.3f}" if "ratio" in e else "-"
        lines.append(f"{e['name']:<32} {e['value']:>12.3f} {e['unit']:<6} {base:>12} {ratio:>8}")
    return "\n".join(lines)


def main(argv=None):
    """The command line: ``python -m gpubuf.bench halo|pool|zarr|mpi [--backend B] [--json]
    [--reps N] [--quick]``."""
    p = argparse.ArgumentParser(prog="python -m gpubuf.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("name", choices=sorted(BENCHES))
    p.add_argument("--backend", default="cpu", choices=["cpu", "opencl", "cuda"])
    p.add_argument("--json", action="store_true", help="print the report as one JSON line")
    p.add_argument("--reps", type=int, default=15, help="timed repetitions per figure (the median is reported)")
    p.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    a = p.parse_args(argv)
    if not 1 <= a.reps <= MAX_REPS:
        p.error(f"--reps is 1 to {MAX_REPS}")
    if a.name == "mpi" and a.backend != "cpu":
        p.error("mpi updates host arrays: --backend cpu")
    try:
        report = run(a.name, a.backend, a.reps, a.quick)
    except (GpubufError, ValueError) as e:  # a backend that cannot run, a layout of ranks
        print(f"gpubuf: {e}", file=sys.stderr)
        return 1
    if a.name == "mpi":
        from mpi4py import MPI

        if MPI.COMM_WORLD.Get_rank() != 0:
            return 0
        report["ranks"] = MPI.COMM_WORLD.Get_size()
    try:
        print(json.dumps(report) if a.json else _table(report), flush=True)
    except BrokenPipeError:  # the reader wanted no more (`| head`): end quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
    except OSError as e:
        print(f"gpubuf: writing to stdout: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
