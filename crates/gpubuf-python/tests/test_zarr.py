"""`gpubuf.zarr`: real local-directory stores written by zarr-python with numpy, read and
written through `buffer_prototype(backend)` on the CPU and OpenCL, compared with numpy;
the Buffer / NDBuffer API itself; the native basic indexing it stands on."""

import pathlib
import re

import numpy as np
import pytest

import gpubuf

zarr = pytest.importorskip("zarr")
gz = pytest.importorskip("gpubuf.zarr")
from zarr.codecs import BloscCodec  # noqa: E402
from zarr.core.buffer import cpu as zcpu  # noqa: E402

# (dtype, shape, chunks, compressors: "auto" is zarr's default, zstd)
CASES = [
    ("float32", (37, 300), (10, 128), "auto"),  # rows of 64 and more: the row gather
    ("int32", (1000,), (128,), "auto"),
    ("uint8", (9, 10, 11), (4, 3, 5), BloscCodec(cname="lz4")),
    ("float64", (7, 8, 9), (3, 5, 4), None),
]
IDS = [f"{c[0]}-{len(c[1])}d" for c in CASES]

# Basic selections per dimensionality (zarr takes steps > 0).
SELECTIONS = {
    1: [(slice(None),), (slice(5, 900),), (slice(3, 999, 7),), (17,), (slice(127, 129),)],
    2: [(slice(None),) * 2, (slice(3, 30), slice(5, 290)), (slice(1, 37, 4), slice(None, None, 3)), (4, slice(2, 40))],
    3: [(slice(None),) * 3, (slice(1, 6), slice(2, 9), slice(3, 10)), (2, slice(None, None, 2), 7), (slice(0, 9, 3), 1)],
}


def sample(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.normal(size=shape).astype(dtype)
    return rng.integers(0, 120, size=shape).astype(dtype)


def make(path, dtype, shape, chunks, compressors="auto", fill_value=None, data=True):
    z = zarr.create_array(
        str(path), shape=shape, chunks=chunks, dtype=dtype, compressors=compressors, fill_value=fill_value
    )
    if data:
        z[...] = sample(dtype, shape)
    return z


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_regions_read_through_the_prototype_equal_numpy(backend, tmp_path, case):
    dtype, shape, chunks, comp = case
    z = make(tmp_path / "a.zarr", dtype, shape, chunks, comp)
    assert sum(p.is_file() for p in (tmp_path / "a.zarr" / "c").rglob("*")) > 3  # several chunks
    ref = z[...]
    proto = gz.buffer_prototype(backend)
    for sel in SELECTIONS[len(shape)]:
        got = z.get_basic_selection(sel, prototype=proto)
        want = ref[sel]
        if np.ndim(want) == 0:
            assert got == want
            continue
        assert isinstance(got, gpubuf.NDBuffer), sel
        assert got.backend.name == backend.name
        assert got.dtype == np.dtype(dtype) and got.shape == want.shape
        np.testing.assert_array_equal(got.to_numpy(), want, err_msg=str(sel))
    # Orthogonal selections go through the same out[region] = chunk path.
    sel = tuple([0, 2, 3][: min(3, n)] for n in shape)
    got = z.get_orthogonal_selection(sel, prototype=proto)
    np.testing.assert_array_equal(got.to_numpy(), z.get_orthogonal_selection(sel))


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("stored", [True, False], ids=["stored", "missing"])
def test_writes_through_the_prototype_read_back_with_numpy(backend, tmp_path, case, stored):
    # Stored chunks are decoded and merged on the host; missing ones are made on the
    # device (create with the fill value) and the value's regions copied or uploaded in.
    dtype, shape, chunks, comp = case
    z = make(tmp_path / "w.zarr", dtype, shape, chunks, comp, data=stored)
    model = z[...]
    proto = gz.buffer_prototype(backend)
    sels = SELECTIONS[len(shape)]
    for k, sel in enumerate(sels[1:] + sels[:1]):
        region = model[sel]
        value = sample(dtype, np.shape(region), seed=k + 1)
        if np.ndim(region) == 0:
            z.set_basic_selection(sel, value, prototype=proto)
        elif stored and k % 2 == 0:
            # A device array, as the prototype's NDBuffer holds it.
            z.set_basic_selection(sel, gpubuf.NDBuffer.from_numpy(value, proto.nd_buffer.backend), prototype=proto)
        else:
            z.set_basic_selection(sel, value, prototype=proto)
        model[sel] = value
        np.testing.assert_array_equal(z[...], model, err_msg=str(sel))
    # A scalar written over a region (partial chunks).
    sel = sels[1]
    z.set_basic_selection(sel, 7, prototype=proto)
    model[sel] = 7
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "w.zarr"), mode="r")[...], model)


