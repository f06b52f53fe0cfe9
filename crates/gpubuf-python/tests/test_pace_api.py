"""gpubuf under pace-util's own names: ``gpubuf.halo`` (pace's factory, pace's spec objects
taken as they are, buffers with pace's ``Buffer`` surface) and ``gpubuf.pace`` (pace-util's
HaloUpdater and communicators on gpubuf, with no change to pace code)."""

import copy

import numpy as np
import pytest

import gpubuf
import gpubuf.halo
import gpubuf.pace


def pace_util():
    """pace-util if installed (its 0.9.0 release needs numpy 2's renamed module mapped)."""
    gpubuf.pace._numpy2_compat()
    return pytest.importorskip("pace.util")


def west_exchange(hdt, shape=(9, 8, 3), rotation=1, dtype=np.float64):
    """A field and one pace-util exchange (its west edge into its west halo, rotated)."""
    u = np.arange(np.prod(shape), dtype=dtype).reshape(shape)
    spec = hdt.QuantityHaloSpec(2, u.strides, u.itemsize, u.shape, (2, 2, 0), (5, 4, 3), ("x", "y", "z"), np, u.dtype)
    ex = hdt.HaloExchangeSpec(spec, np.index_exp[2:4, 2:6, 0:3], rotation, np.index_exp[0:2, 2:6, 0:3])
    return u, ex


def test_gpubuf_halo_names():
    assert gpubuf.halo.HaloDataTransformer is gpubuf.HaloDataTransformer
    assert gpubuf.halo.QuantityHaloSpec is gpubuf.QuantityHaloSpec
    assert gpubuf.halo.HaloExchangeSpec is gpubuf.HaloExchangeSpec
    assert gpubuf.halo.Buffer is gpubuf.HaloBuffer


def test_pace_spec_objects_accepted(backend):
    """pace's own QuantityHaloSpec/HaloExchangeSpec dataclasses, scalar and vector: the
    same pack buffer as pace-util's transformer, and the same unpacked arrays."""
    hdt = pace_util().halo_data_transformer
    u, ex = west_exchange(hdt)
    v = u[::-1].copy()
    for ys, qy in ((None, None), ([ex], [v])):
        ref = hdt.HaloDataTransformer.get(np, [ex], ys)
        t = gpubuf.halo.HaloDataTransformer.get(np, [ex], ys, backend=backend)
        quant = lambda a: pace_util().Quantity(a, ("x", "y", "z"), "m", origin=(2, 2, 0), extent=(5, 4, 3))  # noqa
        ref.async_pack([quant(u)], None if qy is None else [quant(v)])
        t.async_pack([u], qy)
        np.testing.assert_array_equal(t.get_pack_buffer().array, ref.get_pack_buffer().array)
        mine, theirs = u.copy(), u.copy()
        mine_y, theirs_y = v.copy(), v.copy()
        t.get_unpack_buffer().assign_from(t.get_pack_buffer().array)
        ref.get_unpack_buffer().assign_from(ref.get_pack_buffer().array)
        t.async_unpack([mine], None if qy is None else [mine_y])
        t.synchronize()
        ref.async_unpack([quant(theirs)], None if qy is None else [quant(theirs_y)])
        ref.synchronize()
        np.testing.assert_array_equal(mine, theirs)
        np.testing.assert_array_equal(mine_y, theirs_y)
    # A pace QuantityHaloSpec inside gpubuf's HaloExchangeSpec too.
    mixed = gpubuf.HaloExchangeSpec(ex.specification, ex.pack_slices, 1, ex.unpack_slices)
    assert mixed.pack_buffer_size == ex.pack_buffer_size


def test_duck_typed_spec_errors(cpu):
    hdt = pace_util().halo_data_transformer
    u, ex = west_exchange(hdt)
    with pytest.raises(gpubuf.InvalidArgumentError, match="pack_slices"):
        gpubuf.halo.HaloDataTransformer.get(np, [object()], backend=cpu)
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.halo.HaloDataTransformer.get(np, [42], backend=cpu)
    bad = copy.copy(ex)
    bad.specification = copy.copy(ex.specification)
    bad.specification.strides = (7, 8, 8)  # not multiples of the itemsize
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.halo.HaloDataTransformer.get(np, [bad], backend=cpu)
    bad.specification = copy.copy(ex.specification)
    bad.specification.dtype = np.clongdouble
    with pytest.raises(gpubuf.GpubufError):
        gpubuf.halo.HaloDataTransformer.get(np, [bad], backend=cpu)


