"""numpy arrays shared with the CPU backend without a copy, both ways."""

import gc
import weakref

import numpy as np
import pytest

import gpubuf


def address(a):
    return np.asarray(a).__array_interface__["data"][0]


def test_numpy_in_and_out_is_one_memory(cpu):
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    a = gpubuf.NDBuffer.from_numpy(x, cpu)
    assert address(a) == x.ctypes.data  # into gpubuf: no copy
    back = a.to_numpy()
    assert back.ctypes.data == x.ctypes.data  # and out again: no copy
    x[1, 2] = -5.0
    assert back[1, 2] == -5.0
    back[0, 0] = 42.0
    assert x[0, 0] == 42.0
    assert a.copy().to_numpy()[0, 0] == 42.0  # gpubuf's own reads see numpy's writes


def test_ndbuffer_keeps_the_numpy_array_alive(cpu):
    class Owned(np.ndarray):
        pass  # weakref-able numpy array

    x = np.arange(1000, dtype=np.int64).view(Owned)
    alive = weakref.ref(x)
    a = gpubuf.NDBuffer.from_numpy(x, cpu)
    del x
    gc.collect()
    assert alive() is not None  # held by the NDBuffer
    np.testing.assert_array_equal(a.to_numpy(), np.arange(1000))
    view = a.to_numpy()
    del a
    gc.collect()
    assert alive() is not None  # the numpy view keeps the NDBuffer, which keeps the array
    assert view[999] == 999
    del view
    gc.collect()
    assert alive() is None  # released once the last gpubuf view is gone


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.arange(12.0).reshape(3, 4)[:, ::2],  # not C-contiguous
        lambda: np.frombuffer(bytes(96), dtype=np.float64),  # read-only
        lambda: np.frombuffer(bytearray(100), dtype=np.float32, offset=4, count=8),  # 4-byte aligned
        lambda: np.zeros((0, 3)),  # empty
    ],
)
def test_other_arrays_are_copied(cpu, make):
    x = make()
    a = gpubuf.NDBuffer.from_numpy(x, cpu)
    np.testing.assert_array_equal(a.to_numpy(), x)
    if x.size:
        assert address(a) != x.ctypes.data
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.NDBuffer.from_numpy(x, cpu, copy=False)


def test_copy_true_and_other_backends_copy(backend):
    x = np.arange(8, dtype=np.float32)
    a = gpubuf.NDBuffer.from_numpy(x, backend, copy=True)
    x[0] = 9.0
    assert a.to_numpy()[0] == 0.0
    if backend.name != "cpu":
        b = gpubuf.NDBuffer.from_numpy(x, backend)
        x[1] = 7.0
        assert b.to_numpy()[1] == 1.0  # an upload, not a view
        with pytest.raises(gpubuf.InvalidArgumentError):
            gpubuf.NDBuffer.from_numpy(x, backend, copy=False)


def test_from_dlpack_shares_host_memory(cpu):
    x = np.arange(6, dtype=np.int32)
    a = gpubuf.from_dlpack(x, cpu)
    assert address(a) == x.ctypes.data
    x[3] = 100
    assert a.to_numpy()[3] == 100