def test_fill_value_and_missing_chunks(backend, tmp_path):
    proto = gz.buffer_prototype(backend)
    z = make(tmp_path / "f.zarr", "float32", (30, 20), (8, 8), fill_value=-1.5, data=False)
    z[9:14, 3:7] = 2.0  # one chunk written, the others missing
    assert z.nchunks_initialized == 1
    got = z.get_basic_selection((slice(None), slice(None)), prototype=proto).to_numpy()
    want = np.full((30, 20), -1.5, np.float32)
    want[9:14, 3:7] = 2.0
    np.testing.assert_array_equal(got, want)
    # Writing the fill value over the whole chunk through the prototype removes it
    # (all_equal on a device chunk), writing elsewhere creates chunks on the device.
    z.set_basic_selection((slice(8, 16), slice(0, 8)), np.full((8, 8), -1.5, np.float32), prototype=proto)
    assert z.nchunks_initialized == 0
    z.set_basic_selection((slice(25, 30), slice(17, 20)), np.ones((5, 3), np.float32), prototype=proto)
    want[9:14, 3:7] = -1.5
    want[25:30, 17:20] = 1
    np.testing.assert_array_equal(z[...], want)
    # NaN fill values read back as NaN; NaN chunks are empty (NaN equals NaN).
    n = make(tmp_path / "n.zarr", "float64", (10,), (4,), fill_value=np.nan, data=False)
    assert np.isnan(n.get_basic_selection(slice(None), prototype=proto).to_numpy()).all()
    n.set_basic_selection(slice(0, 4), np.full(4, np.nan), prototype=proto)
    assert n.nchunks_initialized == 0


@pytest.mark.filterwarnings("ignore:The data type")
@pytest.mark.parametrize("dtype", [">f8", "<U5", "S3", ">i2", [("a", "i4"), ("b", "f8")]])
def test_dtypes_gpubuf_lacks_stay_on_the_host(backend, tmp_path, dtype):
    """The documented fallback: arrays of a dtype gpubuf has no element type for are
    numpy arrays inside the prototype, read and written like any other."""
    dt = np.dtype(dtype)
    ref = np.zeros(10, dtype=dt)
    ref[3:7] = np.ones(1, dtype=dt)[0] if dt.kind != "U" else "abc"
    z = zarr.create_array(str(tmp_path / "h.zarr"), shape=(10,), chunks=(4,), dtype=dt)
    proto = gz.buffer_prototype(backend)
    z.set_basic_selection(slice(None), ref, prototype=proto)
    got = z.get_basic_selection(slice(1, 9), prototype=proto)
    assert isinstance(got, np.ndarray) and got.dtype == dt
    np.testing.assert_array_equal(got, ref[1:9])
    np.testing.assert_array_equal(z[...], ref)  # what the store holds, read by plain zarr
    assert not proto.nd_buffer.create(shape=(2,), dtype=dt).on_device()


def test_buffer_prototype_arguments(backend):
    p = gz.buffer_prototype(backend.name)
    assert p is gz.buffer_prototype(backend.name.upper())
    assert isinstance(p, zarr.core.buffer.BufferPrototype)
    q = gz.buffer_prototype(backend)
    assert q is gz.buffer_prototype(backend) and q.nd_buffer.backend is backend
    assert issubclass(q.buffer, zarr.core.buffer.Buffer) and issubclass(q.nd_buffer, zarr.core.buffer.NDBuffer)
    with pytest.raises(gpubuf.InvalidArgumentError):
        gz.buffer_prototype("nope")
    with pytest.raises(gpubuf.InvalidArgumentError):
        gz.buffer_prototype(3)
    with pytest.raises(gpubuf.InvalidArgumentError):
        gz.NDBuffer.create(shape=(2,), dtype="float32")  # the base class has no backend


