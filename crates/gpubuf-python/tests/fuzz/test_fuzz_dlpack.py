"""Fuzz: DLPack both ways, and hostile DLPack producers.

- Out: on the CPU ``numpy.from_dlpack(a)`` is ``a``'s values in ``a``'s memory, for every
  layout; ``__dlpack__``'s keywords follow docs/python.md (``BufferError`` for a stream,
  another ``dl_device`` or ``copy=True``); on OpenCL both methods raise ``BufferError``.
- In: ``gpubuf.from_dlpack(x)`` of numpy arrays of every layout is numpy's values, or the
  error ``numpy.from_dlpack(x)`` raises.
- Hostile capsules (ctypes structs with any ndim, extents, strides, dtype codes, devices,
  data pointers and byte offsets): the tensor reader (``_read_dlpack_capsule``, the CUDA
  import's) returns exactly the numbers or raises ``InvalidArgumentError`` /
  ``DTypeMismatchError`` without reading the data; ``gpubuf.from_dlpack`` refuses a
  kDLCUDA producer on other backends before asking it for a capsule, and otherwise gives
  numpy's values or numpy's error (``DTypeMismatchError`` for a dtype gpubuf lacks).
"""

import operator

import numpy as np
import pytest
from hypothesis import strategies as st

import gpubuf
from fuzz_strategies import build, numpy_source, sources
from gpubuf_fuzz import DTYPES, expect_error, load_corpus, outcome, run, same
from hostile import BUF, BUF_LEN, MAX_NDIM, Producer, address, capsule

pytestmark = pytest.mark.fuzz
native = gpubuf._gpubuf

STREAMS = [None, 0, 1, 2, -1, -2, 2**63, 2**64, True, 1.5, "1", object()]
DEVICES = [None, (1, 0), (1, 1), (2, 0), (1, 0, 0), [1, 0], (1.0, 0), ("1", 0), (1, 2**40), 1]

# The models here are of the CPU and OpenCL backends; CUDA's DLPack and CUDA array
# interface are checked against CuPy and PyTorch on a GPU (test_cuda_device.py).
CUDA_SKIP = "the model covers cpu and opencl; CUDA is checked in test_cuda_device.py"



def _dl_device_is_cpu(d):
    if type(d) is not tuple or len(d) != 2:
        return False
    try:
        return tuple(operator.index(v) for v in d) == (1, 0)
    except TypeError:
        return False


def export(case, backend):
    source, stream, dl_device, copy = case
    a, x = build(source, backend)
    call = lambda: a.__dlpack__(stream=stream, dl_device=dl_device, copy=copy)  # noqa: E731
    if backend.name != "cpu":
        expect_error(call, BufferError, "__dlpack__ off the CPU")
        expect_error(a.__dlpack_device__, BufferError, "__dlpack_device__ off the CPU")
        return
    assert a.__dlpack_device__() == (1, 0)
    if (dl_device is not None and not _dl_device_is_cpu(dl_device)) or copy is True or stream is not None:
        expect_error(call, BufferError, f"__dlpack__({stream!r}, {dl_device!r}, {copy!r})")
    else:
        read = native._read_dlpack_capsule(call())
        assert read[0] == (1, 0) and read[1] == str(x.dtype) and tuple(read[2]) == x.shape
    y = np.from_dlpack(a)
    same(y, x)
    if y.size:
        assert np.shares_memory(y, np.asarray(a))
    same(gpubuf.from_dlpack(a, backend), x)


def test_dlpack_export(clock, backend):
    if backend.name == "cuda":
        pytest.skip(CUDA_SKIP)
    cases = st.tuples(sources(), st.sampled_from(STREAMS), st.sampled_from(DEVICES), st.sampled_from([None, False, True]))
    run(*clock, export, cases, load_corpus("dlpack_export"), backend)


def import_numpy(case, backend):
    shape, dtype, np_key, aligned = case
    x = numpy_source(shape, dtype, np_key, aligned)
    if not aligned and x.size and np.random.default_rng(x.size).integers(2):
        x.flags.writeable = False
    kind, expected = outcome(lambda: np.from_dlpack(x))
    if kind == "err":
        expect_error(lambda: gpubuf.from_dlpack(x, backend), type(expected), "numpy refused it")
        return
    same(gpubuf.from_dlpack(x, backend), expected)


