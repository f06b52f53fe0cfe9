"""Fuzz: hostile ``__cuda_array_interface__`` and ``__array_interface__`` objects.

- CUDA array interface dicts with missing keys, wrong types, huge and negative numbers,
  unknown versions, read-only flags, masks, streams and strides that are not whole
  elements: ``_parse_cuda_array_interface`` returns exactly what ``interface_model.parse``
  says or raises one of its error classes; ``from_cuda_array_interface`` and
  ``gpubuf.from_dlpack`` refuse every object on a backend that is not CUDA and without a
  CUDA device (``BackendUnavailableError``) before any pointer is used.
- numpy array interface objects over ``BUF``: ``from_numpy`` gives what ``numpy.asarray``
  gives (its error where it refuses, ``DTypeMismatchError`` for a dtype gpubuf lacks),
  shares writeable aligned C-contiguous memory on the CPU, and never writes memory the
  interface marks read-only.
"""

import numpy as np
import pytest
from hypothesis import strategies as st

import gpubuf
import interface_model
from gpubuf_fuzz import expect_error, load_corpus, outcome, run, same
from hostile import BUF, BUF_LEN, Interface

pytestmark = pytest.mark.fuzz
native = gpubuf._gpubuf
CUDA = "cuda" in gpubuf.available_backends()

TYPESTRS = ["<f8", "<f4", "<f2", "|u1", "<i4", "<u4", "<i8", ">f8", "<c16", "|b1", "|i1", "<u8", "x", 7, float,
            "f8", np.dtype("float32"), [("a", "<f8")]]
BAD_NUMBERS = [-1, 2**63, 2**64, 2**127, -(2**127) - 1, 1.5, "3", None, True, np.int64(2), np.float64(2.0)]

# The models here are of the CPU and OpenCL backends; CUDA's DLPack and CUDA array
# interface are checked against CuPy and PyTorch on a GPU (test_cuda_device.py).
CUDA_SKIP = "the model covers cpu and opencl; CUDA is checked in test_cuda_device.py"



@st.composite
def cuda_dicts(draw):
    shape = tuple(draw(st.lists(st.integers(0, 5), max_size=3)))
    typestr = draw(st.sampled_from(TYPESTRS[:7] * 3 + TYPESTRS[7:]))
    item = np.dtype(typestr).itemsize if isinstance(typestr, str) and typestr[1:] in ("f8", "f4", "f2", "u1", "i4", "u4", "i8") else 8
    strides = None
    if draw(st.booleans()):
        strides = tuple(draw(st.sampled_from([item, -item, 2 * item, 0, item * 7, 3])) for _ in shape)
    ptr = draw(st.sampled_from([0x7F00_0000_0000, 0x10, 0, 2**64 - 8, 2**63]))
    d = {"version": draw(st.integers(0, 3)), "shape": shape, "typestr": typestr, "data": (ptr, False),
         "strides": strides, "stream": draw(st.sampled_from([None, 1, 2, 0x7F00_1234_0000]))}
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(["version", "shape", "typestr", "data", "strides", "stream", "mask"]))
        how = draw(st.sampled_from(["drop", "number", "odd"]))
        if how == "drop":
            d.pop(key, None)
        elif how == "number":
            v = draw(st.sampled_from(BAD_NUMBERS))
            d[key] = {"shape": shape + (v,), "strides": (strides or ()) + (v,), "data": (v, False)}.get(key, v)
        else:
            d[key] = draw(st.sampled_from({
                "version": [4, -1, "3", 3.0],
                "shape": [list(shape), "12", 5, shape + (1.5,), (np.int64(2),), np.array(shape, dtype=np.int64)],
                "typestr": TYPESTRS,
                "data": [(ptr, True), (ptr,), (ptr, False, 1), ptr, (ptr, 0), (ptr, "no"), ("x", False), [ptr, False]],
                "strides": [(1,) * (len(shape) + 1), "ab", tuple(2**63 for _ in shape), tuple(5 for _ in shape)],
                "stream": [0, -1, 2**64, "s", 1.5, True, False],
                "mask": [None, np.zeros(shape, bool), 1],
            }[key]))
    form = draw(st.sampled_from(["dict"] * 8 + ["list", "none", "raising"]))
    return {"dict": d, "list": list(d.items()), "none": None, "raising": "raising"}[form]


def hostile_cuda(case, backend):
    d = RuntimeError("the producer failed") if case == "raising" else case
    want = interface_model.parse(d) if isinstance(d, dict) or d is None or isinstance(d, list) else {gpubuf.InvalidArgumentError}
    if case == "raising":
        want = {gpubuf.InvalidArgumentError}
    if case is not None and case != "raising":
        got = outcome(lambda: native._parse_cuda_array_interface(d))
        if isinstance(want, set):
            assert got[0] == "err" and type(got[1]) in want, f"{got!r}, expected one of {want}"
        else:
            assert got[0] == "ok", f"{got[1]!r}, expected {want}"
            assert [list(v) if isinstance(v, (list, tuple)) else v for v in got[1]] == [
                list(v) if isinstance(v, (list, tuple)) else v for v in want
            ]
    obj = Interface("__cuda_array_interface__", d)
    refused = want if isinstance(want, set) else {gpubuf.InvalidArgumentError}
    expect_error(lambda: gpubuf.NDBuffer.from_cuda_array_interface(obj, backend), tuple(refused), "a CUDA array off CUDA")
    if not CUDA:
        off = want if isinstance(want, set) else {gpubuf.BackendUnavailableError}
        expect_error(lambda: gpubuf.NDBuffer.from_cuda_array_interface(obj), tuple(off), "no CUDA device")
        # A producer's own exception from the attribute propagates through hasattr.
        off = off | ({RuntimeError} if case == "raising" else set())
        expect_error(lambda: gpubuf.from_dlpack(obj), tuple(off), "no CUDA device")
    np_kind, np_err = outcome(lambda: np.from_dlpack(obj))
    assert np_kind == "err"
    expect_error(lambda: gpubuf.from_dlpack(obj, backend), type(np_err), "numpy's refusal")


