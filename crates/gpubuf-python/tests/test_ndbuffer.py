"""NDBuffer: numpy in and out, views without copies on the CPU, DLPack."""

import gc

import numpy as np
import pytest

import gpubuf

DTYPES = [
    "uint8", "int32", "uint32", "int64", "int8", "int16", "uint16", "uint64", "float16", "float32", "float64", "bool",
    "complex64", "complex128",
]


def address(a):
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_every_dtype(backend, dtype):
    x = (np.arange(24).reshape(2, 3, 4) * 3).astype(dtype)
    a = gpubuf.NDBuffer.from_numpy(x, backend)
    assert a.shape == (2, 3, 4) and a.dtype == np.dtype(dtype) and a.ndim == 3
    assert a.size == 24 and a.itemsize == x.itemsize and a.nbytes == x.nbytes
    assert a.strides == x.strides and len(a) == 2
    assert a.backend.name == backend.name
    y = a.to_numpy()
    assert y.dtype == x.dtype and y.shape == x.shape
    np.testing.assert_array_equal(y, x)


def test_strided_and_flipped_input_is_copied_in_order(backend):
    x = np.arange(60, dtype=np.float64).reshape(6, 10)[::-2, 1::3]
    a = gpubuf.NDBuffer.from_numpy(x, backend)
    assert a.shape == x.shape
    np.testing.assert_array_equal(a.to_numpy(), x)
    np.testing.assert_array_equal(np.asarray(a), x)


def test_empty_and_zero_dim_arrays(backend):
    for x in [np.zeros((0, 3), np.int32), np.array(7.5), np.zeros(0, np.uint8)]:
        a = gpubuf.NDBuffer.from_numpy(x, backend)
        assert a.shape == x.shape
        np.testing.assert_array_equal(a.to_numpy(), x)
    with pytest.raises(TypeError):
        len(gpubuf.NDBuffer.from_numpy(np.array(1.0), backend))


def test_zeros_empty_copy_and_to_backend(backend, cpu):
    z = gpubuf.NDBuffer.zeros((3, 5), "int64", backend)
    assert z.dtype == np.int64
    np.testing.assert_array_equal(z.to_numpy(), np.zeros((3, 5), np.int64))
    e = gpubuf.NDBuffer.empty([4], np.float32, backend)
    assert e.shape == (4,) and e.dtype == np.float32
    x = np.arange(6.0).reshape(2, 3)
    a = gpubuf.NDBuffer.from_numpy(x, backend)
    np.testing.assert_array_equal(a.copy().to_numpy(), x)
    on_cpu = a.to_backend(cpu)
    assert on_cpu.backend.name == "cpu"
    np.testing.assert_array_equal(on_cpu.to_numpy(), x)
    assert gpubuf.NDBuffer.zeros(3).dtype == np.float64


def test_unsupported_dtypes_raise_dtype_mismatch(backend):
    for x in [np.zeros(3, np.longdouble), np.zeros(3, "U2"), np.zeros(3, ">f8"), np.zeros(3, np.clongdouble)]:
        with pytest.raises(gpubuf.DTypeMismatchError) as e:
            gpubuf.NDBuffer.from_numpy(x, backend)
        assert isinstance(e.value, TypeError) and e.value.expected is None
    with pytest.raises(gpubuf.DTypeMismatchError):
        gpubuf.NDBuffer.zeros(3, "clongdouble", backend)
    with pytest.raises(gpubuf.DTypeMismatchError):
        gpubuf.NDBuffer.zeros(3, "not a dtype", backend)


