"""gpubuf.mpi under ``mpirun -n 4`` (a 2x2 periodic tile) and ``-n 6`` (a 2x3 tile, and a
cubed sphere of one rank a face): halos against a numpy computation of the global field,
the message path, the shared-memory path and the one-copy path of node arrays giving the
same arrays, and bad input raising on every rank concerned, never a hang.

Every rank runs every test in the same order (pytest's), as an MPI program does; a test
that skips, skips on every rank.
"""

import gc

import numpy as np
import pytest

import gpubuf

MPI = pytest.importorskip("mpi4py.MPI")
gm = pytest.importorskip("gpubuf.mpi")

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()
N, H, NZ = 6, 2, 3

pytestmark = pytest.mark.skipif(SIZE not in (4, 6), reason="run under mpirun -n 4 or -n 6")


def layout():
    return (2, 2) if SIZE == 4 else (2, 3)


def spec(dtype=np.float64, n=N, nz=NZ):
    shape = (n + 2 * H, n + 2 * H, nz)
    item = np.dtype(dtype).itemsize
    strides = (shape[1] * shape[2] * item, shape[2] * item, item)
    return gpubuf.QuantityHaloSpec(
        H, strides, item, shape, (H, H, 0), (n, n, nz), ("x", "y", "z"), dtype=np.dtype(dtype)
    )


def global_field(salt, dtype=np.float64):
    """This rank's array of a periodic global field on the tile: interior and halos alike,
    element (x, y, k) holding a number made of its global indices."""
    ny, nx = layout()
    j, i = divmod(RANK, nx)
    a = np.arange(N + 2 * H) - H
    gi = (i * N + a) % (nx * N)
    gj = (j * N + a) % (ny * N)
    k = np.arange(NZ)
    v = (gi[:, None, None] * 100 + gj[None, :, None]) * 10 + k[None, None, :] + salt
    return v.astype(dtype)


def interior_only(full, dtype=np.float64):
    """``full`` with its halos overwritten by -1."""
    out = np.full(full.shape, -1, dtype=dtype)
    out[H:-H, H:-H, :] = full[H:-H, H:-H, :]
    return out


@pytest.mark.parametrize("on_node", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32])
def test_tile_scalars_match_the_global_field(on_node, dtype):
    make = gm.HaloUpdater.on_node if on_node else gm.HaloUpdater
    with make(COMM, gm.TilePartitioner(layout()), [spec(dtype)] * 2, name=f"tile-{on_node}") as up:
        assert up.dtype == np.dtype(dtype)
        want = [global_field(s, dtype) for s in (0.0, 0.5)]
        q = [interior_only(w, dtype) for w in want]
        up.update(q)
        for got, w in zip(q, want):
            np.testing.assert_array_equal(got, w)
        # A second update of other arrays (the updater adopts whatever it is given).
        q2 = [interior_only(w, dtype) for w in want]
        up.update(q2)
        np.testing.assert_array_equal(q2[1], want[1])


def test_vectors_on_a_tile_are_both_components():
    x, y = interior_only(global_field(1.0)), interior_only(global_field(2.0))
    with gm.HaloUpdater(COMM, gm.TilePartitioner(layout()), [spec()], [spec()], name="vec") as up:
        up.update([x], [y])
    np.testing.assert_array_equal(x, global_field(1.0))
    np.testing.assert_array_equal(y, global_field(2.0))


class Quantity:
    """What pace-util's updater is given: an object whose ``data`` is the array."""

    def __init__(self, data):
        self.data = data


def test_node_arrays_are_copied_straight_and_agree_with_messages():
    """The three paths give the same arrays; node arrays take the one-copy path."""
    part = gm.TilePartitioner(layout())
    want = global_field(3.0)
    results = []
    for kind in ("messages", "window", "node"):
        make = gm.HaloUpdater if kind == "messages" else gm.HaloUpdater.on_node
        with make(COMM, part, [spec()], name=f"paths-{kind}") as up:
            if kind == "node":
                q = gm.node_buffer(want.shape, fill=-1.0)
                q[H:-H, H:-H, :] = want[H:-H, H:-H, :]
            else:
                q = interior_only(want)
            up.update([Quantity(q)])
            copied = up.copied_bytes
            if kind == "node" and up.shared_neighbors:
                assert copied > 0
            if kind != "node":
                assert copied == 0
        results.append(np.array(q))
    for r in results:
        np.testing.assert_array_equal(r, want)


@pytest.mark.skipif(SIZE != 6, reason="a cubed sphere of one rank a face needs 6 ranks")
def test_cube_paths_agree():
    part = gm.CubedSpherePartitioner(gm.TilePartitioner((1, 1)))
    assert part.total_ranks == 6
    base = np.random.default_rng(RANK).standard_normal((N + 2 * H, N + 2 * H, NZ))
    out = []
    for make, name in ((gm.HaloUpdater, "cube-m"), (gm.HaloUpdater.on_node, "cube-w")):
        a = base.copy()
        with make(COMM, part, [spec()], name=name) as up:
            up.update([a])
            assert sorted(up.neighbors) == sorted(n for _, n, _ in part.neighbors(RANK))
        out.append(a)
    np.testing.assert_array_equal(out[0], out[1])
    # Interiors untouched, halos written.
    np.testing.assert_array_equal(out[0][H:-H, H:-H], base[H:-H, H:-H])
    assert not np.array_equal(out[0], base)