def test_named_prototypes_pickle(backend):
    import pickle

    p = gz.buffer_prototype(backend.name)
    assert pickle.loads(pickle.dumps(p)) == p
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        pickle.dumps(gz.buffer_prototype(backend))


@pytest.mark.skipif("cuda" in gpubuf.available_backends(), reason="CUDA can run here")
def test_unavailable_backend():
    with pytest.raises(gpubuf.BackendUnavailableError):
        gz.buffer_prototype("cuda")


def test_buffer_api(backend):
    B = gz.buffer_prototype(backend).buffer
    host = B.from_bytes(b"abcdef")
    assert not host.on_device() and len(host) == 6 and host.to_bytes() == b"abcdef"
    assert len(B.create_zero_length()) == 0
    dev = B(gpubuf.NDBuffer.from_numpy(np.frombuffer(b"012345", "B"), B.backend))
    assert dev.on_device() and len(dev) == 6
    np.testing.assert_array_equal(dev.as_numpy_array(), np.frombuffer(b"012345", "B"))
    assert dev[1:4].to_bytes() == b"123" and dev[1:4].on_device()
    assert host[2:5].to_bytes() == b"cde"
    dev[0:2] = np.frombuffer(b"xy", "B")
    dev[4:6] = B.from_bytes(b"zw")
    assert dev.to_bytes() == b"xy23zw"
    h2 = B.from_bytes(bytearray(b"abcdef"))
    h2[0:3] = dev[0:3]  # a device slice into host bytes
    assert h2.to_bytes() == b"xy2def"
    with pytest.raises((TypeError, ValueError)):
        dev[0:4:2] = np.zeros(2, "B")  # zarr buffers take contiguous slices only
    assert (host + B.from_bytes(b"gh")).to_bytes() == b"abcdefgh"
    assert not (host + B.from_bytes(b"gh")).on_device()
    mixed = host.combine([dev, zcpu.Buffer.from_bytes(b"!")])
    assert mixed.on_device() and mixed.to_bytes() == b"abcdefxy23zw!"
    assert (dev + host).to_bytes() == b"xy23zwabcdef"
    assert B.from_buffer(zcpu.Buffer.from_bytes(b"q")).to_bytes() == b"q"
    assert B.from_buffer(dev).as_array_like() is dev.as_array_like()
    assert dev == B.from_bytes(b"xy23zw") and dev != host
    with pytest.raises(ValueError):
        B(np.zeros((2, 2), "B"))


def test_ndbuffer_api(backend):
    N = gz.buffer_prototype(backend).nd_buffer
    a = N.create(shape=(4, 5), dtype="float32", fill_value=2.5)
    assert a.on_device() and isinstance(a.as_ndarray_like(), gpubuf.NDBuffer)
    assert a.shape == (4, 5) and a.dtype == np.float32 and len(a) == 4
    assert a.all_equal(2.5) and not a.all_equal(2.0) and not a.all_equal(None)
    f = N.create(shape=(3, 4), dtype="int32", order="F", fill_value=0)
    assert f.as_ndarray_like().strides == (4, 12) and f.all_equal(0)
    e = N.empty((2, 3), "float64")
    assert e.shape == (2, 3) and e.on_device()
    active = N.pool.active_blocks  # device arrays come from the prototype's pool
    x = N.empty((100,), "float32")
    assert N.pool.active_blocks == active + 1
    del x
    assert N.pool.active_blocks == active
    ref = np.arange(20, dtype=np.float32).reshape(4, 5)
    b = N.from_numpy_array(ref)
    assert b.on_device()
    np.testing.assert_array_equal(b.as_numpy_array(), ref)
    h = N.from_ndarray_like(ref)
    assert not h.on_device() and h.as_ndarray_like() is ref
    assert h.to_device().on_device()
    g = N.from_ndarray_like(b.as_ndarray_like())
    assert g.as_ndarray_like() is b.as_ndarray_like()
    np.testing.assert_array_equal(b.reshape((5, 4)).as_numpy_array(), ref.reshape(5, 4))
    np.testing.assert_array_equal(b.reshape(-1).as_numpy_array(), ref.ravel())
    np.testing.assert_array_equal(b.transpose((1, 0)).as_numpy_array(), ref.T)
    np.testing.assert_array_equal(b.transpose(None).as_numpy_array(), ref.T)
    np.testing.assert_array_equal(b[1:3, ::2].as_numpy_array(), ref[1:3, ::2])
    assert b[2, 3].as_scalar() == ref[2, 3]
    c = b.copy()
    c[0] = 100
    assert b.as_numpy_array()[0, 0] == 0 and c.as_numpy_array()[0, 0] == 100
    c[1:3, 1:4] = b[0:2, 2:5]  # device to device
    c[3, :] = np.arange(5)  # host to device
    c[2, 0] = zcpu.NDBuffer.from_numpy_array(np.float32(-1))  # another prototype's buffer
    m = ref.copy()
    m[0] = 100
    m[1:3, 1:4] = ref[0:2, 2:5]
    m[3, :] = np.arange(5)
    m[2, 0] = -1
    np.testing.assert_array_equal(c.as_numpy_array(), m)
    h2 = N.from_ndarray_like(ref.copy())
    h2[0:2, 0:2] = b[2:4, 3:5]  # device value into a host buffer
    np.testing.assert_array_equal(h2.as_numpy_array()[0:2, 0:2], ref[2:4, 3:5])
    assert b.astype("float64").dtype == np.float64 and b.astype("float64").on_device()
    b.fill(3)
    assert b.all_equal(3)
    assert isinstance(N.create(shape=(2,), dtype="<U3").as_ndarray_like(), np.ndarray)
    with pytest.raises(gpubuf.InvalidArgumentError):
        N.empty((2,), "float32", order="K")