def test_bad_shapes_raise_typed_errors(backend):
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.NDBuffer.zeros((2, -1), backend=backend)
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.NDBuffer.zeros("3", backend=backend)
    # A shape whose size overflows, and one no device holds: errors, not crashes.
    with pytest.raises((gpubuf.OutOfMemoryError, gpubuf.InvalidArgumentError)):
        gpubuf.NDBuffer.zeros((2**40, 2**40), backend=backend)
    with pytest.raises(gpubuf.OutOfMemoryError) as e:
        gpubuf.NDBuffer.zeros(2**60, "uint8", backend)
    assert isinstance(e.value, MemoryError) and e.value.requested == 2**60
    # The backend is still usable after the errors.
    np.testing.assert_array_equal(gpubuf.NDBuffer.zeros(2, backend=backend).to_numpy(), [0.0, 0.0])


def test_cpu_to_numpy_is_a_view_of_the_same_memory(cpu):
    a = gpubuf.NDBuffer.from_numpy(np.arange(12, dtype=np.float64).reshape(3, 4), cpu)
    v = a.to_numpy()
    assert address(v) == a.__array_interface__["data"][0]
    assert address(np.asarray(a)) == address(v)
    assert v.base is a or v.base.base is a or getattr(v.base, "obj", None) is a
    v[1, 2] = -1.0
    # gpubuf sees the write: a copy made by the backend carries it.
    assert a.copy().to_numpy()[1, 2] == -1.0
    assert a.to_backend(gpubuf.Backend("cpu")).to_numpy()[1, 2] == -1.0


def test_cpu_view_keeps_the_memory_alive(cpu):
    v = gpubuf.NDBuffer.from_numpy(np.full(1000, 3.25), cpu).to_numpy()
    gc.collect()
    big = [np.full(1000, 9.0) for _ in range(50)]
    assert (v == 3.25).all()
    del big


def test_cpu_view_of_pool_array_holds_its_block(cpu):
    pool = gpubuf.MemoryPool(cpu)
    v = pool.zeros(100, "int32").to_numpy()
    assert pool.active_blocks == 1
    v[:] = 5
    del v
    gc.collect()
    assert pool.active_blocks == 0


def test_cpu_views_of_two_pool_arrays_in_one_segment(cpu):
    pool = gpubuf.MemoryPool(cpu)
    a, b = pool.zeros(64, "int32"), pool.zeros(64, "int32")
    va, vb = a.to_numpy(), b.to_numpy()
    assert address(va) != address(vb)
    va[:] = 1
    vb[:] = 2
    np.testing.assert_array_equal(a.copy().to_numpy(), np.ones(64, np.int32))
    np.testing.assert_array_equal(b.copy().to_numpy(), np.full(64, 2, np.int32))
    assert address(np.from_dlpack(b)) == address(vb)


def test_cpu_strides_of_views_follow_numpy(cpu):
    a = gpubuf.NDBuffer.from_numpy(np.arange(12, dtype=np.int32).reshape(3, 4), cpu)
    assert a.strides == (16, 4)
    assert a.__array_interface__["strides"] == (16, 4)
    assert a.__array_interface__["typestr"] == np.dtype(np.int32).str


def test_non_cpu_has_no_array_interface_and_copies(backend):
    if backend.name == "cpu":
        pytest.skip("the CPU shares memory")
    a = gpubuf.NDBuffer.from_numpy(np.arange(4.0), backend)
    assert not hasattr(a, "__array_interface__")
    y = np.asarray(a)
    np.testing.assert_array_equal(y, np.arange(4.0))
    y[0] = 100.0
    assert a.to_numpy()[0] == 0.0
    with pytest.raises(ValueError):
        np.asarray(a, copy=False)
    if backend.name == "cuda":  # DLPack on CUDA: the device, not the host
        assert a.__dlpack_device__()[0] == 2
        return
    with pytest.raises(BufferError):
        a.__dlpack__()
    with pytest.raises(BufferError):
        a.__dlpack_device__()


def test_cpu_dlpack_export_shares_memory(cpu):
    a = gpubuf.NDBuffer.from_numpy(np.arange(10, dtype=np.float32), cpu)
    assert a.__dlpack_device__() == (1, 0)
    d = np.from_dlpack(a)
    assert address(d) == a.__array_interface__["data"][0]
    np.testing.assert_array_equal(d, np.arange(10, dtype=np.float32))
    del a
    gc.collect()
    np.testing.assert_array_equal(d, np.arange(10, dtype=np.float32))


