"""The transformer reuses the adoption of numpy arrays passed again, and checks again
everything that may have changed on the same array object since the last call."""

import gc
import warnings
import weakref

import numpy as np
import pytest

import gpubuf

DIMS = ("x", "y")


def setup(backend):
    arrays = [np.random.default_rng(k).standard_normal((9, 9)) for k in range(1)]
    a = arrays[0]
    q = gpubuf.QuantityHaloSpec(2, a.strides, a.itemsize, a.shape, (2, 2), (5, 5), DIMS, np, a.dtype)
    s = gpubuf.HaloExchangeSpec(q, (slice(2, 4), slice(2, 7)), 0, (slice(0, 2), slice(2, 7)))
    t = gpubuf.HaloDataTransformer.get(np, [s], backend=backend)
    return t, arrays


def test_repeated_calls_read_and_write_the_current_memory(cpu):
    t, (a,) = setup(cpu)
    for k in range(3):
        a[2:4, 2:7] = k
        t.async_pack([a])
        np.testing.assert_array_equal(t.get_pack_buffer().to_numpy(), np.full(10, float(k)))
        t.receive(np.full(10, 10.0 + k))
        t.async_unpack([a])
        assert (a[0:2, 2:7] == 10.0 + k).all()


def test_an_array_made_read_only_is_not_written(cpu):
    t, (a,) = setup(cpu)
    t.async_unpack([a])  # adopted in place and remembered
    a.setflags(write=False)
    before = a.copy()
    t.receive(np.full(10, 5.0))
    with pytest.raises(ValueError):
        t.async_unpack([a])
    np.testing.assert_array_equal(a, before)
    t.async_pack([a])  # a read-only array still packs (copied)
    np.testing.assert_array_equal(t.get_pack_buffer().to_numpy(), a[2:4, 2:7].ravel())


def test_shape_strides_and_dtype_changed_in_place_are_checked(cpu):
    t, (a,) = setup(cpu)
    t.async_pack([a])
    a.shape = (81,)
    with pytest.raises(gpubuf.ShapeMismatchError):
        t.async_pack([a])
    a.shape = (9, 9)
    t.async_pack([a])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        a.strides = (8, 72)  # the transpose, in place
    with pytest.raises(gpubuf.InvalidArgumentError):
        t.async_pack([a])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        a.strides = (72, 8)
    t.async_pack([a])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        a.dtype = np.int64  # same size, same shape and strides
    with pytest.raises(gpubuf.DTypeMismatchError):
        t.async_pack([a])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        a.dtype = np.float64
    t.async_pack([a])
    np.testing.assert_array_equal(t.get_pack_buffer().to_numpy(), a[2:4, 2:7].ravel())


def test_arrays_of_the_last_call_only_are_kept(cpu):
    t, (a,) = setup(cpu)
    b = a.copy()
    ref = weakref.ref(a)
    t.async_pack([a])
    t.async_pack([b])  # a is no longer remembered
    t.synchronize()
    del a
    gc.collect()
    assert ref() is None
    ref = weakref.ref(b)
    t.finalize()
    del b
    gc.collect()
    assert ref() is None


def test_one_array_behind_several_objects(cpu):
    class Quantity:
        def __init__(self, data):
            self.data = data

    a = np.random.default_rng(3).standard_normal((9, 9))
    q = gpubuf.QuantityHaloSpec(2, a.strides, a.itemsize, a.shape, (2, 2), (5, 5), DIMS, np, a.dtype)
    s = gpubuf.HaloExchangeSpec(q, (slice(2, 4), slice(2, 7)), 0, (slice(0, 2), slice(2, 7)))
    s2 = gpubuf.HaloExchangeSpec(q, (slice(5, 7), slice(2, 7)), 0, (slice(7, 9), slice(2, 7)))
    t = gpubuf.HaloDataTransformer.get(np, [s, s2], backend=cpu)
    for _ in range(2):
        t.async_pack([Quantity(a), Quantity(a)])
        want = np.concatenate([a[2:4, 2:7].ravel(), a[5:7, 2:7].ravel()])
        np.testing.assert_array_equal(t.get_pack_buffer().to_numpy(), want)
        t.receive(np.arange(20.0))
        t.async_unpack([Quantity(a), a])
        np.testing.assert_array_equal(a[0:2, 2:7].ravel(), np.arange(10.0))
        np.testing.assert_array_equal(a[7:9, 2:7].ravel(), np.arange(10.0, 20.0))
        # Replaced contents between calls are seen.
        a[:] = np.random.default_rng(4).standard_normal((9, 9))


FINALIZE_RACE = r"""
import sys, threading, time
import numpy as np
import gpubuf

backend = gpubuf.Backend(sys.argv[1])
n = 1500
u = np.random.default_rng(0).random((n, n, 2))
u.flags.writeable = False  # copied to the device (not adopted), with the GIL released
q = gpubuf.QuantityHaloSpec(2, u.strides, 8, u.shape, (2, 2, 0), (n - 4, n - 4, 2), ("x", "y", "z"), np, u.dtype)
s = gpubuf.HaloExchangeSpec(q, np.index_exp[2:4, 2:n - 2, 0:2], 0, np.index_exp[0:2, 2:n - 2, 0:2])
outcomes = set()
for attempt in range(4):
    t = gpubuf.HaloDataTransformer.get(np, [s], backend=backend)
    started = threading.Event()

    def pack():
        started.set()
        try:
            t.async_pack([u])
            outcomes.add("packed")
        except gpubuf.InvalidArgumentError:
            outcomes.add("pack refused")

    th = threading.Thread(target=pack)
    th.start()
    started.wait()
    time.sleep(0.005)
    try:
        t.finalize()
        outcomes.add("finalized")
    except gpubuf.InvalidArgumentError:
        outcomes.add("finalize refused")
    th.join()
    t.finalize()
    assert not t.ready()
print(sorted(outcomes))
"""


def test_finalize_while_another_thread_adopts_is_refused_not_a_hang(backend):
    # finalize() waited for the adoption cache while the other thread, holding it with
    # the GIL released, waited for the GIL: the process hung. One of the two is refused.
    import subprocess
    import sys

    name = backend.name
    r = subprocess.run([sys.executable, "-c", FINALIZE_RACE, name], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "finalize" in r.stdout, r.stdout
