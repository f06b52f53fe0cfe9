"""``mpirun -n 6 python -m gpubuf.bench mpi`` (or ``-n 4``): halo updates across ranks from
Python, the cases of ``gpubuf bench mpi``.

Six ranks hold the faces of a cubed sphere, four a 2x2 periodic tile. Per case (``c48``:
48x48x79 cells, ``c96``: 96x96x79; float64, a 3-point halo, dims (x, y, z)) and kind
(``scalars``: four fields updated at once; ``vector``: one x/y pair) it times one update,
``--reps`` times after two warm-ups, every rep started together (a barrier); the figure is
the slowest rank's mean:

- ``<case>/<kind>_vs_pace_us``: ``gpubuf.mpi.HaloUpdater.on_node`` updating fields from
  ``gpubuf.mpi.node_buffer`` (each halo copied once, straight out of the neighbour's
  field), against pace-util's ``HaloUpdater`` with its own numpy transformer;
- ``<case>/<kind>_messages_vs_pace_us``: ``gpubuf.mpi.HaloUpdater`` (every halo a
  message, as between nodes) against the same pace-util baseline;
- ``<case>/<kind>_vs_rust_us``: the ``on_node`` updater called from Python against the
  same updater timed in Rust with no Python in the loop (``time_updates``): what the
  binding costs;
- ``<case>/<kind>_pace_installed_us``: pace-util's ``HaloUpdater`` with gpubuf installed
  under it (``gpubuf.pace.install("cpu")``), against pace-util alone.

The pace-util figures need pace-util (``pip install pace-util``) and six ranks (its
updaters are the cubed sphere's); otherwise ``<case>/<kind>_update_us`` and
``<case>/<kind>_messages_us`` stand alone. Every rank takes part; rank 0 prints.
"""

import time

import numpy as np

CASES = [("c48", 48, 79), ("c96", 96, 79)]
N_HALO = 3


def _entry(name, value, unit, baseline=None):
    e = {"name": name, "value": value, "unit": unit}
    if baseline is not None:
        e["baseline"] = baseline
        if baseline > 0:
            e["ratio"] = value / baseline
    return e


def _slowest_mean(comm, reps, fn):
    """The slowest rank's mean seconds of ``fn`` over ``reps`` runs after two warm-ups,
    each run started together."""
    fn()
    fn()
    total = 0.0
    for _ in range(reps):
        comm.Barrier()
        t = time.perf_counter()
        fn()
        total += time.perf_counter() - t
    from mpi4py import MPI

    return comm.allreduce(total / reps, op=MPI.MAX)


def _layout(size):
    if size == 6:
        return "cube"
    if size == 4:
        return "tile"
    raise ValueError(
        f"python -m gpubuf.bench mpi runs on 6 ranks (cubed sphere) or 4 (2x2 tiles), not {size}: "
        "mpirun -n 6 python -m gpubuf.bench mpi"
    )


def _pace_setup(comm, pace):
    """pace-util's communicator of a cubed sphere of one rank a face."""
    part = pace.CubedSpherePartitioner(pace.TilePartitioner((1, 1)))
    return pace.CubedSphereCommunicator(comm, part)


def _spec(n, nz):
    """The case's spec (gpubuf's QuantityHaloSpec, with pace-util's field names)."""
    from . import QuantityHaloSpec

    shape = (n + 2 * N_HALO, n + 2 * N_HALO, nz)
    strides = (shape[1] * shape[2] * 8, shape[2] * 8, 8)
    return QuantityHaloSpec(
        N_HALO, strides, 8, shape, (N_HALO, N_HALO, 0), (n, n, nz), ("x", "y", "z"), dtype=np.dtype(np.float64)
    )


