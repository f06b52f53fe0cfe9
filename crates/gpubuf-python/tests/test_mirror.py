"""Mirror: glumpy's GPUData semantics (pending_data), every write path tracked, sync uploads
exactly the pending bytes."""

import gc
import tracemalloc

import numpy as np
import pytest

import gpubuf


def device(m):
    return m.device.to_numpy()


def test_glumpys_pending_data(backend):
    v = gpubuf.Mirror(np.zeros(16, np.float32), backend)
    assert isinstance(v, np.ndarray) and isinstance(v, gpubuf.Mirror) and v.pending_data is None
    d = v[5:8]
    d[...] = 1
    assert v.pending_data == (20, 32) and d.pending_data == (20, 32)
    a = gpubuf.Mirror(np.zeros((4, 4), np.float32), backend)
    a[:, 1] = 2
    assert a.pending_data == (4, 56)
    a.sync()
    assert a.pending_data is None
    a[3, 2] = 5
    assert a.pending_data == (56, 60)


def test_sync_uploads_exactly_the_pending_bytes(backend):
    m = gpubuf.Mirror(np.zeros(16, np.float32), backend)
    raw = m.view(np.ndarray)
    raw[0] = 99  # not tracked: must not reach the device
    m[5:8] = 1
    sent = m.sync()
    assert sent == {"ranges": [(20, 32)], "bytes": 12, "commands": 1}
    expect = np.zeros(16, np.float32)
    expect[5:8] = 1
    np.testing.assert_array_equal(device(m), expect)
    assert m.sync()["bytes"] == 0
    m.mark_dirty()
    assert m.sync()["bytes"] == 64 and device(m)[0] == 99


def test_every_write_path_is_tracked(backend):
    writes = [
        ("setitem", lambda m: m.__setitem__((1, slice(None)), 3), (16, 32)),
        ("element", lambda m: m.__setitem__((2, 3), 3), (44, 48)),
        ("negative index", lambda m: m.__setitem__(-1, 3), (48, 64)),
        ("view", lambda m: m[1:3, 1:2].__setitem__(Ellipsis, 3), (20, 40)),
        ("iadd", lambda m: m[2].__iadd__(1), (32, 48)),
        ("imul on a strided view", lambda m: m[::2, 0].__imul__(2), (0, 36)),
        ("ufunc out=", lambda m: np.add(m[0], 1, out=m[0]), (0, 16)),
        ("ufunc at", lambda m: np.add.at(m[3], [0, 1], 1), (48, 64)),
        ("fill", lambda m: m[1].fill(7), (16, 32)),
        ("copyto", lambda m: np.copyto(m[2], np.arange(4)), (32, 48)),
        ("putmask", lambda m: np.putmask(m[0], [True, False, True, False], 4), (0, 16)),
        ("sort", lambda m: m[3].sort(), (48, 64)),
        ("mask", lambda m: m.__setitem__(m > 10, 0), (0, 64)),
        ("empty mask", lambda m: m.__setitem__(m > 100, 0), None),
        ("fancy", lambda m: m.__setitem__(([0, 3], [1, 2]), 9), (0, 64)),
        ("dot out=", lambda m: np.dot(np.eye(2, dtype=np.float32), np.ones((2, 4), np.float32), out=m[1:3]), (16, 48)),
        ("dot, out positional", lambda m: np.dot(np.ones(4, np.float32), np.ones((4, 4), np.float32), m[2]), (32, 48)),
        ("take, out positional", lambda m: np.take(np.arange(8.0, dtype=np.float32), [1, 2, 3, 4], None, m[3]), (48, 64)),
        ("cumsum out=", lambda m: np.cumsum(np.ones(4, np.float32), out=m[0]), (0, 16)),
        ("sum out=", lambda m: np.sum(np.ones((3, 4), np.float32), axis=0, out=m[1]), (16, 32)),
        ("einsum out=", lambda m: np.einsum("ij->ji", np.ones((4, 4), np.float32), out=m), (0, 64)),
        ("concatenate out=", lambda m: np.concatenate([np.ones(2, np.float32)] * 2, out=m[2]), (32, 48)),
        ("round out=", lambda m: np.round(np.ones(4, np.float32), 0, m[3]), (48, 64)),
        ("partition", lambda m: m[0].partition(1), (0, 16)),
        ("byteswap in place", lambda m: m[1].byteswap(True), (16, 32)),
        ("byteswap copy", lambda m: m[1].byteswap(), None),
        ("a read", lambda m: np.sum(m), None),
    ]
    for name, write, expected in writes:
        host = np.arange(16, dtype=np.float32).reshape(4, 4)[::-1].copy()
        m = gpubuf.Mirror(host, backend)
        write(m)
        assert m.pending_data == expected, name
        m.sync()
        np.testing.assert_array_equal(device(m), m.view(np.ndarray), err_msg=name)


def test_results_and_copies_are_plain_arrays(backend):
    m = gpubuf.Mirror(np.ones((2, 3)), backend)
    for r in (m + 1, m * m, np.sin(m), m.copy()):
        assert type(r) is np.ndarray
    assert m.pending_data is None
    assert isinstance(m[0], gpubuf.Mirror) and m[0].pending_data is None
    assert m.device.shape == (2, 3) and m.device.dtype == np.float64
    assert isinstance(m.device, gpubuf.NDBuffer)


