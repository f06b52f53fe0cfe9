"""Advanced indexing on gpubuf.NDBuffer (integer arrays, lists, masks), gathered and
scattered on the device, against numpy's own results, on every backend."""

import numpy as np
import pytest

import gpubuf

X = np.arange(60, dtype=np.float32).reshape(3, 4, 5)

KEYS = [
    [2, 0, 2],
    (slice(None), [3, 1], [4, 4]),
    X > 30,
    (1, [0, 3]),
    np.ix_([2, 0], [1, 1], [4, 0, 2]),
    [True, False, True],
    (..., [0, -1]),
    np.array([[0, 1], [2, 2]]),
    [],
    X > 1000,
    ([0, 2], slice(None, None, -2), [1, 3]),
    (np.array([1, 2]), None, 0),
    (slice(1, 3), X[0] > 7),
]


def ids(k):
    return repr(k)[:40]


@pytest.mark.parametrize("key", KEYS, ids=ids)
def test_getitem_matches_numpy(backend, key):
    a = gpubuf.NDBuffer.from_numpy(X.copy(), backend)
    got, want = a[key], X[key]
    assert isinstance(got, gpubuf.NDBuffer) and got.backend.name == backend.name
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got.to_numpy(), want)
    got[...] = -7  # a new array, not a view
    np.testing.assert_array_equal(a.to_numpy(), X)


@pytest.mark.parametrize("key", KEYS, ids=ids)
def test_setitem_matches_numpy(backend, key):
    a = gpubuf.NDBuffer.from_numpy(X.copy(), backend)
    y = X.copy()
    n = y[key].shape
    value = (np.arange(int(np.prod(n))).reshape(n) * 3 + 1000).astype(np.float32)
    a[key] = value
    y[key] = value
    np.testing.assert_array_equal(a.to_numpy(), y)
    a[key] = 5  # a scalar, broadcast
    y[key] = 5
    np.testing.assert_array_equal(a.to_numpy(), y)


def test_repeats_take_the_last_value_and_views_work(backend):
    x = np.arange(20, dtype=np.int64).reshape(4, 5)
    a = gpubuf.NDBuffer.from_numpy(x.copy(), backend)
    y = x.copy()
    a[[0, 2, 0], 1] = [7, 8, 9]
    y[[0, 2, 0], 1] = [7, 8, 9]
    np.testing.assert_array_equal(a.to_numpy(), y)
    v, w = a[::2, ::-1], y[::2, ::-1]  # a strided, reversed view
    v[[1, 0], [4, 0]] = [-1, -2]
    w[[1, 0], [4, 0]] = [-1, -2]
    np.testing.assert_array_equal(a.to_numpy(), y)
    np.testing.assert_array_equal(v[[1, 1, 0]].to_numpy(), w[[1, 1, 0]])
    src = gpubuf.NDBuffer.from_numpy(np.array([40, 41], np.int64), backend)
    a[[3, 3], [0, 1]] = src  # a device value
    y[[3, 3], [0, 1]] = [40, 41]
    np.testing.assert_array_equal(a.to_numpy(), y)
    idx = gpubuf.NDBuffer.from_numpy(np.array([3, 0]), backend)  # a device index array
    np.testing.assert_array_equal(a[idx].to_numpy(), y[[3, 0]])


@pytest.mark.parametrize(
    "key, error",
    [([5], IndexError), ((0, [9]), IndexError), (np.zeros((2, 2), bool), IndexError), ([1.5], IndexError)],
    ids=ids,
)
def test_bad_keys_raise_numpys_errors_and_write_nothing(backend, key, error):
    a = gpubuf.NDBuffer.from_numpy(X.copy(), backend)
    with pytest.raises(error):
        a[key]
    with pytest.raises(error):
        a[key] = 1
    with pytest.raises(ValueError):
        a[[0, 1]] = np.zeros((3, 4, 5))  # does not broadcast
    np.testing.assert_array_equal(a.to_numpy(), X)
