"""pace-util's halo API (QuantityHaloSpec, HaloExchangeSpec, HaloDataTransformer)
against an independent numpy computation of the same slices, rotations and signs."""

import numpy as np
import pytest

import gpubuf

X, Y, Z = "x", "y", "z"
HORIZONTAL = ("x", "x_interface", "y", "y_interface")


def rotate_scalar(data, dims, n):
    """pace's rotate_scalar_data: n clockwise quarter turns of the x-y plane."""
    n %= 4
    x = next((i for i, d in enumerate(dims) if d in ("x", "x_interface")), None)
    y = next((i for i, d in enumerate(dims) if d in ("y", "y_interface")), None)
    if n in (1, 3):
        if x is not None and y is not None:
            return np.rot90(data, axes=(y, x) if n == 1 else (x, y))
        if x is not None and n == 1:
            return np.flip(data, axis=x)
        if y is not None and n == 3:
            return np.flip(data, axis=y)
    if n == 2:
        return data[tuple(slice(None, None, -1) if d in HORIZONTAL else slice(None) for d in dims)]
    return data


def rotate_vector(xd, yd, n, dims):
    xd, yd = rotate_scalar(xd, dims, n), rotate_scalar(yd, dims, n)
    return {0: (xd, yd), 1: (yd, -xd), 2: (-xd, -yd), 3: (-yd, xd)}[n % 4]


def qspec(a, dims, n_halo=2):
    origin = tuple(n_halo if d in HORIZONTAL else 0 for d in dims)
    extent = tuple(s - 2 * o for s, o in zip(a.shape, origin))
    return gpubuf.QuantityHaloSpec(n_halo, a.strides, a.itemsize, a.shape, origin, extent, dims, np, a.dtype)


def edge(shape, dims, n_halo, west, interior):
    """Slices of the west (x start) edge, interior or halo, pace's convention."""
    out = []
    for s, d in zip(shape, dims):
        if d in ("x", "x_interface"):
            extra = 1 if d == "x_interface" and interior else 0
            out.append(slice(n_halo + extra, 2 * n_halo + extra) if interior else slice(0, n_halo))
        elif d in ("y", "y_interface"):
            out.append(slice(n_halo, s - n_halo))
        else:
            out.append(slice(0, s))
    return tuple(out)


DIMS = [(X, Y, Z), (Z, Y, X), (X, Y), ("x_interface", "y", Z), ("x", "y_interface")]


