"""DLPack: the device tuple, the stream argument's rules, the tensor struct built and
read, and a CUDA capsule refused by other backends (the CUDA adoption itself needs a GPU)."""

import gc
import weakref

import numpy as np
import pytest

import gpubuf
from gpubuf import _gpubuf as native

KDLCPU, KDLCUDA = 1, 2


def test_stream_rules_for_cuda():
    rule = native._dlpack_consumer_stream
    assert rule(KDLCUDA, None) == 1  # the legacy default stream
    assert rule(KDLCUDA) == 1
    assert rule(KDLCUDA, 1) == 1
    assert rule(KDLCUDA, 2) == 2  # the per-thread default stream
    assert rule(KDLCUDA, 0x7F0012345678) == 0x7F0012345678
    assert rule(KDLCUDA, -1) is None  # no synchronisation
    for bad in (0, -2, 2**64, True, 1.0, "1"):
        with pytest.raises(gpubuf.InvalidArgumentError):
            rule(KDLCUDA, bad)


def test_stream_rules_for_host_memory(cpu):
    assert native._dlpack_consumer_stream(KDLCPU, None) is None
    with pytest.raises(BufferError):
        native._dlpack_consumer_stream(KDLCPU, 1)
    a = gpubuf.NDBuffer.from_numpy(np.arange(4.0), cpu)
    a.__dlpack__(stream=None)
    with pytest.raises(BufferError):
        a.__dlpack__(stream=1)
    with pytest.raises(BufferError):
        a.__dlpack__(stream=-1)


def test_cpu_capsule_reads_back(cpu):
    x = np.arange(24.0).reshape(4, 6)
    a = gpubuf.NDBuffer.from_numpy(x, cpu)
    flipped = gpubuf.NDBuffer.from_numpy(x[::-1, ::2], cpu)
    device, dtype, shape, strides, data = native._read_dlpack_capsule(a.__dlpack__())
    assert (device, dtype, shape, strides) == ((KDLCPU, 0), "float64", [4, 6], [6, 1])
    assert data == np.asarray(a).ctypes.data
    assert native._read_dlpack_capsule(a.__dlpack__(dl_device=(KDLCPU, 0)))[0] == (KDLCPU, 0)
    with pytest.raises(BufferError):
        a.__dlpack__(dl_device=(KDLCUDA, 0))
    view = np.asarray(flipped)  # a C-order copy of the flipped view (from_numpy copies)
    _, _, shape, strides, data = native._read_dlpack_capsule(flipped.__dlpack__())
    assert (shape, strides, data) == ([4, 3], [3, 1], view.ctypes.data)


def test_cuda_capsule_built_and_read():
    class Token:
        pass

    token = Token()
    alive = weakref.ref(token)
    cap = native._dlpack_capsule([3, 5], [10, 2], "float32", 0x7000_0000_1000, (KDLCUDA, 3), token)
    assert native._read_dlpack_capsule(cap) == ((KDLCUDA, 3), "float32", [3, 5], [10, 2], 0x7000_0000_1000)
    del token
    gc.collect()
    assert alive() is not None  # the unconsumed tensor keeps it
    del cap
    gc.collect()
    assert alive() is None  # the capsule's destructor ran the deleter
    with pytest.raises(gpubuf.InvalidArgumentError):
        native._read_dlpack_capsule(object())
    with pytest.raises(gpubuf.InvalidArgumentError):
        native._dlpack_capsule([3], [1, 1], "float32", 0, (KDLCUDA, 0))
    with pytest.raises(gpubuf.DTypeMismatchError):
        native._dlpack_capsule([3], [1], np.int8, 0, (KDLCUDA, 0))


class FakeCudaArray:
    """A producer of kDLCUDA capsules over memory that does not exist."""

    def __init__(self, token):
        self.calls = []
        self.token = token

    def __dlpack_device__(self):
        return (KDLCUDA, 0)

    def __dlpack__(self, stream=None, **kw):
        self.calls.append(stream)
        return native._dlpack_capsule([4], [1], "float64", 0x7000_0000_0000, (KDLCUDA, 0), self.token)


def test_cuda_capsule_is_refused_by_other_backends(backend):
    if backend.name == "cuda":
        pytest.skip("the CUDA backend adopts kDLCUDA arrays")

    class Token:
        pass

    fake = FakeCudaArray(Token())
    alive = weakref.ref(fake.token)
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.from_dlpack(fake, backend)
    assert fake.calls == []  # refused before a capsule was asked for
    # With no backend named, the default CUDA device is tried: unavailable here, or (on a
    # GPU) the fake address is refused; either way an error, and the tensor is deleted.
    with pytest.raises((gpubuf.BackendUnavailableError, gpubuf.InvalidArgumentError)):
        gpubuf.from_dlpack(fake)
    fake.token = None
    gc.collect()
    assert alive() is None


def test_dlpack_device_by_backend(backend):
    a = gpubuf.NDBuffer.zeros((2, 3), "float32", backend)
    if backend.name == "cpu":
        assert a.__dlpack_device__() == (KDLCPU, 0)
    elif backend.name == "cuda":
        assert a.__dlpack_device__()[0] == KDLCUDA
    else:
        with pytest.raises(BufferError):
            a.__dlpack_device__()
        with pytest.raises(BufferError):
            a.__dlpack__()
