"""The CUDA array interface (version 3): absent on arrays outside CUDA memory, and the
dict gpubuf builds and reads, checked through the pure functions both directions use
(no CUDA device is needed)."""

import numpy as np
import pytest

import gpubuf
from gpubuf._gpubuf import _cuda_array_interface, _parse_cuda_array_interface


class Exporter:
    """An object exposing a given interface dict, as CuPy or Numba arrays do."""

    def __init__(self, **entries):
        self.__cuda_array_interface__ = {"version": 3, "stream": None, **entries}


def test_absent_outside_cuda(backend):
    if backend.name == "cuda":
        pytest.skip("CUDA arrays have the interface (test_cuda_device.py)")
    a = gpubuf.NDBuffer.zeros((3, 4), "float32", backend=backend)
    assert not hasattr(a, "__cuda_array_interface__")
    with pytest.raises(AttributeError, match="not CUDA"):
        a.__cuda_array_interface__


def test_dict_of_contiguous_strided_and_empty_arrays():
    d = _cuda_array_interface((3, 4), (32, 8), "float64", 0x7F0000001000, 0x55)
    assert d == {
        "version": 3,
        "shape": (3, 4),
        "typestr": "<f8",
        "data": (0x7F0000001000, False),
        "strides": None,  # C-contiguous
        "stream": 0x55,
    }
    t = _cuda_array_interface((4, 3), (8, 32), np.float64, 0x1000)
    assert t["strides"] == (8, 32) and t["stream"] is None
    flipped = _cuda_array_interface((3,), (-4,), "int32", 0x1008)
    assert flipped["strides"] == (-4,) and flipped["typestr"] == "<i4"
    # Axes of extent 1 place no constraint, as in numpy.
    assert _cuda_array_interface((1, 4), (999, 2), "float16", 0x10)["strides"] is None
    empty = _cuda_array_interface((0, 5), (40, 8), "float64", 0x1000, 7)
    assert empty["data"] == (0, False) and empty["strides"] is None
    # The protocol reserves stream 0; a null handle is the legacy default stream, 1.
    assert _cuda_array_interface((2,), (1,), "uint8", 0x10, 0)["stream"] == 1
    with pytest.raises(gpubuf.InvalidArgumentError):
        _cuda_array_interface((2, 2), (8,), "float64", 0x10)
    with pytest.raises(gpubuf.DTypeMismatchError):
        _cuda_array_interface((2,), (32,), "clongdouble", 0x10)


def test_parse_reads_what_export_writes():
    for shape, strides, dtype in [((3, 4), (32, 8), "float64"), ((4, 3), (8, 32), "float32"), ((5,), (-4,), "int32")]:
        d = _cuda_array_interface(shape, strides, dtype, 0x10000, 9)
        name, got_shape, base, nbytes, elem_strides, offset, stream = _parse_cuda_array_interface(d)
        item = np.dtype(dtype).itemsize
        assert (name, got_shape, stream) == (dtype, list(shape), 9)
        assert elem_strides == [s // item for s in strides]
        # The span starts at the lowest addressed element and ends after the highest one.
        low = sum(min(0, s * (n - 1)) for s, n in zip(strides, shape))
        high = sum(max(0, s * (n - 1)) for s, n in zip(strides, shape))
        assert (base, nbytes, offset) == (0x10000 + low, high - low + item, -low // item)


def test_parse_fills_in_c_strides_and_versions():
    d = {"version": 2, "shape": (2, 3), "typestr": "<u4", "data": (0x100, False)}
    assert _parse_cuda_array_interface(d) == ("uint32", [2, 3], 0x100, 24, [3, 1], 0, None)
    d = {"version": 3, "shape": (0, 3), "typestr": "<f8", "data": (0, False), "strides": None}
    assert _parse_cuda_array_interface(d)[3] == 0


@pytest.mark.parametrize(
    "bad",
    [
        {"data": (0x100, True)},  # read-only
        {"mask": object()},
        {"stream": 0},  # reserved
        {"strides": (12, 6)},  # not whole float64 elements
        {"strides": (8,)},  # one stride for two axes
        {"version": 4},
        {"shape": (-1, 2)},
        {"data": None},  # missing
    ],
)
def test_parse_refuses_malformed_dicts(bad):
    d = {"version": 3, "shape": (2, 3), "typestr": "<f8", "data": (0x100, False), **bad}
    with pytest.raises(gpubuf.InvalidArgumentError):
        _parse_cuda_array_interface(d)


def test_parse_refuses_unknown_dtypes():
    with pytest.raises(gpubuf.DTypeMismatchError):
        _parse_cuda_array_interface({"version": 3, "shape": (2,), "typestr": "<c32", "data": (0x100, False)})


def test_import_needs_a_cuda_backend(backend):
    obj = Exporter(shape=(2, 3), typestr="<f8", data=(0x1000, False), strides=None)
    # On CUDA the address itself is refused: it is no device memory of the context.
    match = "not device memory" if backend.name == "cuda" else "CUDA backend"
    with pytest.raises(gpubuf.InvalidArgumentError, match=match):
        gpubuf.NDBuffer.from_cuda_array_interface(obj, backend=backend)
    with pytest.raises(gpubuf.InvalidArgumentError, match="no __cuda_array_interface__"):
        gpubuf.NDBuffer.from_cuda_array_interface(np.zeros(3), backend=backend)


def test_import_without_backend_goes_to_cuda():
    """Without a backend the array goes to the default CUDA device: unavailable here, or,
    with a GPU, refused because the fake pointer is no allocation of it."""
    obj = Exporter(shape=(2, 3), typestr="<f8", data=(0x1000, False), strides=None)
    expected = (gpubuf.BackendUnavailableError, gpubuf.InvalidArgumentError)
    with pytest.raises(expected):
        gpubuf.NDBuffer.from_cuda_array_interface(obj)
    with pytest.raises(expected):
        gpubuf.from_dlpack(obj)