def _pace_spec(hdt, spec):
    return hdt.QuantityHaloSpec(
        n_points=spec.n_points,
        strides=tuple(spec.strides),
        itemsize=spec.itemsize,
        shape=tuple(spec.shape),
        origin=tuple(spec.origin),
        extent=tuple(spec.extent),
        dims=tuple(spec.dims),
        numpy_module=np,
        dtype=np.float64,
    )


def bench_mpi(backend=None, reps=15, quick=False):
    """The entries of module docs, on every rank (the same list)."""
    from mpi4py import MPI

    from . import mpi as gm
    from .bench import import_pace

    comm = MPI.COMM_WORLD
    kind = _layout(comm.Get_size())
    part = gm.CubedSpherePartitioner(1) if kind == "cube" else gm.TilePartitioner((2, 2))
    loaded = import_pace()
    results = []
    for case, n, nz in CASES:
        if quick:
            n, nz = n // 4, 8
        spec = _spec(n, nz)
        rng = np.random.default_rng(comm.Get_rank())
        for what, count, vector in (("scalars", 4, False), ("vector", 1, True)):
            k = count * (2 if vector else 1)
            base = [rng.standard_normal(spec.shape) for _ in range(k)]
            fields = [gm.node_buffer(spec.shape, fill=b) for b in base]
            plain = [b.copy() for b in base]
            xs, ys = (fields[:count], fields[count:]) if vector else (fields, None)
            px, py = (plain[:count], plain[count:]) if vector else (plain, None)
            specs_y = [spec] * count if vector else None
            name = f"bench-{case}-{what}"
            with gm.HaloUpdater.on_node(comm, part, [spec] * count, specs_y, name=name) as up:
                t_py = _slowest_mean(comm, reps, lambda: up.update(xs, ys))
                t_rust = comm.allreduce(
                    up._native.time_updates(comm, xs, ys, reps), op=MPI.MAX
                )
            with gm.HaloUpdater(comm, part, [spec] * count, specs_y, name=name + "-m") as up:
                t_msg = _slowest_mean(comm, reps, lambda: up.update(px, py))
            results.append(_entry(f"{case}/{what}_vs_rust_us", t_py * 1e6, "us", t_rust * 1e6))
            if loaded is None or kind != "cube":
                results.append(_entry(f"{case}/{what}_update_us", t_py * 1e6, "us"))
                results.append(_entry(f"{case}/{what}_messages_us", t_msg * 1e6, "us"))
                continue
            pace, hdt = loaded
            t_pace, t_inst = _pace_times(comm, pace, hdt, spec, count, vector, base, reps)
            results.append(_entry(f"{case}/{what}_vs_pace_us", t_py * 1e6, "us", t_pace * 1e6))
            results.append(_entry(f"{case}/{what}_messages_vs_pace_us", t_msg * 1e6, "us", t_pace * 1e6))
            results.append(_entry(f"{case}/{what}_pace_installed_us", t_inst * 1e6, "us", t_pace * 1e6))
    return results


def _pace_times(comm, pace, hdt, spec, count, vector, base, reps):
    """pace-util's update time alone, then with gpubuf installed under it."""
    from . import pace as gpace

    pspec = _pace_spec(hdt, spec)
    quantities = [
        pace.Quantity(b.copy(), dims=["x", "y", "z"], units="m", origin=spec.origin, extent=spec.extent)
        for b in base
    ]
    xs, ys = (quantities[:count], quantities[count:]) if vector else (quantities, None)
    times = []
    for installed in (False, True):
        if installed:
            gpace.install("cpu")
        try:
            pcomm = _pace_setup(comm, pace)
            if vector:
                up = pcomm.get_vector_halo_updater([pspec] * count, [pspec] * count)
                times.append(_slowest_mean(comm, reps, lambda: up.update(xs, ys)))
            else:
                up = pcomm.get_scalar_halo_updater([pspec] * count)
                times.append(_slowest_mean(comm, reps, lambda: up.update(xs)))
            del up
        finally:
            if installed:
                gpace.uninstall()
    return times[0], times[1]