def test_all_equal_follows_zarr(backend):
    N = gz.buffer_prototype(backend).nd_buffer
    nan = N.from_numpy_array(np.array([np.nan, np.nan], np.float32))
    assert nan.all_equal(np.nan) and not nan.all_equal(np.nan, equal_nan=False)
    zero = N.from_numpy_array(np.array([0.0, -0.0]))
    assert not zero.all_equal(0.0) and not zero.all_equal(-0.0)
    assert N.from_numpy_array(np.zeros(3)).all_equal(0.0)
    assert not N.from_numpy_array(np.full(3, -0.0)).all_equal(0.0)
    assert N.from_numpy_array(np.array([1, 1], np.int32)).all_equal(1)
    assert N.create(shape=(0,), dtype="float32").all_equal(5.0)
    # The first element is checked first; the rest still decides when it matches.
    last = np.zeros((3, 4))
    last[2, 3] = 1
    assert not N.from_numpy_array(last).all_equal(0) and N.from_numpy_array(last)[:2].all_equal(0)
    assert not N.from_numpy_array(last)[::-1, ::-1].all_equal(0)
    assert N.from_numpy_array(last)[::-1, ::-1].all_equal(0) is False


def test_native_indexing(backend):
    ref = np.arange(120, dtype=np.float64).reshape(4, 5, 6)
    a = gpubuf.NDBuffer.from_numpy(ref, backend)
    keys = [1, -1, (1, 2), (slice(None, None, -1),), (Ellipsis, slice(1, 5, 2)), (None, 1, Ellipsis, -2),
            (slice(0, 4, 3), slice(4, 0, -2), slice(None, None, 4)), (slice(2, 2),), (slice(-100, 100),),
            (slice(None, None, -(2**100)),), (slice(2**100, None, 2**70),), (slice(1, 3), slice(1, 2), None)]
    for k in keys:
        np.testing.assert_array_equal(a[k].to_numpy(), ref[k], err_msg=str(k))
    assert a[1, 2, 3].shape == () and a[1, 2, 3].to_numpy() == ref[1, 2, 3]
    for k in [[0, 1], np.array([0]), True, (1, [4, 0, 4])]:  # advanced keys: numpy's values, copied
        np.testing.assert_array_equal(a[k].to_numpy(), ref[k], err_msg=str(k))
    for bad, err in [(4, gpubuf.OutOfBoundsError), ((0, 0, -7), gpubuf.OutOfBoundsError),
                     ((0, 0, 0, 0), gpubuf.OutOfBoundsError),
                     ((Ellipsis, Ellipsis), gpubuf.InvalidArgumentError), (slice(0, 3, 0), gpubuf.InvalidArgumentError),
                     ("x", gpubuf.InvalidArgumentError), (2**80, gpubuf.OutOfBoundsError),
                     (slice(0, 2.5), gpubuf.InvalidArgumentError), (1.0, gpubuf.InvalidArgumentError)]:
        with pytest.raises(err):
            a[bad]
    b, m = a.copy(), ref.copy()
    for k, v in [((slice(1, 3), slice(None, None, -2), slice(1, 5)), np.arange(24.0).reshape(2, 3, 4)),
                 ((0, slice(None), slice(None, None, 2)), np.arange(3.0)),  # broadcast
                 ((slice(None), 1, slice(0, 6)), 9.5),  # scalar
                 ((3, slice(None, None, -1)), np.arange(30.0).reshape(6, 5).T),  # strided host value
                 ((2,), np.ones((5, 6))),  # a contiguous region
                 ((None, 1, slice(1, 3)), np.full((1, 2, 6), 4.0)),  # a new axis
                 ((slice(1, 3), slice(1, 4)), b[slice(0, 2), slice(2, 5)])]:  # overlapping, same array
        m[k] = v.to_numpy() if isinstance(v, gpubuf.NDBuffer) else v
        b[k] = v
        np.testing.assert_array_equal(b.to_numpy(), m, err_msg=str(k))
    pool = gpubuf.MemoryPool(backend)
    big = gpubuf.NDBuffer.zeros((64, 300), "float32", backend)
    big.set_region((slice(3, 50), slice(7, 290)), np.ones((47, 283), np.float32), pool)  # rows >= 64: a gather
    want = np.zeros((64, 300), np.float32)
    want[3:50, 7:290] = 1
    np.testing.assert_array_equal(big.to_numpy(), want)
    assert pool.held_blocks + pool.active_blocks >= 1
    before = b.to_numpy()
    with pytest.raises(gpubuf.ShapeMismatchError):
        b[0] = np.ones((4, 4))
    with pytest.raises(gpubuf.DTypeMismatchError):
        b[0] = gpubuf.NDBuffer.zeros((5, 6), "float32", backend)
    with pytest.raises(gpubuf.DeviceMismatchError):
        b.set_region(0, np.ones((5, 6)), gpubuf.MemoryPool(gpubuf.Backend("cpu")))
    np.testing.assert_array_equal(b.to_numpy(), before)  # no partial write
    assert a.view("uint8").shape == (4, 5, 48) and a.ravel().shape == (120,)
    np.testing.assert_array_equal(a.view("uint8").to_numpy(), ref.view("uint8"))
    np.testing.assert_array_equal(a[:, 1].ravel().to_numpy(), ref[:, 1].ravel())
    with pytest.raises(gpubuf.InvalidArgumentError):
        a[:, 1].view("uint8")
    with pytest.raises(gpubuf.ShapeMismatchError):
        a.reshape(7, -1)