def test_bad_quantities_raise_gpubuf_errors(backend):
    hdt = pace_util().halo_data_transformer
    u, ex = west_exchange(hdt, rotation=0)
    t = gpubuf.halo.HaloDataTransformer.get(np, [ex], backend=backend)
    with pytest.raises(gpubuf.ShapeMismatchError):
        t.async_pack([np.zeros((9, 8, 4))])
    with pytest.raises(gpubuf.DTypeMismatchError):
        t.async_pack([u.astype(np.float32)])
    with pytest.raises(gpubuf.InvalidArgumentError):
        t.async_pack(["not an array"])
    t.async_pack([u])  # still usable
    np.testing.assert_array_equal(t.get_pack_buffer().to_numpy(), u[2:4, 2:6].ravel())


def test_cpu_array_is_the_buffers_memory(cpu):
    """On the CPU ``.array`` is a view: it shares memory with the buffer, a pack shows in
    an ``.array`` taken before it, and what is written into the unpack buffer's ``.array``
    is what the unpack reads."""
    hdt = pace_util().halo_data_transformer
    u, ex = west_exchange(hdt, rotation=0)
    t = gpubuf.halo.HaloDataTransformer.get(np, [ex], backend=cpu)
    sent = t.get_pack_buffer().array
    assert np.shares_memory(sent, t.get_pack_buffer().array)
    assert np.shares_memory(sent, np.asarray(t.get_pack_buffer().ndbuffer))
    t.async_pack([u])
    t.synchronize()
    np.testing.assert_array_equal(sent, u[2:4, 2:6].ravel())
    recv = t.get_unpack_buffer().array
    recv[:] = -np.arange(recv.size)
    t.async_unpack([u])
    t.synchronize()
    np.testing.assert_array_equal(u[0:2, 2:6].ravel(), -np.arange(recv.size))


def test_array_is_coherent(backend):
    """On every backend: ``.array`` of the pack buffer after a pack is the packed data, and
    data written into ``.array`` of the unpack buffer (as MPI's Irecv does, taken before
    the pack) is what the unpack writes; OpenCL hands out one host mirror each time."""
    hdt = pace_util().halo_data_transformer
    u, ex = west_exchange(hdt, rotation=0)
    t = gpubuf.halo.HaloDataTransformer.get(np, [ex], backend=backend)
    for step in range(3):
        recv = t.get_unpack_buffer().array  # posted before the pack, as HaloUpdater does
        u[2:4, 2:6] = step
        t.async_pack([u])
        np.testing.assert_array_equal(t.get_pack_buffer().array, np.full(24, float(step)))
        recv[:] = 10.0 * step + np.arange(24)
        t.async_unpack([u])
        t.synchronize()
        np.testing.assert_array_equal(u[0:2, 2:6].ravel(), 10.0 * step + np.arange(24))
    if backend.name == "opencl":
        assert t.get_pack_buffer().array is t.get_pack_buffer().array


def test_assign_from_and_assign_to(backend):
    hdt = pace_util().halo_data_transformer
    u, ex = west_exchange(hdt, rotation=0)
    t = gpubuf.halo.HaloDataTransformer.get(np, [ex], backend=backend)
    buf = t.get_unpack_buffer()
    buf.assign_from(np.arange(24.0))
    out = np.empty(24)
    buf.assign_to(out)
    np.testing.assert_array_equal(out, np.arange(24.0))
    buf.assign_from(np.full((2, 3), -1.0), buffer_slice=np.index_exp[6:12])
    part = np.empty((2, 3))
    buf.assign_to(part, buffer_slice=np.index_exp[6:12], buffer_reshape=(2, 3))
    np.testing.assert_array_equal(part, -1.0)
    t.async_unpack([u])
    t.synchronize()
    want = np.arange(24.0)
    want[6:12] = -1.0
    np.testing.assert_array_equal(u[0:2, 2:6].ravel(), want)


def test_buffer_bad_input(backend):
    hdt = pace_util().halo_data_transformer
    u, ex = west_exchange(hdt)
    buf = gpubuf.halo.HaloDataTransformer.get(np, [ex], backend=backend).get_unpack_buffer()
    with pytest.raises(gpubuf.ShapeMismatchError):
        buf.assign_from(np.zeros(23))
    with pytest.raises(gpubuf.DTypeMismatchError):
        buf.assign_from(np.zeros(24, np.float32))
    with pytest.raises(gpubuf.InvalidArgumentError):
        buf.assign_from("abc")
    with pytest.raises(gpubuf.InvalidArgumentError):
        buf.assign_from({"a": 1})
    with pytest.raises(gpubuf.ShapeMismatchError):
        buf.assign_to(np.zeros(25))
    with pytest.raises(gpubuf.ShapeMismatchError):
        buf.assign_to(np.zeros((4, 6)), buffer_reshape=(6, 4))
    with pytest.raises(gpubuf.DTypeMismatchError):
        buf.assign_to(np.zeros(24, np.int32))
    ro = np.zeros(24)
    ro.flags.writeable = False
    with pytest.raises(gpubuf.InvalidArgumentError):
        buf.assign_to(ro)
    with pytest.raises(gpubuf.InvalidArgumentError):
        buf.assign_to([0.0] * 24)
    assert buf.size == 24  # still usable
    buf.assign_from(np.ones(24))