@pytest.mark.skipif(SIZE != 6, reason="a cubed sphere of one rank a face")
@pytest.mark.parametrize("grid,dtype", [("D", np.float64), ("C", np.float64), ("D", np.float32), ("C", np.int32)])
def test_staggered_vectors_on_the_cube_match_pace_util(grid, dtype):
    """D-grid winds (u on y_interface, v on x_interface) and C-grid ones (the other way
    round): the components' extents differ, and an odd rotation sends y's block first.
    The halos are pace-util's own update's, bit for bit, with values whose negation is a
    corner case (-0.0, NaN, infinities, the most negative integer): the components that
    cross a rotated edge are negated by the receiver where both ranks hold host memory."""
    import gpubuf.pace

    gpubuf.pace._numpy2_compat()
    pu = pytest.importorskip("pace.util")
    dims = (("x", "y_interface", "z"), ("x_interface", "y", "z"))
    if grid == "C":
        dims = dims[::-1]
    rng = np.random.default_rng(RANK + 10)

    def field(d):
        ext = tuple(N + 1 if name.endswith("_interface") else (N if name in "xy" else NZ) for name in d)
        shape = tuple(e + 2 * H if name != "z" else e for e, name in zip(ext, d))
        origin = tuple(H if name != "z" else 0 for name in d)
        data = rng.standard_normal(shape) * (1000 if np.dtype(dtype).kind == "i" else 1)
        data = data.astype(dtype)
        if np.dtype(dtype).kind == "f":
            odd = np.array([-0.0, 0.0, np.nan, -np.inf, np.inf], dtype=dtype)
        else:
            odd = np.array([np.iinfo(dtype).min, np.iinfo(dtype).max, 0, -1], dtype=dtype)
        # In every edge row of the compute domain, so every message carries some.
        for k, value in enumerate(odd):
            data[H + k % 2, H + k, :] = value
            data[H + k, H + k % 2, :] = value
            data[-H - 1 - k % 2, -H - 1 - k, :] = value
        return pu.Quantity(data, dims=d, units="m", origin=origin, extent=ext)

    u, v = field(dims[0]), field(dims[1])
    qspec = lambda q: gpubuf.QuantityHaloSpec(  # noqa: E731
        H, q.data.strides, q.data.itemsize, q.data.shape, q.origin, q.extent, q.dims, dtype=q.data.dtype
    )
    start = (u.data.copy(), v.data.copy())
    part = pu.CubedSpherePartitioner(pu.TilePartitioner((1, 1)))
    pu.CubedSphereCommunicator(COMM, part).vector_halo_update(u, v, H)
    want = (u.data.copy(), v.data.copy())
    for make, name in ((gm.HaloUpdater, f"stag{grid}-m"), (gm.HaloUpdater.on_node, f"stag{grid}-w")):
        a, b = start[0].copy(), start[1].copy()
        with make(COMM, gm.CubedSpherePartitioner(1), [qspec(u)], [qspec(v)], name=name) as up:
            up.update([a], [b])
        np.testing.assert_array_equal(a.view(np.uint8), want[0].view(np.uint8))
        np.testing.assert_array_equal(b.view(np.uint8), want[1].view(np.uint8))


def raises_everywhere(fn, match=None):
    """Runs ``fn`` on every rank; each must raise a gpubuf error (matching ``match``)."""
    with pytest.raises(gpubuf.GpubufError, match=match):
        fn()


def test_specs_that_disagree_raise_on_every_rank():
    n = N + 1 if RANK == 0 else N
    raises_everywhere(lambda: gm.HaloUpdater(COMM, gm.TilePartitioner(layout()), [spec(n=n)], name="dis"))


def test_a_bad_argument_on_one_rank_raises_on_every_rank():
    part = object() if RANK == SIZE - 1 else gm.TilePartitioner(layout())
    raises_everywhere(lambda: gm.HaloUpdater(COMM, part, [spec()], name="bad-part"))
    # And a partitioner of another size than the communicator, on every rank.
    raises_everywhere(lambda: gm.HaloUpdater(COMM, gm.TilePartitioner((1, 1)), [spec()], name="size"))


