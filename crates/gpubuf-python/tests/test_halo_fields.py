"""gpubuf.HaloFields: the halo update of many fields at once against numpy's
``np.pad(interior, mode="wrap")`` over the horizontal axes, its errors, and a periodic
2 x 2 tile of ranks exchanging their messages in one process."""

import numpy as np
import pytest

import gpubuf


def wrapped(a, n_halo, horizontal):
    """``a`` with every halo replaced as a periodic update would: the compute domain of
    the horizontal axes (``horizontal``: their indices) padded by ``np.pad(mode="wrap")``."""
    inner = tuple(slice(n_halo, s - n_halo) if ax in horizontal else slice(None) for ax, s in enumerate(a.shape))
    pad = [(n_halo, n_halo) if ax in horizontal else (0, 0) for ax in range(a.ndim)]
    return np.pad(a[inner], pad, mode="wrap")


def filled(shape, dtype, seed):
    return (np.arange(np.prod(shape)).reshape(shape) + 1000 * seed).astype(dtype)


def three_fields():
    """Three fields of different shapes and dtypes, and a vector pair."""
    return [
        filled((11, 9, 3), np.float64, 0),  # x, y, z: halo 2 -> 7 x 5 x 3
        filled((8, 10, 2), np.float32, 1),
        filled((6, 7, 4), np.int32, 2),
        (filled((8, 8, 1), np.float64, 3), filled((8, 8, 1), np.float64, 4)),  # a vector
    ]


def as_ndbuffers(arrays, backend):
    def one(a):
        return gpubuf.NDBuffer.from_numpy(a, backend=backend)

    return [tuple(one(x) for x in a) if isinstance(a, tuple) else one(a) for a in arrays]


def flat(arrays):
    return [x for a in arrays for x in (a if isinstance(a, tuple) else (a,))]


def test_periodic_update_matches_np_pad_wrap(backend):
    host = three_fields()
    want = [wrapped(a, 2, (0, 1)) for a in flat(host)]
    fields = as_ndbuffers(host, backend)
    halo = gpubuf.HaloFields(fields, n_halo=2, backend=backend)
    assert len(halo) == 4 and halo.neighbors == [0]
    assert [d.name for d in halo.dtypes] == ["float64", "float32", "int32", "float64"]
    for _ in range(2):  # built once, updated every step
        halo.update(fields)
        for got, w in zip(flat(fields), want):
            np.testing.assert_array_equal(got.to_numpy(), w)


def test_numpy_arrays_are_updated_in_place(backend):
    host = three_fields()
    want = [wrapped(a, 2, (0, 1)) for a in flat(host)]
    halo = gpubuf.HaloFields(host, n_halo=2, backend=backend)
    halo.update(host)  # adopted on the CPU, uploaded and written back elsewhere
    for got, w in zip(flat(host), want):
        np.testing.assert_array_equal(got, w)


def test_fields_from_quantity_halo_specs(backend):
    a = filled((9, 9, 3), np.float64, 5)
    spec = gpubuf.QuantityHaloSpec(2, a.strides, a.itemsize, a.shape, (2, 2, 0), (5, 5, 3), ("x", "y", "z"))
    halo = gpubuf.HaloFields([spec], backend=backend)
    want = wrapped(a, 2, (0, 1))
    nd = gpubuf.NDBuffer.from_numpy(a, backend=backend)
    halo.update([nd])
    np.testing.assert_array_equal(nd.to_numpy(), want)


def test_dims_put_the_horizontal_axes_anywhere(backend):
    a = filled((3, 8, 7), np.float64, 6)  # z, y, x
    halo = gpubuf.HaloFields([a], n_halo=1, dims=("z", "y", "x"), backend=backend)
    want = wrapped(a, 1, (1, 2))
    nd = gpubuf.NDBuffer.from_numpy(a, backend=backend)
    halo.update([nd])
    np.testing.assert_array_equal(nd.to_numpy(), want)


def test_errors_leave_the_fields_usable(backend):
    host = three_fields()
    fields = as_ndbuffers(host, backend)
    halo = gpubuf.HaloFields(fields, n_halo=2, backend=backend)
    before = [f.to_numpy() for f in flat(fields)]
    with pytest.raises(gpubuf.LengthMismatchError):
        halo.update(fields[:3])
    with pytest.raises(gpubuf.LengthMismatchError):
        halo.update(fields + [fields[0]])
    with pytest.raises(gpubuf.ShapeMismatchError):
        halo.update([fields[3][0]] + fields[1:])  # a float64 array of another shape
    with pytest.raises(gpubuf.DTypeMismatchError):
        halo.update([fields[1], fields[0], fields[2], fields[3]])
    with pytest.raises(gpubuf.InvalidArgumentError):
        halo.update(fields[:3] + [fields[3][0]])  # a vector needs its pair
    other = gpubuf.Backend("cpu")
    with pytest.raises(gpubuf.DeviceMismatchError):
        halo.update([gpubuf.NDBuffer.from_numpy(host[0], backend=other, copy=True)] + fields[1:])
    for f, b in zip(flat(fields), before):
        np.testing.assert_array_equal(f.to_numpy(), b)  # nothing was written
    halo.update(fields)
    for f, a in zip(flat(fields), flat(host)):
        np.testing.assert_array_equal(f.to_numpy(), wrapped(a, 2, (0, 1)))