def test_dlpack_import(clock, backend):
    cases = sources(gb_views=False).map(lambda s: s[:4])
    run(*clock, import_numpy, cases, load_corpus("dlpack_import"), backend)


GOOD_DTYPES = {(0, 8, 1): "int8", (0, 16, 1): "int16", (1, 16, 1): "uint16", (1, 64, 1): "uint64",
               (0, 32, 1): "int32", (0, 64, 1): "int64", (1, 8, 1): "uint8", (1, 32, 1): "uint32",
               (2, 16, 1): "float16", (2, 32, 1): "float32", (2, 64, 1): "float64", (6, 8, 1): "bool",
               (5, 64, 1): "complex64", (5, 128, 1): "complex128"}


@st.composite
def tensors(draw):
    ndim = draw(st.one_of(st.integers(0, 4), st.sampled_from([-1, -(2**31), MAX_NDIM, MAX_NDIM + 1])))
    n = max(0, min(ndim, MAX_NDIM))
    extents = st.one_of(st.integers(0, 5), st.sampled_from([-1, 2**31, 2**62, 2**63 - 1, -(2**63)]))
    strides = st.one_of(st.integers(-6, 6), st.sampled_from([2**62, -(2**62), 2**63 - 1, -(2**63)]))
    dtype = draw(st.one_of(st.sampled_from(sorted(GOOD_DTYPES)), st.tuples(
        st.sampled_from([0, 1, 2, 3, 4, 5, 6, 255]), st.sampled_from([0, 1, 7, 8, 16, 32, 64, 128, 255]),
        st.sampled_from([0, 1, 2, 4, 65535]))))
    return {
        "ndim": ndim,
        "shape": draw(st.lists(extents, min_size=n, max_size=n)),
        "shape_null": draw(st.integers(0, 9)) == 0,
        "strides": draw(st.one_of(st.none(), st.lists(strides, min_size=n, max_size=n))),
        "dtype": dtype,
        "device": draw(st.sampled_from([(1, 0), (1, 0), (2, 0), (2, 3), (4, 0), (1, 7), (-1, 0)])),
        "data": draw(st.sampled_from([("buf", 0), ("buf", 0), ("buf", 64), ("buf", 1), ("abs", 0), ("abs", 2**64 - 8)])),
        "byte_offset": draw(st.sampled_from([0, 0, 8, 24, 2**63, 2**64 - 1])),
    }


def read_model(t):
    """What ``_read_dlpack_capsule`` must return, or the error classes it may raise."""
    errors = set()
    if t["ndim"] < 0 or (t["ndim"] > 0 and t["shape_null"]):
        return {gpubuf.InvalidArgumentError}
    shape = t["shape"][: t["ndim"]]
    if any(n < 0 for n in shape):
        errors.add(gpubuf.InvalidArgumentError)
    if t["strides"] is None:
        if int(np.prod([max(n, 1) for n in shape], dtype=object)) >= 2**63:
            errors.add(gpubuf.InvalidArgumentError)  # no layout has that many elements
        strides, acc = [], 1
        for n in reversed(shape):
            strides.insert(0, acc)
            acc *= max(n, 1)
    else:
        strides = t["strides"][: t["ndim"]]
    if address(t) + t["byte_offset"] >= 2**64:
        errors.add(gpubuf.InvalidArgumentError)
    if tuple(t["dtype"]) not in GOOD_DTYPES:
        errors.add(gpubuf.DTypeMismatchError)
    if errors:
        return errors
    return (tuple(t["device"]), GOOD_DTYPES[tuple(t["dtype"])], shape, strides, address(t) + t["byte_offset"])