def test_default_backend(backend):
    hdt = pace_util().halo_data_transformer
    u, ex = west_exchange(hdt)
    before = gpubuf.halo.set_default_backend(backend)
    try:
        assert gpubuf.halo.get_default_backend().same_device(backend)
        assert gpubuf.halo.HaloDataTransformer.get(np, [ex]).backend.same_device(backend)
    finally:
        gpubuf.halo.set_default_backend(before)
    assert gpubuf.halo.get_default_backend() is None
    assert gpubuf.halo.HaloDataTransformer.get(np, [ex]).backend.name == "cpu"
    with pytest.raises(NotImplementedError):
        gpubuf.halo.HaloDataTransformer.get(object(), [ex])


def test_pace_spec_without_a_dtype_is_float64(backend):
    # pace's dataclass defaults nothing, but its transformer takes dtype=None (numpy's
    # float64), as gpubuf's own spec does.
    hdt = pace_util().halo_data_transformer
    u, ex = west_exchange(hdt)
    spec = ex.specification
    plain = hdt.QuantityHaloSpec(
        spec.n_points, spec.strides, spec.itemsize, spec.shape, spec.origin, spec.extent, spec.dims, np, None
    )
    untyped = hdt.HaloExchangeSpec(plain, ex.pack_slices, ex.pack_clockwise_rotation, ex.unpack_slices)
    t = gpubuf.halo.HaloDataTransformer.get(np, [untyped], backend=backend)
    assert t.dtype == np.float64
    ref = gpubuf.halo.HaloDataTransformer.get(np, [ex], backend=backend)  # dtype float64
    t.async_pack([u])
    ref.async_pack([u])
    np.testing.assert_array_equal(t.get_pack_buffer().to_numpy(), ref.get_pack_buffer().to_numpy())


def test_install_uninstall_restores():
    pace = pace_util()
    hdt, pbuf = pace.halo_data_transformer, pace.buffer
    get, push = hdt.HaloDataTransformer.__dict__["get"], pbuf.Buffer.__dict__["push_to_cache"]
    assert not gpubuf.pace.is_installed()
    gpubuf.pace.install("cpu")
    try:
        patched = hdt.HaloDataTransformer.__dict__["get"]
        assert patched is not get
        gpubuf.pace.install("cpu")  # twice: the same patch
        assert hdt.HaloDataTransformer.__dict__["get"] is patched
        u, ex = west_exchange(hdt)
        # pace's own name, imported before install, builds gpubuf transformers.
        t = pace.halo_updater.HaloDataTransformer.get(np, [ex])
        assert isinstance(t, gpubuf.HaloDataTransformer)
        pbuf.Buffer.push_to_cache(t.get_pack_buffer())  # left to the transformer
    finally:
        gpubuf.pace.uninstall()
    assert hdt.HaloDataTransformer.__dict__["get"] is get
    assert pbuf.Buffer.__dict__["push_to_cache"] is push
    gpubuf.pace.uninstall()  # nothing to undo
    assert hdt.HaloDataTransformer.__dict__["get"] is get
    with gpubuf.pace.installed("cpu"):
        assert gpubuf.pace.is_installed()
    assert not gpubuf.pace.is_installed()
    assert hdt.HaloDataTransformer.__dict__["get"] is get
    u, ex = west_exchange(hdt)
    assert not isinstance(hdt.HaloDataTransformer.get(np, [ex]), gpubuf.HaloDataTransformer)


def test_installed_restores_after_an_uninstall_inside_its_block():
    pace = pace_util()
    get = pace.halo_data_transformer.HaloDataTransformer.__dict__["get"]
    cpu = gpubuf.Backend("cpu")
    gpubuf.pace.install(cpu)
    try:
        with gpubuf.pace.installed(None):
            gpubuf.pace.uninstall()
        # As before the block: installed, on the backend installed then.
        assert gpubuf.pace.is_installed()
        assert gpubuf.pace._state["backend"] is cpu
    finally:
        gpubuf.pace.uninstall()
    with gpubuf.pace.installed("cpu"):
        gpubuf.pace.uninstall()
    assert not gpubuf.pace.is_installed()
    assert pace.halo_data_transformer.HaloDataTransformer.__dict__["get"] is get


