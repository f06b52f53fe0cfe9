"""Bufferizer: dolphin's API, its hook order, all-or-nothing appends, hostile inputs, no leaks."""

import gc
from types import SimpleNamespace
import tracemalloc

import numpy as np
import pytest

import gpubuf


def frames(n, shape=(2, 3), start=0, dtype=np.float32):
    size = int(np.prod(shape))
    return np.arange(start, start + n * size, dtype=dtype).reshape((n, *shape))


def test_appends_fill_the_buffer_in_order(backend):
    b = gpubuf.Bufferizer((2, 3), 5, "float32", backend)
    assert (len(b), b.len(), b.buffer_size, b.shape, b.element_shape) == (0, 0, 5, (5, 2, 3), (2, 3))
    assert b.dtype == np.float32 and b.element_nbytes == 24 and b.nbytes == 120
    assert b.backend.name == backend.name and not b.full
    data = frames(5)
    b.append_one(data[0])
    b.append_multiple(data[1:3])
    b.append(data[3])  # one element
    b.append(data[4:5])  # a batch of one
    assert len(b) == 5 and b.full
    np.testing.assert_array_equal(b.buffer.to_numpy(), data)
    assert isinstance(b.buffer, gpubuf.NDBuffer) and b.buffer.shape == (5, 2, 3)
    b.flush()
    assert len(b) == 0 and not b.full
    np.testing.assert_array_equal(b.buffer.to_numpy(), np.zeros((5, 2, 3), np.float32))
    b.append_one(data[1])
    np.testing.assert_array_equal(b.filled.to_numpy(), data[1:2])
    b.flush(7)
    np.testing.assert_array_equal(b.buffer.to_numpy(), np.full((5, 2, 3), 7, np.float32))


def test_inputs_ndbuffer_dlpack_list_and_strided(backend):
    b = gpubuf.Bufferizer(4, 6, np.int32, backend)
    data = np.arange(24, dtype=np.int32).reshape(6, 4)
    b.append(gpubuf.NDBuffer.from_numpy(data[0], backend))  # device array
    b.append(gpubuf.NDBuffer.from_numpy(data[1:3]))  # CPU array, any bufferizer backend
    b.append_one(np.from_dlpack(data[3]))  # an object with __dlpack__
    b.append([data[4], gpubuf.NDBuffer.from_numpy(data[5], backend)])  # a list, one hook
    np.testing.assert_array_equal(b.buffer.to_numpy(), data)
    b.flush()
    t = data.T.copy()  # strided inputs on both sides
    b.append(np.ascontiguousarray(t).T[:3])
    b.append(data[::-2][:2])
    np.testing.assert_array_equal(b.filled.to_numpy(), np.concatenate([data[:3], data[::-2][:2]]))


def test_hooks_run_in_dolphins_order(backend):
    calls = []

    def hook(name):
        return lambda bz: calls.append((name, len(bz)))

    b = gpubuf.Bufferizer(
        (2,), 3, "float64", backend,
        flush_hook=hook("flush"), allocate_hook=hook("allocate"),
        append_one_hook=hook("one"), append_multiple_hook=hook("multiple"),
        buffer_full_hook=hook("full"),
    )
    assert calls == []  # not for the first allocation, as dolphin
    b.append(np.ones(2))
    b.append(np.ones((2, 2)))
    assert calls == [("one", 1), ("multiple", 3), ("full", 3)]
    calls.clear()
    b.flush()
    b.allocate()
    assert calls == [("flush", 0), ("allocate", 0), ("flush", 0)]
    calls.clear()
    b.append([np.ones(2)] * 3)
    b.append_multiple(np.ones((0, 2)))  # nothing appended: no hook
    b.append([])
    assert calls == [("multiple", 3), ("full", 3)]
    b.buffer_full_hook(None)
    b.append_one_hook(hook("one again"))
    b.clear()
    calls.clear()
    b.append_one(np.ones(2))
    assert calls == [("one again", 1)]


def test_a_hook_may_flush_and_a_raising_hook_leaves_it_usable(backend):
    seen = []

    def consume(bz):
        seen.append(bz.buffer.to_numpy().copy())
        bz.flush()

    b = gpubuf.Bufferizer(1, 2, "float32", backend, buffer_full_hook=consume)
    for v in range(5):
        b.append_one(np.array([v], np.float32))
    assert len(b) == 1 and [s.ravel().tolist() for s in seen] == [[0, 1], [2, 3]]

    class Boom(Exception):
        pass

    def boom(bz):
        raise Boom("from the hook")

    b.append_one_hook(boom)
    with pytest.raises(Boom):
        b.append_one(np.array([9], np.float32))  # the append is complete; full hook not run
    assert len(b) == 2 and len(seen) == 2
    b.append_one_hook(None)
    b.flush()
    b.append_one(np.array([4], np.float32))
    assert len(b) == 1 and b.filled.to_numpy().tolist() == [[4]]