def in_buf(t):
    """Whether every element the tensor describes lies in ``BUF`` (so numpy may read it)."""
    if t["ndim"] < 0 or t["ndim"] > MAX_NDIM or (t["ndim"] and t["shape_null"]):
        return False
    shape = t["shape"][: t["ndim"]]
    code, bits, lanes = t["dtype"]
    if any(n < 0 for n in shape) or bits % 8 or lanes != 1 or bits == 0:
        return False
    if 0 in shape:
        return True
    item = bits // 8
    strides = t["strides"][: t["ndim"]] if t["strides"] is not None else None
    if strides is None:
        strides, acc = [], 1
        for n in reversed(shape):
            strides.insert(0, acc)
            acc *= n
    start = address(t) + t["byte_offset"]
    low = start + sum(min(0, s * (n - 1)) for n, s in zip(shape, strides)) * item
    high = start + sum(max(0, s * (n - 1)) for n, s in zip(shape, strides)) * item + item
    return BUF <= low and high <= BUF + BUF_LEN


def hostile_capsule(case, backend):
    t, kind, device = case
    want = read_model(t)
    got = outcome(lambda: native._read_dlpack_capsule(capsule(t)))
    if isinstance(want, set):
        assert got[0] == "err" and type(got[1]) in want, f"{got!r}, expected one of {want}"
    else:
        assert got[0] == "ok", f"{got[1]!r}, expected {want}"
        device_, dtype, shape, strides, data = got[1]
        assert (device_, dtype, list(shape), list(strides), data) == (want[0], want[1], list(want[2]), list(want[3]), want[4])
    dev = {"same": tuple(t["device"]), "cuda": (2, 0)}.get(kind, device)
    p = Producer(t, dev)
    if type(dev) is not tuple or len(dev) != 2 or not all(type(v) is int for v in dev):
        expect_error(lambda: gpubuf.from_dlpack(p, backend), gpubuf.InvalidArgumentError, f"device {dev!r}")
        assert p.calls == 0, "the producer was asked for a capsule"
        return
    if dev[0] == 2:
        expect_error(lambda: gpubuf.from_dlpack(p, backend), gpubuf.InvalidArgumentError, "a kDLCUDA producer")
        assert p.calls == 0, "the producer was asked for a capsule"
        return
    if not in_buf(t) and t["device"][0] == 1:
        return  # numpy trusts the numbers and would read outside BUF
    kind_np, expected = outcome(lambda: np.from_dlpack(Producer(t, dev)))
    kind_gb, got = outcome(lambda: gpubuf.from_dlpack(p, backend))
    if kind_np == "err":
        assert kind_gb == "err" and isinstance(got, (type(expected), gpubuf.GpubufError)), f"{got!r} vs numpy {expected!r}"
    elif str(expected.dtype) not in DTYPES or expected.dtype.byteorder == ">":
        assert kind_gb == "err" and isinstance(got, gpubuf.DTypeMismatchError), repr(got)
    else:
        assert kind_gb == "ok", repr(got)
        same(got, expected)


def test_hostile_dlpack(clock, backend):
    if backend.name == "cuda":
        pytest.skip(CUDA_SKIP)
    devices = st.sampled_from([(1, 0), (4, 0), (2, 1), "x", None, (1,), (1.5, 0), (1, 0, 0)])
    cases = st.tuples(tensors(), st.sampled_from(["same", "same", "cuda", "other"]), devices)
    run(*clock, hostile_capsule, cases, load_corpus("hostile_dlpack"), backend)


def stream_rule(case, _backend):
    device_type, stream = case
    rule = lambda: native._dlpack_consumer_stream(device_type, stream)  # noqa: E731
    if device_type != 2:
        if stream is None:
            assert rule() is None
        else:
            expect_error(rule, BufferError, f"stream {stream!r} on the host")
        return
    if stream is None:
        assert rule() == 1
        return
    try:
        n = None if isinstance(stream, bool) else operator.index(stream)
    except TypeError:
        n = None
    if n is not None and (n == -1 or 0 < n < 2**64):
        assert rule() == (None if n == -1 else n)
    else:
        expect_error(rule, gpubuf.InvalidArgumentError, f"stream {stream!r}")


def test_dlpack_stream_rules(clock, backend):
    streams = st.one_of(st.integers(-(2**70), 2**70), st.sampled_from(STREAMS + [np.int64(5), 2**64 - 1]))
    run(*clock, stream_rule, st.tuples(st.sampled_from([1, 2, 4, 0, -1]), streams), [], backend)