@pytest.mark.parametrize("on_node", [False, True])
@pytest.mark.parametrize(
    "bad",
    [
        lambda: np.zeros((3, 3, NZ)),
        lambda: np.zeros((N + 2 * H, N + 2 * H, NZ), dtype=np.float32),
        lambda: np.zeros((N + 2 * H, N + 2 * H, NZ))[::-1],
        "read-only",
        "read-only node array",
        "twice",
        "no list",
    ],
    ids=["shape", "dtype", "strides", "read-only", "read-only-node", "twice", "no-list"],
)
def test_a_refused_quantity_raises_on_its_rank_and_its_neighbours(on_node, bad):
    make = gm.HaloUpdater.on_node if on_node else gm.HaloUpdater
    with make(COMM, gm.TilePartitioner(layout()), [spec()] * 2, name="refuse") as up:
        want = [global_field(5.0), global_field(6.0)]
        q = [interior_only(w) for w in want]
        if RANK == 0:
            error = gpubuf.GpubufError
            if bad == "read-only":
                q[0].flags.writeable = False
            elif bad == "read-only node array":
                node = gm.node_buffer(q[0].shape)
                node[...] = q[0]
                node.flags.writeable = False
                q[0] = node
            elif bad == "twice":
                q[1] = q[0]
            elif bad == "no list":  # Python's own error, before gpubuf reads anything
                q, error = None, TypeError
            else:
                q[0] = bad()
            with pytest.raises(error):
                up.update(q)
            if bad == "read-only node array":
                assert (node[:H] == -1).all(), "a read-only node array was written"
        elif 0 in up.neighbors:
            with pytest.raises(gpubuf.InvalidArgumentError, match="rank 0 refused"):
                up.update(q)
        else:
            up.update(q)
            np.testing.assert_array_equal(q[0], want[0])
        # Nobody waits, and the next update is right everywhere.
        q = [interior_only(w) for w in want]
        up.update(q)
        for got, w in zip(q, want):
            np.testing.assert_array_equal(got, w)


def test_an_updater_over_a_freed_communicator_raises_on_every_rank():
    comm = COMM.Dup()
    up = gm.HaloUpdater(comm, gm.TilePartitioner(layout()), [spec()], name="freed")
    q = interior_only(global_field(7.0))
    up.update([q])
    comm.Free()
    raises_everywhere(lambda: up.update([q]), match="freed")
    up.close()
    assert up.closed
    raises_everywhere(lambda: up.update([q]), match="freed|closed")


def test_closed_updaters_raise_and_a_new_one_works():
    up = gm.HaloUpdater(COMM, gm.TilePartitioner(layout()), [spec()], name="closed")
    up.close()
    up.close()
    raises_everywhere(lambda: up.update([interior_only(global_field(0.0))]), match="closed")
    del up
    gc.collect()
    q = interior_only(global_field(8.0))
    with gm.HaloUpdater(COMM, gm.TilePartitioner(layout()), [spec()], name="closed") as up:
        up.update([q])
    np.testing.assert_array_equal(q, global_field(8.0))


def test_two_live_updaters_of_one_name_keep_their_messages_apart():
    """Each updater exchanges over a duplicate of the communicator of its own."""
    part = gm.TilePartitioner(layout())
    a, b = interior_only(global_field(9.0)), interior_only(global_field(10.0))
    with gm.HaloUpdater(COMM, part, [spec()], name="same") as u1:
        with gm.HaloUpdater(COMM, part, [spec()], name="same") as u2:
            u2.update([b])
            u1.update([a])
    np.testing.assert_array_equal(a, global_field(9.0))
    np.testing.assert_array_equal(b, global_field(10.0))


def test_node_buffer_arguments():
    a = gm.node_buffer((2, 3), dtype=np.int32, fill=7)
    assert a.dtype == np.int32 and a.shape == (2, 3) and (a == 7).all()
    assert gm.node_buffer((0, 3)).shape == (0, 3)
    with pytest.raises(gpubuf.GpubufError):
        gm.node_buffer((2, -1))
    with pytest.raises(gpubuf.GpubufError):
        gm.node_buffer((2, 3), dtype=np.complex128)
    with pytest.raises((gpubuf.GpubufError, MemoryError, OverflowError)):
        gm.node_buffer((2**62, 2**62))


def test_the_native_module_takes_communicators_never_addresses():
    from gpubuf import _mpi

    part, x = ("tile",) + layout() + (True,), [gm._spec(spec())]
    for bad in (12345, 0, "comm", MPI.COMM_NULL):
        with pytest.raises(gpubuf.InvalidArgumentError, match="intra-communicator|COMM_NULL"):
            _mpi.HaloUpdater(bad, part, x, None, "addr", False)
    with gm.HaloUpdater(COMM, gm.TilePartitioner(layout()), [spec()], name="addr") as up:
        with pytest.raises(gpubuf.InvalidArgumentError):
            up._native.time_updates(12345, [interior_only(global_field(0.0))])


def test_partitioner_arguments():
    tile = gm.TilePartitioner((2, 2))
    assert tile.total_ranks == 4 and gm.CubedSpherePartitioner(2).total_ranks == 24
    assert sorted(n for _, n, _ in tile.neighbors(0)) == [1, 1, 2, 2, 3, 3, 3, 3]
    for bad in (-1, 4, 2**70):
        with pytest.raises((gpubuf.InvalidArgumentError, OverflowError)):
            tile.neighbors(bad)
    with pytest.raises(gpubuf.InvalidArgumentError):
        gm.TilePartitioner((0, 3))
    with pytest.raises(gpubuf.InvalidArgumentError, match="square"):
        gm.CubedSpherePartitioner(gm.TilePartitioner((1, 2)))
