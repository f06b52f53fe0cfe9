"""What numpy code and zarr call on a gpubuf.NDBuffer besides moving data: elementwise
comparisons, all/any, astype, reshape and ravel orders, flags, tobytes; the bool dtype;
and a forked child's clear error on OpenCL and CUDA. Every result is compared with numpy's."""

import os
import sys

import numpy as np
import pytest

import gpubuf

SHAPES = [(), (0,), (7,), (3, 4), (2, 3, 5)]


def arr(x, backend):
    return gpubuf.NDBuffer.from_numpy(x, backend)


def check(got, want):
    """``got`` (gpubuf array or Python value) equals numpy's ``want`` in value, dtype, shape."""
    if isinstance(want, np.ndarray):
        assert isinstance(got, gpubuf.NDBuffer), type(got)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.to_numpy(), want)
    else:
        assert type(got) is bool and got == bool(want)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", ["float32", "int16", "uint64", "bool"])
def test_comparisons_are_elementwise_as_numpy(backend, shape, dtype):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 3, size=shape).astype(dtype)
    y = rng.integers(0, 3, size=shape).astype(dtype)
    a, b = arr(x, backend), arr(y, backend)
    for got, want in [(a == b, x == y), (a != b, x != y), (a == 1, x == 1), (a != y, x != y)]:
        want = np.asarray(want)
        check(got, want)
        assert got.backend.name == backend.name
    assert np.all(a == a) and np.all(a == x)
    assert bool(np.all(a == 1)) == bool(np.all(x == 1))


def test_comparisons_broadcast_and_mix_backends(backend, cpu):
    x = np.arange(12.0).reshape(3, 4)
    a = arr(x, backend)
    row = np.array([0.0, 5.0, 2.0, 3.0])
    check(a == row, x == row)
    check(a != arr(row, cpu), x != row)  # another backend's array is read too
    check(a == np.nan, x == np.nan)
    with pytest.raises(ValueError):
        a == np.zeros(5)  # noqa: B015 (numpy's broadcasting error)


def test_nan_and_signed_zero_compare_as_numpy(backend):
    x = np.array([np.nan, 0.0, -0.0, np.inf], np.float64)
    a = arr(x, backend)
    check(a == a, x == x)
    check(a == 0.0, x == 0.0)


@pytest.mark.parametrize("name", ["all", "any"])
def test_reductions_match_numpy(backend, name):
    x = np.array([[0, 1, 2], [3, 0, 5]], np.int32)
    a = arr(x, backend)
    check(getattr(a, name)(), getattr(x, name)())
    for axis in [0, 1, -1, (0, 1)]:
        check(getattr(a, name)(axis=axis), getattr(x, name)(axis=axis))
    check(getattr(a, name)(axis=1, keepdims=True), getattr(x, name)(axis=1, keepdims=True))
    mask = np.array([[True, False, True], [False, False, True]])
    check(getattr(a, name)(where=mask), getattr(x, name)(where=mask))
    check(getattr(np, name)(a), getattr(np, name)(x))
    check(getattr(arr(np.zeros(0), backend), name)(), getattr(np.zeros(0), name)())
    with pytest.raises(gpubuf.InvalidArgumentError):
        getattr(a, name)(out=np.zeros(3, bool))
    with pytest.raises(np.exceptions.AxisError):
        getattr(a, name)(axis=2)
    check(getattr(a, name)(), getattr(x, name)())  # usable after the errors


@pytest.mark.parametrize("to", ["float64", "int8", "uint16", "bool", "float16"])
def test_astype_matches_numpy(backend, to):
    x = np.array([[-2.5, 0.0, 1.0], [300.0, 7.75, -0.0]], np.float32)
    a = arr(x, backend)
    with np.errstate(invalid="ignore"):
        want = x.astype(to)
    check(a.astype(to), want)
    assert a.astype(to).backend.name == backend.name
    same = a.astype("float32")
    assert same is not a and same.dtype == np.float32
    same[0, 0] = 9  # a copy
    assert a.to_numpy()[0, 0] == -2.5
    assert a.astype("float32", copy=False) is a
    with pytest.raises(TypeError):
        a.astype("int32", casting="safe")
    with pytest.raises(gpubuf.DTypeMismatchError):
        a.astype("clongdouble")
    with pytest.raises(gpubuf.InvalidArgumentError):
        a.astype("float64", order="X")
    check(a.astype("float64"), x.astype("float64"))  # usable after the errors
    f = arr(np.asfortranarray(x), backend)
    assert f.astype("float64").flags.f_contiguous  # "K" keeps the memory order
    assert f.astype("float64", order="C").flags.c_contiguous
    assert f.astype("float32", order="F").flags.f_contiguous