def test_failed_appends_change_nothing(backend):
    calls = []
    b = gpubuf.Bufferizer((2, 2), 3, "float32", backend,
                          append_one_hook=calls.append, append_multiple_hook=calls.append)
    good = frames(2, (2, 2))
    b.append_one(good[0])
    before = b.buffer.to_numpy().copy()
    calls.clear()
    bad = [
        (gpubuf.ShapeMismatchError, lambda: b.append_one(np.ones((2, 3), np.float32))),
        (gpubuf.ShapeMismatchError, lambda: b.append(np.ones((4,), np.float32))),
        (gpubuf.ShapeMismatchError, lambda: b.append_multiple(np.ones((2, 2), np.float32))),
        (gpubuf.DTypeMismatchError, lambda: b.append_one(np.ones((2, 2), np.float64))),
        (gpubuf.DTypeMismatchError, lambda: b.append_one(np.ones((2, 2), np.int8))),
        (gpubuf.DTypeMismatchError, lambda: b.append_one(np.ones((2, 2), np.longdouble))),
        (gpubuf.DTypeMismatchError, lambda: b.append([good[0], np.ones((2, 2))])),
        (gpubuf.CapacityError, lambda: b.append_multiple(frames(3, (2, 2)))),
        (gpubuf.CapacityError, lambda: b.append([good[0]] * 3)),
        (gpubuf.ShapeMismatchError, lambda: b.append([good[0], np.ones((3, 2), np.float32)])),
        (gpubuf.InvalidArgumentError, lambda: b.flush("x")),
    ]
    for err, call in bad:
        with pytest.raises(err):
            call()
        assert len(b) == 1 and calls == []
        np.testing.assert_array_equal(b.buffer.to_numpy(), before)
    b.append_multiple(good)
    assert b.full and len(calls) == 1
    with pytest.raises(gpubuf.CapacityError):
        b.append_one(good[0])


def test_hostile_construction(backend):
    cases = [
        (gpubuf.InvalidArgumentError, ((2,), 0, "float32")),
        (gpubuf.InvalidArgumentError, ((2,), -1, "float32")),
        (gpubuf.InvalidArgumentError, ((-2,), 4, "float32")),
        (gpubuf.InvalidArgumentError, ((2,), 2**70, "float32")),
        (gpubuf.InvalidArgumentError, ((2**40, 2**40), 2**20, "float32")),
        (gpubuf.InvalidArgumentError, ((2,), "4", "float32")),
        (gpubuf.DTypeMismatchError, ((2,), 4, "clongdouble")),
        (gpubuf.DTypeMismatchError, ((2,), 4, "not a dtype")),
    ]
    for err, args in cases:
        with pytest.raises(err):
            gpubuf.Bufferizer(*args, backend)
    with pytest.raises((gpubuf.OutOfMemoryError, gpubuf.InvalidArgumentError)):
        gpubuf.Bufferizer((2**31, 2**20), 2**10, "float64", backend)
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.Bufferizer((2,), 4, "float32", backend, flush_hook=3)
    for dtype, value in (("uint8", 300), ("uint8", -1), ("int32", 2**31), ("float16", 1e5),
                         ("float32", 1e300), ("int64", 1.5), ("complex64", 1e300 + 1j),
                         ("complex64", complex(1, 1e300)), ("complex128", "1+2j")):
        b = gpubuf.Bufferizer((2,), 4, dtype, backend)
        b.append_one(np.ones(2, dtype))
        with pytest.raises(gpubuf.InvalidArgumentError):
            b.flush(value)
        assert len(b) == 1 and b.buffer.to_numpy()[0].tolist() == [1, 1]
    b = gpubuf.Bufferizer((2,), 4, "float16", backend)
    b.flush(float("inf"))
    assert np.isinf(b.buffer.to_numpy()).all()
    for dtype in ("complex64", "complex128"):  # complex flush values, real ones widened
        for value, want in ((5 - 6j, 5 - 6j), (np.float32(2.5), 2.5 + 0j), (np.complex128(-1j), -1j)):
            b = gpubuf.Bufferizer((2,), 3, dtype, backend)
            b.flush(value)
            got = b.buffer.to_numpy()
            assert got.dtype == np.dtype(dtype) and (got == want).all()


def test_zero_length_elements(backend):
    calls = []
    b = gpubuf.Bufferizer((0, 3), 2, "float32", backend, buffer_full_hook=calls.append)
    assert b.element_nbytes == 0 and b.nbytes == 0
    b.append(np.empty((0, 3), np.float32))
    b.append(np.empty((1, 0, 3), np.float32))
    assert b.full and len(calls) == 1 and b.buffer.shape == (2, 0, 3)
    with pytest.raises(gpubuf.CapacityError):
        b.append_one(np.empty((0, 3), np.float32))


def test_take_batch_double_buffers(backend):
    b = gpubuf.Bufferizer(2, 2, "float32", backend)
    b.append(np.array([[1, 2], [3, 4]], np.float32))
    batch = b.take_batch()
    assert len(b) == 0
    b.append(np.array([[5, 6], [7, 8]], np.float32))
    np.testing.assert_array_equal(batch.to_numpy(), [[1, 2], [3, 4]])