def test_hostile_cuda_array_interface(clock, backend):
    if backend.name == "cuda":
        pytest.skip(CUDA_SKIP)
    run(*clock, hostile_cuda, cuda_dicts(), load_corpus("cuda_interface"), backend)


@st.composite
def host_interfaces(draw):
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    typestr = draw(st.sampled_from(["<f8", "<f4", "<f2", "|u1", "<i4", "<u4", "<i8"] * 2 + ["<c8", "|b1", ">f8", "<i2"]))
    item = np.dtype(typestr).itemsize
    strides = None
    if draw(st.booleans()):
        strides = tuple(draw(st.sampled_from([item, -item, 2 * item, 0, item + 1])) for _ in shape)
    offset = draw(st.sampled_from([0, 0, 1, 8, 64]))
    readonly = draw(st.booleans())
    d = {"version": 3, "shape": shape, "typestr": typestr, "data": ["buf", offset, readonly], "strides": strides}
    mutation = draw(st.sampled_from([None] * 4 + ["version", "shape", "typestr", "data", "strides", "descr"]))
    if mutation:
        d[mutation] = draw(st.sampled_from({
            "version": [2, 4, "3", None],
            "shape": [(-1,), (1.5,), "3", None, shape + (-2,)],
            "typestr": ["x", 5, "<V8"],  # not "|O": numpy would take BUF's bytes for pointers
            "data": [None, 5, ("buf", offset), ["buf", offset, "no"]],
            "strides": [(1,) * (len(shape) + 1), (1.5,) * len(shape), "ab"],
            "descr": [[("", typestr)], 5, [("a", "<f8"), ("b", "<i4")]],
        }[mutation]))
    return d


def resolve(d):
    """The case's dict with ``["buf", offset, readonly]`` data made a real pointer."""
    d = dict(d)
    data = d.get("data")
    if isinstance(data, list) and data[:1] == ["buf"]:
        d["data"] = (BUF + 256 + data[1], data[2])
    return d


def in_bounds(d):
    """Whether numpy may read every element ``d`` describes (True where numpy will refuse
    the numbers before reading)."""
    try:
        shape = tuple(int(n) for n in d["shape"])
        item = max(np.dtype(d["typestr"]).itemsize, 16)
        strides = d["strides"] or tuple(int(np.prod(shape[k + 1 :])) * item for k in range(len(shape)))
        start = d["data"][0]
        if 0 in shape or len(strides) != len(shape) or not isinstance(start, int):
            return True
        low = start + sum(min(0, int(s) * (n - 1)) for n, s in zip(shape, strides))
        high = start + sum(max(0, int(s) * (n - 1)) for n, s in zip(shape, strides)) + item
    except Exception:  # noqa: BLE001 - numpy refuses what this cannot read
        return True
    return BUF <= low and high <= BUF + BUF_LEN


def host_interface(case, backend):
    d = resolve(case)
    if not in_bounds(d):
        return
    obj = Interface("__array_interface__", d)
    kind, ref = outcome(lambda: np.asarray(obj))
    if kind == "err":
        expect_error(lambda: gpubuf.NDBuffer.from_numpy(obj, backend), type(ref), "numpy refused it")
        return
    expected = ref.copy()
    if ref.dtype.str not in interface_model.GOOD:
        expect_error(lambda: gpubuf.NDBuffer.from_numpy(obj, backend), gpubuf.DTypeMismatchError, str(ref.dtype))
        return
    a = gpubuf.NDBuffer.from_numpy(obj, backend)
    same(a, expected)
    # gpubuf shares C-contiguous, writeable, 8-byte aligned memory whose strides are whole
    # elements (also on axes of one element, where numpy's flag ignores them).
    shared = (backend.name == "cpu" and ref.flags.c_contiguous and ref.flags.writeable and ref.size
              and ref.ctypes.data % 8 == 0 and all(s % ref.itemsize == 0 for s in ref.strides))
    if backend.name == "cpu" and ref.size:
        assert bool(np.shares_memory(np.asarray(a), ref)) == bool(shared), "shared exactly when it may be"
    if not shared:
        expect_error(lambda: gpubuf.NDBuffer.from_numpy(obj, backend, copy=False), gpubuf.InvalidArgumentError, "copy=False")
    a.fill(0)
    if not ref.flags.writeable or not shared:
        same(ref, expected)  # read-only or copied memory is never written
    else:
        same(ref, np.zeros_like(expected))
        ref[...] = expected


def test_hostile_array_interface(clock, backend):
    run(*clock, host_interface, host_interfaces(), load_corpus("array_interface"), backend)
