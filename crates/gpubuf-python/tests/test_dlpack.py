"""DLPack: the device tuple, the stream argument's rules, the tensor struct read (from
gpubuf's capsules and from foreign ones built with ctypes), and a CUDA capsule refused by
other backends (the CUDA adoption itself needs a GPU)."""

import ctypes
import gc
import weakref

import numpy as np
import pytest

import gpubuf
from gpubuf import _gpubuf as native
from fuzz.hostile import DLDataType, DLDevice, DLTensor  # the DLPack structs, declared once

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


# A kDLCUDA tensor over memory that does not exist, built with ctypes as a foreign producer
# would build it in C (gpubuf builds capsules only over its arrays' own memory). The
# tensor keeps its shape, strides and ``keep`` object in ``_TENSORS`` until its deleter
# runs: called by a consumer that took the capsule, or by the capsule's destructor.


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]
_TENSORS = {}
_NAME = ctypes.c_char_p(b"dltensor")  # the capsule keeps this pointer: it must outlive it
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _DESTRUCTOR]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


@_DELETER
def _delete(managed):
    _TENSORS.pop(managed, None)


@_DESTRUCTOR
def _destroy(capsule):
    if _capsule_valid(capsule, _NAME):  # not taken by a consumer
        _delete(_capsule_pointer(capsule, _NAME))


def foreign_capsule(shape, strides, code_bits, ptr, device, keep=None):
    m = _DLManagedTensor()
    n = len(shape)
    extents, steps = (ctypes.c_int64 * n)(*shape), (ctypes.c_int64 * n)(*strides)
    t = m.dl_tensor
    t.data, t.device, t.ndim = ptr, DLDevice(*device), n
    t.dtype = DLDataType(code_bits[0], code_bits[1], 1)
    t.shape = ctypes.cast(extents, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(steps, ctypes.POINTER(ctypes.c_int64))
    m.deleter = _delete
    _TENSORS[ctypes.addressof(m)] = (m, extents, steps, keep)
    return _capsule_new(ctypes.addressof(m), _NAME, _destroy)


FLOAT32, FLOAT64 = (2, 32), (2, 64)


def test_foreign_cuda_capsule_is_read():
    class Token:
        pass

    token = Token()
    alive = weakref.ref(token)
    cap = foreign_capsule([3, 5], [10, 2], FLOAT32, 0x7000_0000_1000, (KDLCUDA, 3), token)
    assert native._read_dlpack_capsule(cap) == ((KDLCUDA, 3), "float32", [3, 5], [10, 2], 0x7000_0000_1000)
    del token
    gc.collect()
    assert alive() is not None  # the unconsumed tensor keeps it
    del cap
    gc.collect()
    assert alive() is None  # the capsule's destructor ran the deleter
    with pytest.raises(gpubuf.InvalidArgumentError):
        native._read_dlpack_capsule(object())
    bfloat16 = foreign_capsule([3], [1], (4, 16), 0x7000_0000_0000, (KDLCUDA, 0))
    with pytest.raises(gpubuf.DTypeMismatchError):
        native._read_dlpack_capsule(bfloat16)
    del bfloat16  # destroyed with no exception pending (its destructor is a ctypes callback)
    gc.collect()


class FakeCudaArray:
    """A producer of kDLCUDA capsules over memory that does not exist."""

    def __init__(self, token):
        self.calls = []
        self.token = token

    def __dlpack_device__(self):
        return (KDLCUDA, 0)

    def __dlpack__(self, stream=None, **kw):
        self.calls.append(stream)
        return foreign_capsule([4], [1], FLOAT64, 0x7000_0000_0000, (KDLCUDA, 0), self.token)


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