def test_bad_descriptions_are_refused(cpu):
    a = np.zeros((8, 8))
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.HaloFields([a])  # no n_halo
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.HaloFields([a], n_halo=5)  # wider than the array
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.HaloFields([], n_halo=1)
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.HaloFields([(a, np.zeros((6, 6)))], n_halo=1)  # vector components differ
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.HaloFields([a], n_halo=1, periodic=False)
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.HaloFields([a], n_halo=1, tile=(2, 2), rank=4)
    # One x and one y axis a field: otherwise the plans wrote halos twice, or on an axis
    # no boundary describes.
    cube = np.zeros((8, 8, 8))
    for dims in (("x", "z"), ("z", "z"), ("x", "x"), ("x", "y", "x")):
        with pytest.raises(gpubuf.InvalidArgumentError, match="one x axis and one y axis"):
            gpubuf.HaloFields([cube[(slice(None),) * len(dims)] if len(dims) == 3 else a], n_halo=1, dims=dims)
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.HaloFields([np.zeros(10)], n_halo=1)
    # Numbers past any size are gpubuf's errors, not pyo3's OverflowError.
    for kwargs in ({"n_halo": -1}, {"n_halo": 2**70}, {"n_halo": 1, "tile": (2, 2), "rank": -1}):
        with pytest.raises(gpubuf.InvalidArgumentError):
            gpubuf.HaloFields([a], **kwargs)


def test_a_refused_update_writes_no_field(backend):
    # A read-only array, or two arrays over the same bytes, are refused before anything
    # runs: the other fields keep their halos (they were written, then numpy raised).
    a, b = filled((8, 8), np.float64, 5), filled((8, 8), np.float64, 6)
    halo = gpubuf.HaloFields([a, b], n_halo=2, backend=backend)
    ro = b.copy()
    ro.flags.writeable = False
    base = filled((8, 16), np.float64, 7)
    for pair in ([a, ro], [ro, a], [base[:, :8], base[:, 1:9]]):
        before = [p.copy() for p in pair]
        with pytest.raises(gpubuf.InvalidArgumentError):
            halo.update(pair)
        for p, was in zip(pair, before):
            np.testing.assert_array_equal(p, was)
    # One array given twice is one array written twice, on every backend alike.
    with pytest.raises(gpubuf.InvalidPlanError):
        halo.update([a, a])
    halo.update([a, b])  # still usable
    np.testing.assert_array_equal(a, wrapped(filled((8, 8), np.float64, 5), 2, (0, 1)))


def test_tile_of_ranks_exchanges_messages(backend):
    nx, ny, n = 5, 4, 2
    glob = [filled((2 * nx + 2 * n, 2 * ny + 2 * n), np.float64, k) for k in range(2)]
    want = [wrapped(g, n, (0, 1)) for g in glob]

    def piece(a, r):
        j, i = divmod(r, 2)
        return np.ascontiguousarray(a[i * nx : i * nx + nx + 2 * n, j * ny : j * ny + ny + 2 * n])

    ranks = []
    for r in range(4):
        arrays = [gpubuf.NDBuffer.from_numpy(piece(g, r), backend=backend) for g in glob]
        h = gpubuf.HaloFields(arrays, n_halo=n, backend=backend, tile=(2, 2), rank=r)
        with pytest.raises(gpubuf.InvalidArgumentError):
            h.update(arrays)  # its neighbours are other ranks
        ranks.append((h, arrays))
    mail = []
    for r, (h, arrays) in enumerate(ranks):
        for k, to in enumerate(h.neighbors):
            h.pack(k, arrays)
            mail.append((r, to, h.message(k)))
    for frm, to, data in mail:
        h = ranks[to][0]
        k = h.neighbors.index(frm)
        with pytest.raises(gpubuf.LengthMismatchError):
            h.receive(k, data[:-8])
        h.receive(k, data)
    for r, (h, arrays) in enumerate(ranks):
        for k in range(len(h.neighbors)):
            h.unpack(k, arrays)
        for a, w in zip(arrays, want):
            np.testing.assert_array_equal(a.to_numpy(), piece(w, r))