def field(shape, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def shape_of(dims):
    sizes = {"x": 9, "x_interface": 10, "y": 9, "y_interface": 10, "z": 3}
    return tuple(sizes[d] for d in dims)


@pytest.mark.parametrize("dims", DIMS)
@pytest.mark.parametrize("rotation", [0, 1, 2, 3, -1, 5])
def test_scalar_pack_unpack_match_numpy(backend, dims, rotation):
    a = field(shape_of(dims), 1)
    b = field(shape_of(dims), 2)
    q = qspec(a, dims)
    pack = edge(a.shape, dims, 2, True, True)
    unpack = edge(a.shape, dims, 2, True, False)
    specs = [gpubuf.HaloExchangeSpec(q, pack, rotation, unpack), gpubuf.HaloExchangeSpec(q, unpack, 0, pack)]
    t = gpubuf.HaloDataTransformer.get(np, specs, backend=backend)
    t.async_pack([a, b])
    sent = np.asarray(t.get_pack_buffer().to_numpy()).copy()
    want = np.concatenate([rotate_scalar(a[pack], dims, -rotation).ravel(), b[unpack].ravel()])
    np.testing.assert_array_equal(sent, want)
    assert t.buffer_size == want.size == specs[0].pack_buffer_size + specs[1].pack_buffer_size

    received = np.arange(sent.size, dtype=np.float64) + 0.5
    t.receive(received)
    c, d = a.copy(), b.copy()
    t.async_unpack([c, d])
    t.synchronize()
    n0 = a[unpack].size
    exp_c, exp_d = a.copy(), b.copy()
    exp_c[unpack] = received[:n0].reshape(a[unpack].shape)
    exp_d[pack] = received[n0:].reshape(b[pack].shape)
    np.testing.assert_array_equal(c, exp_c)
    np.testing.assert_array_equal(d, exp_d)


@pytest.mark.parametrize("dtype", ["float64", "complex64", "complex128"])
@pytest.mark.parametrize("rotation", [0, 1, 2, 3])
def test_vector_pack_signs_and_order(backend, rotation, dtype):
    """Rotated vector halos swap and negate components; a complex component negates both
    its real and imaginary parts."""
    dims = (X, Y, Z)
    ux, uy = field((9, 9, 3), 3, dtype), field((9, 9, 3), 4, dtype)
    q = qspec(ux, dims)
    east, east_halo = np.index_exp[5:7, 2:7, 0:3], np.index_exp[7:9, 2:7, 0:3]
    north, north_halo = np.index_exp[2:7, 5:7, 0:3], np.index_exp[2:7, 7:9, 0:3]
    sx = [gpubuf.HaloExchangeSpec(q, east, rotation, east_halo), gpubuf.HaloExchangeSpec(q, north, rotation, north_halo)]
    sy = [gpubuf.HaloExchangeSpec(q, north, rotation, north_halo), gpubuf.HaloExchangeSpec(q, east, rotation, east_halo)]
    t = gpubuf.HaloDataTransformer.get(np, sx, sy, backend=backend)
    t.async_pack([ux, ux], [uy, uy])
    sent = t.get_pack_buffer().to_numpy()
    parts = []
    for px, py_ in ((east, north), (north, east)):
        vx, vy = rotate_vector(ux[px], uy[py_], -rotation, dims)
        parts += [vx.ravel(), vy.ravel()]
    np.testing.assert_array_equal(sent, np.concatenate(parts))


def test_cpu_unpack_writes_numpy_memory_in_place():
    dims = (X, Y)
    a = field((9, 9), 5)
    q = qspec(a, dims)
    west_in, west_halo = edge(a.shape, dims, 2, True, True), edge(a.shape, dims, 2, True, False)
    t = gpubuf.HaloDataTransformer.get(np, [gpubuf.HaloExchangeSpec(q, west_in, 0, west_halo)])
    unpack = np.asarray(t.get_unpack_buffer())  # a view of the unpack buffer on the CPU
    unpack[:] = 7.0
    t.async_unpack([a])
    assert (a[west_halo] == 7.0).all()  # no copy back needed: the transformer wrote a's memory
    assert t.ready()
    t.finalize()
    assert not t.ready()
    with pytest.raises(gpubuf.InvalidArgumentError):
        t.get_pack_buffer()


def test_strided_arrays_are_adopted_with_their_strides(cpu):
    dims = (X, Y)
    big = field((9, 18), 6)
    view = big[:, ::2]
    q = qspec(view, dims)  # strides (144, 16) bytes
    s = gpubuf.HaloExchangeSpec(q, (slice(2, 4), slice(2, 7)), 0, (slice(0, 2), slice(2, 7)))
    t = gpubuf.HaloDataTransformer.get(np, [s], backend=cpu)
    t.async_pack([view])
    np.testing.assert_array_equal(t.get_pack_buffer().to_numpy(), view[2:4, 2:7].ravel())
    t.receive(np.full(10, 3.0))
    before = big.copy()
    t.async_unpack([view])
    assert (big[0:2, 4:14:2] == 3.0).all()
    mask = np.ones(big.shape, bool)
    mask[0:2, 4:14:2] = False
    np.testing.assert_array_equal(big[mask], before[mask])


def test_unaligned_array_packs_from_numpy_copy(backend):
    dims = (X, Y)
    a = field((9, 9), 11)
    raw = np.zeros(a.nbytes + 1, np.uint8)
    u = np.ndarray(a.shape, np.float64, buffer=raw, offset=1)  # data 1 byte past an element boundary
    u[...] = a
    q = qspec(u, dims)
    s = gpubuf.HaloExchangeSpec(q, (slice(2, 4), slice(2, 7)), 0, (slice(0, 2), slice(2, 7)))
    t = gpubuf.HaloDataTransformer.get(np, [s], backend=backend)
    t.async_pack([u])  # neither adopted nor read in place: numpy copies it aligned first
    np.testing.assert_array_equal(t.get_pack_buffer().to_numpy(), a[2:4, 2:7].ravel())


def test_readonly_array_packs_and_refuses_unpack(backend):
    dims = (X, Y)
    a = field((9, 9), 10)
    a.setflags(write=False)
    q = qspec(a, dims)
    s = gpubuf.HaloExchangeSpec(q, (slice(2, 4), slice(2, 7)), 0, (slice(0, 2), slice(2, 7)))
    t = gpubuf.HaloDataTransformer.get(np, [s], backend=backend)
    t.async_pack([a])  # copied, not adopted
    np.testing.assert_array_equal(t.get_pack_buffer().to_numpy(), a[2:4, 2:7].ravel())
    with pytest.raises(ValueError):
        t.async_unpack([a])
    np.testing.assert_array_equal(a, field((9, 9), 10))


def west_rows(backend, seed):
    """A 9 x 9 field and a transformer of one exchange (rows 2-3 into the halo rows 0-1)."""
    a = field((9, 9), seed)
    s = gpubuf.HaloExchangeSpec(qspec(a, (X, Y)), (slice(2, 4), slice(2, 7)), 0, (slice(0, 2), slice(2, 7)))
    return gpubuf.HaloDataTransformer.get(np, [s], backend=backend), a


def test_a_failed_unpack_writes_no_quantity(backend):
    # The read-only array is refused before the unpack runs: the writeable one, which the
    # unpack would write first, keeps its halo.
    dims = (X, Y)
    a, b = field((9, 9), 12), field((9, 9), 13)
    b.setflags(write=False)
    q = qspec(a, dims)
    s = gpubuf.HaloExchangeSpec(q, (slice(2, 4), slice(2, 7)), 0, (slice(0, 2), slice(2, 7)))
    s2 = gpubuf.HaloExchangeSpec(q, np.index_exp[5:7, 2:7], 0, np.index_exp[7:9, 2:7])
    t = gpubuf.HaloDataTransformer.get(np, [s, s2], backend=backend)
    t.receive(np.full(20, 5.0))
    with pytest.raises(gpubuf.InvalidArgumentError, match="read-only"):
        t.async_unpack([a, b])
    np.testing.assert_array_equal(a, field((9, 9), 12))
    np.testing.assert_array_equal(b, field((9, 9), 13))
    b = b.copy()  # still usable: the received data unpacks
    t.async_unpack([a, b])
    assert (a[0:2, 2:7] == 5.0).all() and (b[7:9, 2:7] == 5.0).all()


def test_overlapping_quantities_are_refused_on_every_backend(backend):
    # Two overlapping views of one array: adopted on the CPU (refused, as two handles of
    # one memory), copied elsewhere (the last copy written back won): refused on both.
    base = field((10, 9), 19)
    views = [base[0:9], base[1:10]]  # C-contiguous, the spec's strides
    s = gpubuf.HaloExchangeSpec(qspec(views[0], (X, Y)), (slice(2, 4), slice(2, 7)), 0, (slice(0, 2), slice(2, 7)))
    t = gpubuf.HaloDataTransformer.get(np, [s, s], backend=backend)
    t.receive(np.full(20, 4.0))
    before = base.copy()
    with pytest.raises(gpubuf.InvalidArgumentError):
        t.async_unpack(views)
    np.testing.assert_array_equal(base, before)


def test_strides_unlike_the_spec_are_refused_on_every_backend(backend):
    # A strided view of the spec's shape: adopted with its strides on the CPU, copied
    # contiguous elsewhere; refused on both, its strides being unlike the spec's.
    t, _ = west_rows(backend, 14)
    view = field((9, 18), 15)[:, ::2]
    with pytest.raises(gpubuf.InvalidArgumentError, match="byte"):
        t.async_pack([view])
    ro = view.copy()
    ro.setflags(write=False)  # copied on every backend, with the spec's strides: taken
    t.async_pack([ro])
    np.testing.assert_array_equal(t.get_pack_buffer().to_numpy(), ro[2:4, 2:7].ravel())


def test_buffer_written_through_its_ndbuffer_is_what_unpacks(backend):
    t, a = west_rows(backend, 16)
    ub = t.get_unpack_buffer()
    ub.array[...] = 1.0  # the mirror on OpenCL, the buffer itself on the CPU
    ub.ndbuffer.fill(7.0)
    np.testing.assert_array_equal(ub.to_numpy(), np.full(10, 7.0))
    np.testing.assert_array_equal(ub.array, np.full(10, 7.0))
    t.async_unpack([a])
    assert (a[0:2, 2:7] == 7.0).all()
    ub.array[...] = 2.0  # the mirror holds the data again
    t.async_unpack([a])
    assert (a[0:2, 2:7] == 2.0).all()


def test_assign_from_an_integer_slice(backend):
    t, _ = west_rows(backend, 17)
    b = t.get_unpack_buffer()
    for taken in (False, True):
        if taken:
            b.array  # noqa: B018  (on OpenCL the mirror then holds the data)
        b.assign_from(np.array([3.0 + taken]), 2)
        b.assign_from(np.float64(5.0 + taken), -1)
        got = b.to_numpy()
        assert got[2] == 3.0 + taken and got[-1] == 5.0 + taken
        with pytest.raises(gpubuf.ShapeMismatchError):
            b.assign_from(np.array([1.0, 2.0]), 2)


def test_shapes_past_any_size_are_refused_not_wrapped(backend):
    class Claims:  # an array-like whose shape has more elements than usize holds
        dtype = np.dtype("f8")
        shape = (2**63, 2)

    t, _ = west_rows(backend, 18)
    b = t.get_unpack_buffer()
    with pytest.raises(gpubuf.ShapeMismatchError):
        b.assign_from(Claims(), np.index_exp[0:0])
    with pytest.raises((gpubuf.ShapeMismatchError, gpubuf.InvalidArgumentError)):
        b.assign_to(Claims())
    with pytest.raises(gpubuf.ShapeMismatchError):
        b.assign_to(np.empty(4), np.index_exp[0:0], buffer_reshape=(2**32, 2**32))
    b.assign_from(np.arange(10.0))  # still usable
    np.testing.assert_array_equal(b.to_numpy(), np.arange(10.0))


def test_spec_numbers_past_any_size_say_so():
    u = np.zeros((9, 9))
    for n in (2**64, -1):
        with pytest.raises(gpubuf.InvalidArgumentError, match="negative or too large"):
            gpubuf.QuantityHaloSpec(n, u.strides, 8, u.shape, (2, 2), (5, 5), (X, Y))
        with pytest.raises(gpubuf.InvalidArgumentError, match="negative or too large"):
            gpubuf.QuantityHaloSpec(2, u.strides, n, u.shape, (2, 2), (5, 5), (X, Y))


def test_errors_are_python_exceptions(cpu):
    dims = (X, Y)
    a = field((9, 9), 7)
    q = qspec(a, dims)
    s = gpubuf.HaloExchangeSpec(q, edge(a.shape, dims, 2, True, True), 1, edge(a.shape, dims, 2, True, False))
    s2 = gpubuf.HaloExchangeSpec(q, np.index_exp[5:7, 2:7], 0, np.index_exp[7:9, 2:7])
    t = gpubuf.HaloDataTransformer.get(np, [s, s2], backend=cpu)
    with pytest.raises(gpubuf.InvalidArgumentError):
        t.async_pack([a])  # one array for two specs
    with pytest.raises(gpubuf.ShapeMismatchError):
        t.async_pack([a, np.zeros((8, 9))])
    with pytest.raises(gpubuf.InvalidArgumentError):
        t.async_pack([a, a[:8]])  # a view of a's memory adopted as another array
    with pytest.raises(gpubuf.DTypeMismatchError):
        t.async_pack([a, a.astype(np.float32)])
    with pytest.raises(gpubuf.InvalidArgumentError):
        t.async_pack([a, np.asfortranarray(a)])  # strides unlike the spec
    with pytest.raises(gpubuf.LengthMismatchError):
        t.receive(np.zeros(3))
    with pytest.raises(gpubuf.InvalidArgumentError):
        t.async_pack([a], [a])  # a scalar transformer takes no y quantities
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.HaloExchangeSpec(q, (slice(0, 2),), 0, (slice(0, 2), slice(0, 2)))
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.HaloExchangeSpec(q, (slice(0, 4, 2), slice(0, 2)), 0, (slice(0, 2), slice(0, 2)))
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.QuantityHaloSpec(2, (72, 7), 8, (9, 9), (2, 2), (5, 5), dims, np, np.float64)
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.HaloDataTransformer.get(np, [])
    with pytest.raises(NotImplementedError):
        gpubuf.HaloDataTransformer.get(object(), [s])
    # Still usable after the errors.
    t.async_pack([a, a])
    assert t.get_pack_buffer().size == 2 * 2 * 5
    with pytest.raises(gpubuf.InvalidPlanError):
        gpubuf.HaloDataTransformer.get(np, [s, s], backend=cpu).async_unpack([a, a])


def test_two_views_of_one_array_share_memory_are_refused(cpu):
    dims = (X, Y)
    a = field((9, 9), 8)
    q = qspec(a, dims)
    s = gpubuf.HaloExchangeSpec(q, (slice(2, 4), slice(2, 7)), 0, (slice(0, 2), slice(2, 7)))
    s2 = gpubuf.HaloExchangeSpec(q, np.index_exp[5:7, 2:7], 0, np.index_exp[7:9, 2:7])
    t = gpubuf.HaloDataTransformer.get(np, [s, s2], backend=cpu)
    other = a.view()  # another object, same memory and layout: taken as the same array
    t.async_pack([a, other])
    nd = gpubuf.NDBuffer.from_numpy(a, cpu)  # adopted separately, same bytes
    with pytest.raises(gpubuf.InvalidArgumentError):
        t.async_unpack([a, nd])


def import_pace_util():
    """pace-util if installed; its 0.9.0 release imports a module numpy 2 renamed."""
    import sys

    try:
        import numpy.lib._index_tricks_impl as tricks

        sys.modules.setdefault("numpy.lib.index_tricks", tricks)
    except ImportError:
        pass
    return pytest.importorskip("pace.util")


def boundary_slices(shape, dims, n_halo, boundary, interior):
    """The slices of one edge (``boundary`` west, east, south or north): the compute points
    next to it (interior, shifted one point inwards on interface axes) or the halo there,
    the whole compute domain along the other axes, as pace's boundary helpers."""
    axis_of = {"west": ("x", True), "east": ("x", False), "south": ("y", True), "north": ("y", False)}
    which, at_start = axis_of[boundary]
    out = []
    for s, d in zip(shape, dims):
        o = n_halo if d in HORIZONTAL else 0
        e = s - 2 * o
        if d in HORIZONTAL and d[0] == which:
            inset = 1 if d.endswith("_interface") else 0
            if interior:
                start = o + inset if at_start else o + e - inset - n_halo
                out.append(slice(start, start + n_halo))
            else:
                out.append(slice(o - n_halo, o) if at_start else slice(o + e, o + e + n_halo))
        else:
            out.append(slice(o, o + e))
    return tuple(out)


def random_exchange(seed):
    """A random exchange: dims (interface ones included), halo width, sizes, one to three
    arrays (vectors: x and y arrays) with distinct edges each, random rotations."""
    rng = np.random.default_rng(seed)
    dims = DIMS[rng.integers(len(DIMS))]
    n_halo = int(rng.integers(1, 4))
    n = int(rng.integers(n_halo + 2, 9))
    sizes = {"x": n, "y": n, "x_interface": n + 1, "y_interface": n + 1, "z": int(rng.integers(1, 5))}
    shape = tuple(sizes[d] + (2 * n_halo if d in HORIZONTAL else 0) for d in dims)
    count = int(rng.integers(1, 4))
    edges = []  # (array index, boundary, rotation)
    for k in range(count):
        for b in rng.permutation(["west", "east", "south", "north"])[: rng.integers(1, 5)]:
            edges.append((k, str(b), int(rng.integers(-1, 5))))
    return dims, n_halo, shape, count, edges, bool(rng.integers(2))


def pace_and_gpubuf(backend, seed):
    """The same random exchange in pace-util and in gpubuf: (pace transformer, gpubuf
    transformer, x arrays, y arrays or None, pace quantities x, y, dims)."""
    pace = import_pace_util()
    from pace.util import halo_data_transformer as hdt

    dims, n_halo, shape, count, edges, vector = random_exchange(seed)
    xs = [field(shape, 100 * seed + k) for k in range(count)]
    ys = [field(shape, 100 * seed + 50 + k) for k in range(count)] if vector else None
    q = qspec(xs[0], dims, n_halo)
    pq = hdt.QuantityHaloSpec(n_halo, xs[0].strides, 8, shape, q.origin, q.extent, dims, np, xs[0].dtype)
    sl = [(boundary_slices(shape, dims, n_halo, b, True), r, boundary_slices(shape, dims, n_halo, b, False))
          for _, b, r in edges]
    ours = [gpubuf.HaloExchangeSpec(q, p, r, u) for p, r, u in sl]
    theirs = [hdt.HaloExchangeSpec(pq, p, r, u) for p, r, u in sl]
    t = gpubuf.HaloDataTransformer.get(np, ours, ours if vector else None, backend=backend)
    ref = hdt.HaloDataTransformer.get(np, theirs, theirs if vector else None)
    qx = [xs[k] for k, _, _ in edges]
    qy = [ys[k] for k, _, _ in edges] if vector else None
    quant = lambda a: pace.Quantity(a, dims, "m", origin=q.origin, extent=q.extent)  # noqa: E731
    rx = [quant(a) for a in qx]
    ry = [quant(a) for a in qy] if vector else None
    return ref, t, qx, qy, rx, ry


@pytest.mark.parametrize("seed", range(12))
def test_pace_util_oracle_random(backend, seed):
    """Random exchanges (rotations, vectors, interface dims, several arrays and edges):
    the pack buffer byte for byte and the unpacked arrays equal pace-util's."""
    ref, t, qx, qy, rx, ry = pace_and_gpubuf(backend, seed)
    ref.async_pack(rx, ry)
    t.async_pack(qx, qy)
    sent = ref.get_pack_buffer().array
    np.testing.assert_array_equal(t.get_pack_buffer().to_numpy(), sent)
    assert sent.size == t.buffer_size

    received = np.random.default_rng(1000 + seed).standard_normal(sent.size)
    ref.get_unpack_buffer().array[:] = received
    t.receive(received)
    # pace unpacks into its quantities' arrays; gpubuf into copies of the same arrays.
    copies = {}  # one copy per distinct array: several edges unpack into one array
    mine_x = [copies.setdefault(id(a), a.copy()) for a in qx]
    mine_y = [copies.setdefault(id(a), a.copy()) for a in qy] if qy is not None else None
    ref.async_unpack(rx, ry)
    ref.synchronize()
    t.async_unpack(mine_x, mine_y)
    t.synchronize()
    for got, want in zip(mine_x + (mine_y or []), [r.data for r in rx + (ry or [])]):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dims", DIMS)
def test_pace_util_oracle(backend, dims):
    """Pack buffers byte for byte against pace-util's own CPU transformer."""
    pace = import_pace_util()
    from pace.util import halo_data_transformer as hdt

    ux, uy = field(shape_of(dims), 11), field(shape_of(dims), 12)
    q = qspec(ux, dims)
    origin, extent = q.origin, q.extent
    pq = hdt.QuantityHaloSpec(2, ux.strides, ux.itemsize, ux.shape, origin, extent, dims, np, ux.dtype)
    west, west_halo = edge(ux.shape, dims, 2, True, True), edge(ux.shape, dims, 2, True, False)
    qx = pace.Quantity(ux, dims, "m", origin=origin, extent=extent)
    qy = pace.Quantity(uy, dims, "m", origin=origin, extent=extent)
    for rotation in range(-1, 5):
        ref = hdt.HaloDataTransformer.get(np, [hdt.HaloExchangeSpec(pq, west, rotation, west_halo)])
        ref.async_pack([qx])
        t = gpubuf.HaloDataTransformer.get(
            np, [gpubuf.HaloExchangeSpec(q, west, rotation, west_halo)], backend=backend
        )
        t.async_pack([qx])  # a pace Quantity is taken through its .data
        np.testing.assert_array_equal(t.get_pack_buffer().to_numpy(), ref.get_pack_buffer().array)

        refv = hdt.HaloDataTransformer.get(
            np,
            [hdt.HaloExchangeSpec(pq, west, rotation, west_halo)],
            [hdt.HaloExchangeSpec(pq, west, rotation, west_halo)],
        )
        refv.async_pack([qx], [qy])
        sv = gpubuf.HaloExchangeSpec(q, west, rotation, west_halo)
        tv = gpubuf.HaloDataTransformer.get(np, [sv], [sv], backend=backend)
        tv.async_pack([ux], [uy])
        np.testing.assert_array_equal(tv.get_pack_buffer().to_numpy(), refv.get_pack_buffer().array)