def cube_exchange(pace, vector, seed):
    """Six ranks of a cubed sphere (one per tile, single-process DummyComm): random fields,
    a scalar (or vector) halo update through pace's communicators and HaloUpdater."""
    partitioner = pace.CubedSpherePartitioner(pace.TilePartitioner((1, 1)))
    shared = {}
    comms = [
        pace.CubedSphereCommunicator(pace.testing.DummyComm(rank=r, total_ranks=6, buffer_dict=shared), partitioner)
        for r in range(6)
    ]
    rng = np.random.default_rng(seed)
    n, nz, h = 6, 3, 3
    dims = ("x", "y", "z")
    make = lambda: pace.Quantity(rng.standard_normal((n + 2 * h, n + 2 * h, nz)), dims, "m",  # noqa
                                 origin=(h, h, 0), extent=(n, n, nz))
    xs = [make() for _ in comms]
    ys = [make() for _ in comms]
    if vector:
        reqs = [c.start_vector_halo_update(x, y, n_points=h) for c, x, y in zip(comms, xs, ys)]
    else:
        reqs = [c.start_halo_update([x, y], n_points=h) for c, x, y in zip(comms, xs, ys)]
    for r in reqs:
        r.wait()
    return [q.data for q in xs + ys]


@pytest.mark.parametrize("vector", [False, True])
def test_pace_halo_updater_on_gpubuf(backend, vector):
    """pace's CubedSphereCommunicator (HaloUpdater underneath) under install() gives the
    arrays it gives on pace-util's own transformers, and its transformers are gpubuf's."""
    pace = pace_util()
    want = cube_exchange(pace, vector, seed=7)
    calls = []
    with gpubuf.pace.installed(backend):
        get = pace.halo_data_transformer.HaloDataTransformer.get

        def spy(*args, **kwargs):
            t = get(*args, **kwargs)
            calls.append(t)
            return t

        pace.halo_data_transformer.HaloDataTransformer.get = staticmethod(spy)
        try:
            got = cube_exchange(pace, vector, seed=7)
        finally:
            pace.halo_data_transformer.HaloDataTransformer.get = staticmethod(get)
    assert calls and all(isinstance(t, gpubuf.HaloDataTransformer) for t in calls)
    assert all(t.backend.same_device(backend) for t in calls)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_pytest_plugin_installs_for_the_session(tmp_path):
    """``pytest -p gpubuf.pace_plugin``: installed (with GPUBUF_PACE_BACKEND's backend)
    while the tests run, pace's factory then gpubuf's; uninstalled at the end."""
    import os
    import subprocess
    import sys

    pace_util()
    (tmp_path / "test_inner.py").write_text(
        "import numpy as np\n"
        "import gpubuf, gpubuf.pace\n"
        "from pace.util import halo_data_transformer as hdt\n"
        "def test_on_gpubuf():\n"
        "    assert gpubuf.pace.is_installed()\n"
        "    u = np.zeros((6, 6))\n"
        "    q = hdt.QuantityHaloSpec(1, u.strides, 8, u.shape, (1, 1), (4, 4), ('x', 'y'), np, u.dtype)\n"
        "    t = hdt.HaloDataTransformer.get(np, [hdt.HaloExchangeSpec(q, np.index_exp[1:2, 1:5], 0, np.index_exp[0:1, 1:5])])\n"
        "    assert isinstance(t, gpubuf.HaloDataTransformer) and t.backend.name == 'cpu'\n"
    )
    env = dict(os.environ, GPUBUF_PACE_BACKEND="cpu")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "gpubuf.pace_plugin", "-p", "no:cacheprovider", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
    assert not gpubuf.pace.is_installed()


def test_without_pace_util_install_raises_import_error(monkeypatch):
    """``import gpubuf.pace`` needs no pace-util; ``install()`` says it is missing."""
    import importlib
    import sys

    for name in ("pace", "pace.util", "pace.util.buffer", "pace.util.halo_data_transformer"):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    monkeypatch.setattr(gpubuf, "pace", gpubuf.pace)  # the package's attributes come back too
    monkeypatch.setattr(gpubuf, "pace_plugin", gpubuf.pace_plugin)
    monkeypatch.delitem(sys.modules, "gpubuf.pace")
    monkeypatch.delitem(sys.modules, "gpubuf.pace_plugin")
    fresh = importlib.import_module("gpubuf.pace")
    with pytest.raises(ImportError, match="needs pace-util"):
        fresh.install("cpu")
    assert not fresh.is_installed()