def test_exact_policy_keeps_ranges_apart(backend):
    m = gpubuf.Mirror(np.zeros(16, np.float32), backend, policy="exact")
    m[1] = 1
    m[10:12] = 2
    assert m.pending_ranges == [(4, 8), (40, 48)] and m.pending_data == (4, 48)
    sent = m.sync()
    assert sent["ranges"] == [(4, 8), (40, 48)] and sent["bytes"] == 12
    np.testing.assert_array_equal(device(m), m.view(np.ndarray))


def test_hostile_inputs(backend):
    with pytest.raises(gpubuf.DTypeMismatchError):
        gpubuf.Mirror(np.zeros(4, np.longdouble), backend)
    with pytest.raises(gpubuf.DTypeMismatchError):
        gpubuf.Mirror(np.array(["a", "b"]), backend)
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.Mirror(np.zeros(4), backend, policy="convex")
    with pytest.raises(gpubuf.OutOfBoundsError):
        gpubuf.Mirror(np.zeros(4), backend)._core.mark(0, 33)
    with pytest.raises(gpubuf.OutOfBoundsError):
        gpubuf.Mirror(np.zeros(4), backend)._core.mark(9, 8)
    with pytest.raises(OverflowError):
        gpubuf.Mirror(np.zeros(4), backend)._core.mark(-1, 8)
    empty = gpubuf.Mirror(np.zeros((0, 3), np.int32), backend)
    empty[...] = 1
    assert empty.pending_data is None and empty.sync()["bytes"] == 0
    detached = gpubuf.Mirror(np.zeros(4), backend).view(np.ndarray).view(gpubuf.Mirror)
    with pytest.raises(ValueError):
        detached.sync()


def test_no_leak(backend):
    m = gpubuf.Mirror(np.zeros(64, np.float32), backend)
    for _ in range(100):
        m[3:9] = 1
        m.sync()
    tracemalloc.start()
    gc.collect()
    start = tracemalloc.get_traced_memory()[0]
    for i in range(10_000):
        m[i % 60 : i % 60 + 4] += 1
        if i % 10 == 0:
            m.sync()
    m.sync()
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - start
    tracemalloc.stop()
    assert grown < 64 * 1024, grown
    np.testing.assert_array_equal(device(m), m.view(np.ndarray))


def test_the_documented_example_runs():
    from test_bufferizer import doc_snippets

    snippets = doc_snippets("## Mirrors: `gpubuf.Mirror`")
    assert snippets
    for code in snippets:
        exec(compile(code, "docs/python.md", "exec"), {})


def test_pickling_keeps_the_tracking(backend):
    import pickle

    m = gpubuf.Mirror(np.arange(12, dtype=np.float32).reshape(3, 4), backend, policy="exact")
    m.sync()
    m[1, 1] = 50.0
    m[2, 3] = 60.0
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        b = pickle.loads(pickle.dumps(m, protocol))
        assert type(b) is gpubuf.Mirror and b.pending_ranges == m.pending_ranges, protocol
        np.testing.assert_array_equal(b.view(np.ndarray), m.view(np.ndarray))
        np.testing.assert_array_equal(device(b), b.view(np.ndarray))  # a fresh upload
        b[0, 0] = -1.0  # still tracked
        assert b.pending_ranges[0] == (0, 4)
        assert b.device.backend.name == backend.name
    row = pickle.loads(pickle.dumps(m[2]))  # a view: a mirror of its data
    assert type(row) is gpubuf.Mirror and row.pending_ranges == [(12, 16)]
    strided = pickle.loads(pickle.dumps(m[:, 1]))
    assert type(strided) is gpubuf.Mirror and strided.tolist() == [1.0, 50.0, 9.0]
    with pytest.raises(ValueError):
        m.resize((4, 3))


def test_copy_and_deepcopy_keep_the_tracking(backend):
    import copy

    m = gpubuf.Mirror(np.arange(12, dtype=np.float32).reshape(3, 4), backend, policy="exact")
    m.sync()
    m[1, 1] = 50.0
    for c in (copy.copy(m), copy.deepcopy(m), copy.deepcopy([m])[0]):
        assert type(c) is gpubuf.Mirror and c.pending_ranges == m.pending_ranges
        assert c.device.backend.name == backend.name
        np.testing.assert_array_equal(c.view(np.ndarray), m.view(np.ndarray))
        c[0, 0] = -1.0  # tracked, and its own data
        assert c.pending_ranges[0] == (0, 4) and m[0, 0] == 0.0
        c.sync()
        np.testing.assert_array_equal(device(c), c.view(np.ndarray))
    row = copy.copy(m[1])
    assert type(row) is gpubuf.Mirror and row.pending_ranges == [(4, 8)]
    plain = copy.copy(np.asarray(m).view(gpubuf.Mirror))  # no mirror's data: plain numpy
    assert type(plain) is np.ndarray