@pytest.mark.parametrize("order", ["C", "F", "A"])
def test_reshape_and_ravel_orders_match_numpy(backend, order):
    x = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    f = arr(np.ascontiguousarray(x.T), backend).transpose()  # F-contiguous on the device
    assert f.flags.f_contiguous and not f.flags.c_contiguous
    views = [
        ("c", arr(x, backend), x),
        ("f", f, np.asfortranarray(x)),
        ("strided", arr(x, backend)[:, ::2, 1:], x[:, ::2, 1:]),
        ("transposed", arr(x, backend).transpose((2, 0, 1)), x.transpose(2, 0, 1)),
    ]
    for name, a, v in views:
        np.testing.assert_array_equal(a.to_numpy(), v, err_msg=name)
        shape = (v.size // 2, 2) if v.size % 2 == 0 else (v.size,)
        np.testing.assert_array_equal(a.reshape(shape, order=order).to_numpy(), v.reshape(shape, order=order), name)
        np.testing.assert_array_equal(a.reshape(-1, order=order).to_numpy(), v.reshape(-1, order=order), name)
        np.testing.assert_array_equal(a.ravel(order).to_numpy(), v.ravel(order), name)
    np.testing.assert_array_equal(f.ravel("K").to_numpy(), np.asfortranarray(x).ravel("K"))
    with pytest.raises(gpubuf.InvalidArgumentError):
        arr(x, backend).reshape(-1, order="K")
    with pytest.raises(gpubuf.ShapeMismatchError):
        arr(x, backend).reshape((5, 5), order="F")
    # The shape asked for is reported as given, its -1 kept.
    with pytest.raises(gpubuf.ShapeMismatchError, match=r"\[5, -1\]") as e:
        arr(x, backend).reshape(5, -1)
    assert e.value.got == [5, -1] and e.value.expected == [2, 3, 4]


def test_flags_and_tobytes_match_numpy(backend):
    x = np.arange(12, dtype=np.uint16).reshape(3, 4)
    a = arr(x, backend)
    for got, want in [(a, x), (a.transpose(), x.T), (a[:, ::2], x[:, ::2]), (a[1:2], x[1:2])]:
        assert got.flags.c_contiguous == want.flags.c_contiguous
        assert got.flags.f_contiguous == want.flags.f_contiguous
        assert got.flags["C_CONTIGUOUS"] == want.flags["C_CONTIGUOUS"] and got.flags["F"] == want.flags["F"]
        assert got.flags.writeable
        for order in "CFAK":
            assert got.tobytes(order) == want.tobytes(order), order
    with pytest.raises(KeyError):
        a.flags["NOPE"]
    with pytest.raises(gpubuf.InvalidArgumentError):
        a.tobytes("X")


def test_bool_arrays_hold_numpy_bools(backend):
    x = np.array([[True, False, True], [False, False, True]])
    a = arr(x, backend)
    assert a.dtype == np.bool_ and a.itemsize == 1
    np.testing.assert_array_equal(a.to_numpy(), x)
    np.testing.assert_array_equal(a.transpose().copy().to_numpy(), x.T)
    a[0, 1] = True
    b = gpubuf.NDBuffer.zeros((4,), "bool", backend)
    b.fill(True)
    x[0, 1] = True
    np.testing.assert_array_equal(a.to_numpy(), x)
    assert b.all() and not gpubuf.NDBuffer.zeros((4,), "bool", backend).any()
    assert np.asarray(a).dtype == np.bool_


def test_arrays_are_unhashable_as_numpys():
    a = arr(np.zeros(3), gpubuf.Backend("cpu"))
    with pytest.raises(TypeError):
        hash(a)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
@pytest.mark.parametrize("name", ["opencl", "cuda"])
def test_a_forked_child_gets_an_error_not_a_hang(name):
    """A child forked after a device backend was used: every use of the inherited array or
    backend, and opening the backend again, raises saying so; the CPU backend works."""
    try:
        ocl = gpubuf.Backend(name)
    except gpubuf.BackendUnavailableError as e:
        if name in os.environ.get("GPUBUF_REQUIRE", "").split(","):
            pytest.fail(f"{name} is required (GPUBUF_REQUIRE) but unavailable: {e}")
        pytest.skip(f"{name} unavailable: {e.reason}")
    a = arr(np.arange(1000.0), ocl)
    assert float(a[::7].copy().to_numpy()[2]) == 14.0  # the driver's threads are running
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, never return into pytest
        code = 0
        try:
            for use in (lambda: a.to_numpy(), lambda: arr(np.zeros(2), ocl), lambda: gpubuf.Backend(name)):
                try:
                    use()
                    code |= 1
                except gpubuf.BackendUnavailableError as e:
                    code |= 0 if "fork" in str(e) else 2
            cpu = arr(np.arange(3.0), gpubuf.Backend("cpu"))
            code |= 0 if cpu.to_numpy().tolist() == [0.0, 1.0, 2.0] else 4
        finally:
            os.write(w, bytes([code]))
            os._exit(0)
    os.close(w)
    import select

    ready, _, _ = select.select([r], [], [], 60)
    if not ready:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung")
    code = os.read(r, 1)
    os.waitpid(pid, 0)
    assert code == b"\x00", f"child code {code!r} (1: no error, 2: another error, 4: CPU failed)"
    np.testing.assert_array_equal(a[::100].copy().to_numpy(), np.arange(0.0, 1000.0, 100.0))  # parent fine
    sys.stdout.flush()