def test_the_docs_example_runs(tmp_path, monkeypatch):
    doc = pathlib.Path(__file__).resolve().parents[3] / "docs" / "python.md"
    if not doc.is_file():
        pytest.skip("docs/python.md is not next to the tests")
    section = doc.read_text().split("## zarr: `gpubuf.zarr`", 1)[1].split("\n## ", 1)[0]
    code = "\n".join(re.findall(r"```python\n(.*?)```", section, re.S))  # every example, in order
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/python.md", "exec"), {})


def test_enable_makes_gpubuf_zarrs_default(backend):
    """With ``gpubuf.zarr.enable(backend)``, plain zarr reads of sharded arrays (their
    uint64 shard index included) and of unsharded ones come back as gpubuf arrays on
    that device, and leaving the ``with`` restores zarr's own classes."""
    names = gz.register(backend.name)
    cap = backend.name.capitalize()
    assert names == {
        "buffer": f"gpubuf.zarr.{cap}Buffer",
        "ndbuffer": f"gpubuf.zarr.{cap}NDBuffer",
        "codec_pipeline.path": "gpubuf.zarr_pipeline.CodecPipeline",
    }
    for dtype in ("int16", "uint64", "float32", "complex64", "complex128"):
        data = (np.arange(120) % 50).astype(dtype).reshape(10, 12)
        if data.dtype.kind == "c":
            data = data - 1j * data[::-1]
        for shards in (None, (4, 6)):
            with gz.enable(backend.name):
                assert zarr.config.get("ndbuffer") == names["ndbuffer"]
                z = zarr.create_array(store={}, shape=(10, 12), chunks=(2, 3), shards=shards, dtype=dtype)
                z[:] = data
                region = z[1:9, 2:11]
                assert isinstance(region, gpubuf.NDBuffer) and region.backend.name == backend.name
                np.testing.assert_array_equal(region.to_numpy(), data[1:9, 2:11])
            assert zarr.config.get("ndbuffer") != names["ndbuffer"]
            np.testing.assert_array_equal(np.asarray(z[:]), data)  # zarr's classes again
    with pytest.raises(gpubuf.InvalidArgumentError):
        gz.register(backend)
    with pytest.raises(gpubuf.InvalidArgumentError):
        gz.enable("nope")