def test_hooks_do_not_leak_and_cycles_are_collected(backend):
    b = gpubuf.Bufferizer(4, 8, "float32", backend)
    b.buffer_full_hook(lambda bz: bz.flush())
    one = np.ones(4, np.float32)
    for _ in range(200):
        b.append_one(one)
    tracemalloc.start()
    gc.collect()
    start = tracemalloc.get_traced_memory()[0]
    for _ in range(10_000):
        b.append_one(one)
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - start
    tracemalloc.stop()
    assert grown < 64 * 1024, grown
    # A hook that refers to its bufferizer makes a cycle that the collector frees.
    import weakref

    class Owner:
        pass

    o = Owner()
    o.b = gpubuf.Bufferizer(4, 8, "float32", backend, flush_hook=lambda bz: o)
    ref = weakref.ref(o)
    del o
    gc.collect()
    assert ref() is None


def doc_snippets(heading):
    """The python blocks of one section of docs/python.md."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / "python.md").read_text()
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    return [block.split("```", 1)[0] for block in section.split("```python\n")[1:]]


def test_the_documented_example_runs():
    snippets = doc_snippets("## Batches: `gpubuf.Bufferizer`")
    assert snippets
    for code in snippets:
        exec(compile(code, "docs/python.md", "exec"), {})


def test_an_array_on_another_device_is_a_typed_error(cpu):
    if "opencl" not in gpubuf.available_backends():
        pytest.skip("needs a second backend")
    b = gpubuf.Bufferizer(2, 2, "float32", cpu)
    other = gpubuf.NDBuffer.from_numpy(np.ones(2, np.float32), gpubuf.Backend("opencl"))
    with pytest.raises(gpubuf.DeviceMismatchError):
        b.append_one(other)
    assert len(b) == 0
    b.append_one(other.to_numpy())  # through the host
    assert b.filled.to_numpy().tolist() == [[1, 1]]


def test_dolphins_positional_signature_and_streams(backend):
    calls = []
    # dolphin's order: shape, buffer_size, dtype, stream, flush, allocate, append_one,
    # append_multiple, buffer_full.
    b = gpubuf.Bufferizer(
        (2,), 2, "float32", None,
        lambda bz: calls.append("flush"), lambda bz: calls.append("allocate"),
        lambda bz: calls.append("one"), lambda bz: calls.append("multiple"), lambda bz: calls.append("full"),
        backend=backend,
    )
    assert b.backend.same_device(backend)
    b.append_one(np.ones(2, "float32"))
    b.append_multiple(np.ones((1, 2), "float32"))
    b.allocate()
    assert calls == ["one", "multiple", "full", "allocate", "flush"]
    # A backend in the stream position is the backend; given twice it is refused.
    assert gpubuf.Bufferizer((2,), 2, "float32", backend).backend.same_device(backend)
    with pytest.raises(gpubuf.InvalidArgumentError, match="twice"):
        gpubuf.Bufferizer((2,), 2, "float32", backend, backend=backend)
    if backend.name == "cuda":
        # The legacy default stream (0) is a stream of every CUDA context (real foreign
        # streams: test_cuda_device.py).
        assert gpubuf.Bufferizer((2,), 2, "float32", 0, backend=backend).backend.name == "cuda"
    else:
        # A stream needs CUDA: refused on this backend, whatever the stream object.
        for stream in (0, 7, SimpleNamespace(ptr=7), SimpleNamespace(handle=7)):
            with pytest.raises(gpubuf.DeviceMismatchError, match="CUDA stream"):
                gpubuf.Bufferizer((2,), 2, "float32", stream, backend=backend)
    for bad in ("stream", 2.5, True, SimpleNamespace(ptr="x"), SimpleNamespace(__cuda_stream__=lambda: 3)):
        with pytest.raises(gpubuf.InvalidArgumentError):
            gpubuf.Bufferizer((2,), 2, "float32", bad, backend=backend)


def test_a_cuda_array_off_cuda_is_refused_without_its_pointer(backend):
    """An append of an object with ``__cuda_array_interface__`` (numba's, pycuda's) goes to a
    CUDA bufferizer's backend, which refuses a pointer that is no allocation of its context;
    any other backend refuses it before its pointer is used."""
    b = gpubuf.Bufferizer((2,), 2, "float32", backend=backend)
    fake = SimpleNamespace(
        __cuda_array_interface__={"shape": (2,), "typestr": "<f4", "data": (12345, False), "version": 3}
    )
    expected = "not device memory" if backend.name == "cuda" else "CUDA backend"
    with pytest.raises(gpubuf.InvalidArgumentError, match=expected):
        b.append_one(fake)
    assert len(b) == 0
    b.append_one(np.ones(2, np.float32))
    assert len(b) == 1


@pytest.mark.skipif("cuda" in gpubuf.available_backends(), reason="CUDA can run here")
def test_a_stream_without_cuda_is_backend_unavailable():
    with pytest.raises(gpubuf.BackendUnavailableError):
        gpubuf.Bufferizer((2,), 2, "float32", 0)