def test_cpu_dlpack_of_flipped_and_zero_dim(cpu):
    x = np.arange(20, dtype=np.int64).reshape(4, 5)
    a = gpubuf.NDBuffer.from_numpy(x, cpu)
    np.testing.assert_array_equal(np.from_dlpack(a), x)
    s = gpubuf.NDBuffer.from_numpy(np.array(2.5), cpu)
    assert np.from_dlpack(s).shape == ()
    assert float(np.from_dlpack(s)) == 2.5


def test_unconsumed_dlpack_capsule_is_freed(cpu):
    pool = gpubuf.MemoryPool(cpu)
    a = pool.zeros(8)
    cap = a.__dlpack__()
    del a
    gc.collect()
    assert pool.active_blocks == 1
    del cap
    gc.collect()
    assert pool.active_blocks == 0


def test_from_dlpack_copies_onto_any_backend(backend):
    x = np.arange(6, dtype=np.uint32).reshape(2, 3)
    a = gpubuf.from_dlpack(x, backend)
    assert a.backend.name == backend.name
    np.testing.assert_array_equal(a.to_numpy(), x)
    b = gpubuf.from_dlpack(gpubuf.NDBuffer.from_numpy(x), backend)
    np.testing.assert_array_equal(b.to_numpy(), x)


def test_repr(backend):
    a = gpubuf.NDBuffer.zeros((2, 3), "float32", backend)
    assert "(2, 3)" in repr(a).replace("[", "(").replace("]", ")") and "float32" in repr(a)


def test_arrays_and_backends_pickle(backend):
    import pickle

    for dtype in DTYPES:
        host = (np.arange(24) % 11).astype(dtype).reshape(2, 3, 4)
        a = gpubuf.NDBuffer.from_numpy(host, backend)
        for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
            b = pickle.loads(pickle.dumps(a, protocol))
            assert isinstance(b, gpubuf.NDBuffer) and b.backend.name == backend.name
            assert b.dtype == host.dtype and b.shape == host.shape
            np.testing.assert_array_equal(b.to_numpy(), host)
        view = pickle.loads(pickle.dumps(a[1, ::2, 1:]))  # a strided view: its values
        np.testing.assert_array_equal(view.to_numpy(), host[1, ::2, 1:])
    empty = pickle.loads(pickle.dumps(gpubuf.NDBuffer.zeros((0, 5), "int16", backend)))
    assert empty.shape == (0, 5) and empty.dtype == np.int16
    assert pickle.loads(pickle.dumps(backend)).name == backend.name


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_views_copies_and_values(backend, dtype):
    """Complex arrays move as pairs of float lanes: transposed, flipped and strided views
    copy exactly (NaN and signed-zero bits included), values and scalars write through,
    and astype between the two widths matches numpy."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((4, 5, 6)) + 1j * rng.standard_normal((4, 5, 6))).astype(dtype)
    x[0, 0, 0] = complex(np.nan, -0.0)
    a = gpubuf.NDBuffer.from_numpy(x, backend)
    v = a.transpose((2, 0, 1))[::-2, 1:, ::3]
    want = x.transpose((2, 0, 1))[::-2, 1:, ::3]
    got = v.copy().to_numpy()
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8))
    a[1, :, 2] = 3 - 4j
    a[2] = x[3]
    x[1, :, 2] = 3 - 4j
    x[2] = x[3]
    np.testing.assert_array_equal(a.to_numpy(), x)
    other = "complex128" if dtype == "complex64" else "complex64"
    np.testing.assert_array_equal(a.astype(other).to_numpy(), x.astype(other))
    np.testing.assert_array_equal(np.from_dlpack(a) if backend.name == "cpu" else a.to_numpy(), x)