def test_a_device_value_is_broadcast_and_cast_as_numpy_would(backend):
    # zarr writes a 0-d value over a region (`z[1:3] = z[0, 0]`): numpy's assignment
    # broadcasts it, and casts, on the CPU prototype and on every other alike.
    with gz.enable(backend.name):
        z = zarr.create_array(store={}, shape=(4, 2), chunks=(4, 2), dtype="int32", fill_value=0)
        z[0, 0] = 5
        z[1:3] = z[0, 0]
        np.testing.assert_array_equal(np.asarray(z[:].to_numpy()), [[5, 0], [5, 5], [5, 5], [0, 0]])
    nd = gz.buffer_prototype(backend).nd_buffer
    for value, want in (
        (np.array(4, np.int32), 4),
        (np.arange(3, dtype=np.int32), [0, 1, 2]),
        (np.full((2, 3), 7.0), 7),
    ):
        n = nd.create(shape=(4, 3), dtype="int32", fill_value=0)
        n[1:3] = gpubuf.NDBuffer.from_numpy(value, backend)
        got = n.as_numpy_array()
        np.testing.assert_array_equal(got[1:3], np.broadcast_to(np.asarray(want, np.int32), (2, 3)))
        assert (got[0] == 0).all() and (got[3] == 0).all()
    n = nd.create(shape=(4, 3), dtype="int32", fill_value=0)
    with pytest.raises(ValueError):  # numpy's on the CPU, ShapeMismatchError elsewhere
        n[1:3] = gpubuf.NDBuffer.from_numpy(np.arange(4, dtype=np.int32), backend)
    assert (n.as_numpy_array() == 0).all()


@pytest.mark.parametrize("compressor", [None, "zstd", "blosc"])
def test_v2_arrays_written_from_device_arrays(backend, compressor):
    """zarr v2 arrays (with filters and compressors run by numcodecs on the host) written
    from device arrays and read back into them, with gpubuf's classes and pipeline as
    zarr's defaults: each chunk is read to the host once, before numcodecs encodes it,
    and nothing else changes (the device array written is left as it was)."""
    import numcodecs

    comp = {None: None, "zstd": numcodecs.Zstd(level=1), "blosc": numcodecs.Blosc()}[compressor]
    data = (np.arange(300, dtype="float64").reshape(15, 20) * 1.5) - 7
    with gz.enable(backend.name):
        assert zarr.registry.get_pipeline_class().__name__ == "CodecPipeline"
        z = zarr.create(store={}, shape=(15, 20), chunks=(4, 6), dtype="float64", zarr_format=2,
                        compressor=comp, filters=[numcodecs.Delta(dtype="f8")])
        src = gpubuf.NDBuffer.from_numpy(data, backend)
        z[:] = src
        z[3:9, 5:17] = src[0:6, 0:12]  # partial chunks: read, merged on the device, written
        want = data.copy()
        want[3:9, 5:17] = data[0:6, 0:12]
        got = z[:]
        assert isinstance(got, gpubuf.NDBuffer) and got.backend.name == backend.name
        np.testing.assert_array_equal(got.to_numpy(), want)
        np.testing.assert_array_equal(src.to_numpy(), data)
    np.testing.assert_array_equal(np.asarray(z[:]), want)  # read by zarr's own classes
