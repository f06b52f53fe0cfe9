"""``mpirun -n 6 python -m gpubuf.bench mpi`` (or ``-n 4``): halo updates across ranks from
Python, the cases of ``gpubuf bench mpi``.

Six ranks hold the faces of a cubed sphere, four a 2x2 periodic tile. Per case (``c48``:
48x48x79 cells, ``c96``: 96x96x79; float64, a 3-point halo, dims (x, y, z)) and kind
(``scalars``: four fields updated at once; ``vector``: one x/y pair) it times one update,
``--reps`` times after two warm-ups, every rep started together (a barrier), the things
compared taking turns (``_round_robin``: one update each for the same updater timed two
ways, blocks of a third of ``--reps`` for different updaters); the figure is the slowest
rank's mean:

- ``<case>/<kind>_vs_pace_us``: ``gpubuf.mpi.HaloUpdater.on_node`` updating fields from
  ``gpubuf.mpi.node_buffer`` (each halo copied once, straight out of the neighbour's
  field), against pace-util's ``HaloUpdater`` with its own numpy transformer;
- ``<case>/<kind>_messages_vs_pace_us``: ``gpubuf.mpi.HaloUpdater`` (every halo a
  message, as between nodes) against the same pace-util baseline;
- ``<case>/<kind>_vs_rust_us``: the ``on_node`` updater called from Python against the
  same updater timed in Rust with no Python in the loop (``time_updates``), one run of
  each in turn (a rotation of just these two): what the binding costs;
- ``<case>/<kind>_pace_installed_us``: pace-util's ``HaloUpdater`` with gpubuf installed
  under it (``gpubuf.pace.install("cpu")``), against pace-util alone;
- ``<case>/<kind>_vs_floor_us``: the ``on_node`` update against its floor
  (``bench_mpi_floor.Floor``: the same synchronisation with the neighbours and a copy of
  the same bytes out of their memory, contiguous, with nothing else), timed in the same
  rotation: how far the update is from the least an update that copies each halo once
  between processes costs on this machine;
- ``<case>/<kind>_floor_vs_pace_us`` and ``<case>/<kind>_raw_vs_pace_us``: that floor, and
  MPI's own exchange of the same bytes (``bench_mpi_floor.Raw``, the baseline of
  ``gpubuf bench mpi``), against pace-util's ``HaloUpdater``: the best ``_vs_pace_us``
  ratio a one-copy update could reach here, and where MPI alone stands.

The pace-util figures need pace-util (``pip install pace-util``) and six ranks (its
updaters are the cubed sphere's); otherwise ``<case>/<kind>_update_us``,
``<case>/<kind>_messages_us`` and ``<case>/<kind>_raw_us`` stand alone. Every rank takes part; rank 0 prints.
"""

import time

import numpy as np

from .bench_mpi_floor import Floor, Raw

CASES = [("c48", 48, 79), ("c96", 96, 79)]
N_HALO = 3


