"""Hostile producers: DLPack capsules built with ctypes from arbitrary numbers, and objects
whose ``__array_interface__`` / ``__cuda_array_interface__`` say what a test wants.

The data of every in-bounds description lies in ``BUF``, which lives as long as the
process, and so do the tensor structs (a consumer may read a struct's deleter when its
array dies), so nothing a test makes can dangle.
"""

import ctypes

import numpy as np

#: 8 KiB of host memory that descriptions point into, 64-byte aligned.
_RAW = (ctypes.c_uint8 * (8192 + 64))()
BUF_LEN = 8192
BUF = ctypes.addressof(_RAW) + (-ctypes.addressof(_RAW)) % 64
np.frombuffer(_RAW, dtype=np.uint8)[:] = np.arange(len(_RAW), dtype=np.uint64).astype(np.uint8) * 37

#: Entries in every shape and strides array (numpy reads up to its 64 axes).
MAX_NDIM = 64

KEEP = []  # every struct and array handed to a consumer


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_NAME = b"dltensor"
# A function object of this module's own: ``ctypes.pythonapi.PyCapsule_New`` is shared with
# every other user of ctypes in the process, who may set other argument types on it.
_new_capsule = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi)
)


def _int64s(values):
    arr = (ctypes.c_int64 * MAX_NDIM)()
    for i, v in enumerate(values[:MAX_NDIM]):
        arr[i] = v
    KEEP.append(arr)
    return ctypes.cast(arr, ctypes.POINTER(ctypes.c_int64))


def address(t):
    """The data pointer of tensor ``t``: ``("buf", n)`` is ``BUF + n``, ``("abs", p)`` is ``p``
    (so cases print the same in every process)."""
    base, n = t["data"]
    return BUF + n if base == "buf" else n


def capsule(t):
    """A ``"dltensor"`` capsule of the tensor ``t`` (a dict: data (see :func:`address`),
    device, ndim, dtype ``(code, bits, lanes)``, shape, strides (None: NULL), shape_null,
    byte_offset), with no deleter."""
    m = DLManagedTensor()
    d = m.dl_tensor
    d.data = address(t)
    d.device = DLDevice(*t["device"])
    d.ndim = t["ndim"]
    d.dtype = DLDataType(*t["dtype"])
    d.shape = ctypes.POINTER(ctypes.c_int64)() if t["shape_null"] else _int64s(t["shape"])
    d.strides = ctypes.POINTER(ctypes.c_int64)() if t["strides"] is None else _int64s(t["strides"])
    d.byte_offset = t["byte_offset"]
    KEEP.append(m)
    return _new_capsule(ctypes.addressof(m), _NAME, None)


class Producer:
    """``__dlpack__`` hands out a fresh capsule of ``tensor``; ``__dlpack_device__`` says
    ``device``. Counts the capsules asked for."""

    def __init__(self, tensor, device):
        self.tensor, self.device, self.calls = tensor, device, 0

    def __dlpack__(self, **kwargs):
        self.calls += 1
        return capsule(self.tensor)

    def __dlpack_device__(self):
        return self.device


class Interface:
    """An object whose ``name`` attribute is ``value`` (a dict, or anything), or raises
    ``value`` when it is an exception."""

    def __init__(self, name, value):
        self._name, self._value = name, value

    def __getattr__(self, name):
        if name == self._name:
            if isinstance(self._value, BaseException):
                raise self._value
            return self._value
        raise AttributeError(name)