def _round_robin(comm, reps, fns, block=1):
    """The slowest rank's mean seconds of each of ``fns`` over ``reps`` runs (after two
    warm-ups of each), every run started together (a barrier). The runs go in blocks of
    ``block``, the functions' blocks alternating (the first function of each round
    turning), so that all see the same period of the machine. Blocks of one suit the same
    update timed two ways; blocks of a third of ``reps`` let different updaters each run
    in steady state, not right after the other's update (pace-util's, Python-heavy, slows
    the update that follows it). A function that returns a number has timed itself (in
    seconds)."""
    from mpi4py import MPI

    for _ in range(2):
        for fn in fns:
            fn()
    totals = [0.0] * len(fns)
    counts = [0] * len(fns)
    n = len(fns)
    block = max(1, block)
    rnd = 0
    while min(counts) < reps:
        for k in [(rnd + j) % n for j in range(n)]:
            fn = fns[k]
            for _ in range(min(block, reps - counts[k])):
                comm.Barrier()
                t = time.perf_counter()
                own = fn()
                totals[k] += own if own is not None else time.perf_counter() - t
                counts[k] += 1
        rnd += 1
    return [comm.allreduce(t / reps, op=MPI.MAX) for t in totals]


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
    from .bench import _entry, import_pace

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
            up = gm.HaloUpdater.on_node(comm, part, [spec] * count, specs_y, name=name)
            upm = gm.HaloUpdater(comm, part, [spec] * count, specs_y, name=name + "-m")
            floor = raw = None
            pace_up = None
            if loaded is not None and kind == "cube":
                pace, hdt = loaded
                pace_up = _pace_updater(comm, pace, hdt, spec, count, vector, base)
            update = lambda: up.update(xs, ys)  # noqa: E731
            try:
                # The Python/Rust ratio from a rotation of just those two.
                t_py, t_rust = _round_robin(
                    comm, reps, [update, lambda: up._native.time_updates(comm, xs, ys, 1, 0)]
                )
                # Made after that rotation, so that it times the updater alone. Ranks on
                # several nodes have no floor: the update stands in (and is dropped).
                links = up._native.message_bytes
                floor, raw = Floor.make(comm, links), Raw(comm, links)
                others = [floor or update, raw, lambda: upm.update(px, py)] + ([pace_up] if pace_up else [])
                rest = _round_robin(comm, reps, [update] + others, block=reps // 3)
            finally:
                up.close()
                upm.close()
                for ref in (floor, raw):
                    if ref is not None:
                        ref.close()
            t_up, t_floor, t_raw, t_msg = rest[:4]
            results.append(_entry(f"{case}/{what}_vs_rust_us", t_py * 1e6, "us", t_rust * 1e6))
            if floor is not None:
                results.append(_entry(f"{case}/{what}_vs_floor_us", t_up * 1e6, "us", t_floor * 1e6))
            if pace_up is None:
                results.append(_entry(f"{case}/{what}_update_us", t_up * 1e6, "us"))
                results.append(_entry(f"{case}/{what}_messages_us", t_msg * 1e6, "us"))
                results.append(_entry(f"{case}/{what}_raw_us", t_raw * 1e6, "us"))
                continue
            t_pace = rest[4]
            from . import pace as gpace

            # Built and run with gpubuf installed (pace-util's own updater, built before,
            # keeps its numpy transformers).
            with gpace.installed("cpu"):
                installed = _pace_updater(comm, pace, hdt, spec, count, vector, base)
                t_inst = _round_robin(comm, reps, [installed, pace_up], block=reps // 3)
            results.append(_entry(f"{case}/{what}_vs_pace_us", t_up * 1e6, "us", t_pace * 1e6))
            results.append(_entry(f"{case}/{what}_messages_vs_pace_us", t_msg * 1e6, "us", t_pace * 1e6))
            results.append(_entry(f"{case}/{what}_pace_installed_us", t_inst[0] * 1e6, "us", t_inst[1] * 1e6))
            if floor is not None:
                results.append(_entry(f"{case}/{what}_floor_vs_pace_us", t_floor * 1e6, "us", t_pace * 1e6))
            results.append(_entry(f"{case}/{what}_raw_vs_pace_us", t_raw * 1e6, "us", t_pace * 1e6))
    return results


def _pace_updater(comm, pace, hdt, spec, count, vector, base):
    """A function running one update of a new pace-util ``HaloUpdater`` over quantities of
    its own (on gpubuf when gpubuf is installed under pace-util)."""
    pspec = _pace_spec(hdt, spec)
    quantities = [
        pace.Quantity(b.copy(), dims=["x", "y", "z"], units="m", origin=spec.origin, extent=spec.extent)
        for b in base
    ]
    xs, ys = (quantities[:count], quantities[count:]) if vector else (quantities, None)
    pcomm = _pace_setup(comm, pace)
    if vector:
        up = pcomm.get_vector_halo_updater([pspec] * count, [pspec] * count)
        return lambda: up.update(xs, ys)
    up = pcomm.get_scalar_halo_updater([pspec] * count)
    return lambda: up.update(xs)
