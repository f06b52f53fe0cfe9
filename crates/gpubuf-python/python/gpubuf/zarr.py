"""zarr-python 3's buffer prototype over gpubuf: ``buffer_prototype(backend)`` makes
zarr read regions into, and write them from, ``gpubuf.NDBuffer`` arrays on any backend::

    import zarr, gpubuf.zarr
    proto = gpubuf.zarr.buffer_prototype("opencl")
    a = zarr.open_array("data.zarr", mode="r")
    region = a.get_basic_selection((slice(0, 100), slice(5, 50)), prototype=proto)
    # region is a gpubuf.NDBuffer on the OpenCL device

Decoding stays on the host, where zarr's codecs run: chunk bytes (``Buffer``) are numpy
arrays, and a decoded chunk is a host-resident ``NDBuffer`` until zarr writes it into its
region of the output array (``out[region] = chunk``), which uploads it once, straight into
that region (``gpubuf.NDBuffer.set_region``, staged through the prototype's ``pool`` when
the region is not contiguous). Device arrays come from that pool too. Writes take the way
back: a missing chunk is made on the device and the value's region copied in, a stored
one is decoded and merged on the host; chunks are read back once for encoding.

Every ``NDBuffer`` and ``Buffer`` holds either a numpy array (host) or a
``gpubuf.NDBuffer`` of the prototype's device (``as_ndarray_like()`` / ``as_array_like()``
return it without a copy). Device arrays hold gpubuf's element types (bool, int8 to
int64, uint8 to uint64, float16 to float64, native byte order); an array of another
dtype (strings, bytes, structured, byte-swapped) stays a numpy array on the host, the
prototype's documented fallback, so every zarr array reads and writes.

The classes of a backend name are made without touching the device: its ``Backend`` and
``MemoryPool`` are made on first use, so zarr can load every gpubuf entry point (the
``cuda`` ones too) on a machine without that backend; using a class whose backend cannot
run raises ``BackendUnavailableError`` then.
"""

import threading

import numpy as np
from zarr.core.buffer import core
from zarr.core.buffer.core import BufferPrototype

from . import Backend, DTypeMismatchError, InvalidArgumentError, MemoryPool, ShapeMismatchError
from . import NDBuffer as _Array

__all__ = ["Buffer", "NDBuffer", "buffer_prototype", "enable", "register"]


def _on_device(obj, backend):
    """``obj`` (a gpubuf array) on ``backend``: itself when it lives there, else a copy."""
    return obj if obj.backend.same_device(backend) else obj.to_backend(backend)


def _unwrap(value):
    """The array behind a zarr buffer, or ``value`` itself."""
    if isinstance(value, core.NDBuffer):
        return value.as_ndarray_like()
    if isinstance(value, core.Buffer):
        return value.as_array_like()
    return value


_DEVICE_DTYPES = frozenset(
    np.dtype(n)
    for n in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64", "complex64", "complex128")
)


def _on_host(dtype):
    """Whether arrays of ``dtype`` take the host fallback (gpubuf has no element type)."""
    return np.dtype(dtype) not in _DEVICE_DTYPES


class _Device:
    """A prototype's backend and pool, made on first use (``backend`` is a name or a
    ``gpubuf.Backend``)."""

    def __init__(self, backend):
        self._given = backend
        self._made = None
        self._lock = threading.Lock()

    def get(self):
        """``(Backend, MemoryPool)``, made once."""
        made = self._made
        if made is None:
            with self._lock:
                if self._made is None:
                    b = self._given if isinstance(self._given, Backend) else Backend(self._given)
                    self._made = (b, MemoryPool(b))
                made = self._made
        return made


class _Meta(type):
    """The classes' ``backend`` and ``pool``, made on first use (None on the base classes)."""

    @property
    def backend(cls):
        """The prototype's ``gpubuf.Backend`` (made on first use)."""
        return None if cls._device is None else cls._device.get()[0]

    @property
    def pool(cls):
        """The prototype's ``gpubuf.MemoryPool`` (made on first use)."""
        return None if cls._device is None else cls._device.get()[1]


def _class_device(cls, attr):
    """``(Backend, MemoryPool)`` of a prototype's class, InvalidArgumentError for a base class."""
    if cls._device is None:
        raise InvalidArgumentError(f"use buffer_prototype(backend).{attr}: this class has no backend")
    return cls._device.get()


class _BufferMeta(_Meta, type(core.Buffer)):
    """``_Meta`` with the metaclass of zarr's ``Buffer`` (an ABC)."""


class _NDBufferMeta(_Meta, type(core.NDBuffer)):
    """``_Meta`` with the metaclass of zarr's ``NDBuffer``."""


class Buffer(core.Buffer, metaclass=_BufferMeta):
    """zarr's flat byte buffer over gpubuf: a 1-d uint8 numpy array (host, as chunk bytes
    read from a store are) or a 1-d uint8 ``gpubuf.NDBuffer`` of ``backend``. Use the
    class ``buffer_prototype(backend).buffer``; this base class has no backend.
    ``pool`` is the prototype's ``MemoryPool`` (staging of uploads, device arrays)."""

    _device = None

    def __init__(self, array_like):
        if isinstance(array_like, _Array):
            array_like = _on_device(array_like, self._backend())
        elif not isinstance(array_like, np.ndarray):
            array_like = np.asarray(array_like)
        super().__init__(array_like)

    @classmethod
    def _backend(cls):
        return _class_device(cls, "buffer")[0]

    @classmethod
    def _pool(cls):
        return _class_device(cls, "buffer")[1]

    @classmethod
    def create_zero_length(cls):
        """An empty (host) buffer."""
        return cls(np.empty(0, dtype="B"))

    @classmethod
    def from_buffer(cls, buffer):
        """``buffer``'s bytes as this class: shared when they live on the host or this
        device, copied from another device."""
        return cls(buffer.as_array_like())

    @classmethod
    def from_bytes(cls, bytes_like):
        """A host buffer over ``bytes_like`` (no copy)."""
        return cls(np.frombuffer(bytes_like, dtype="B"))

    def as_numpy_array(self):
        """The bytes as numpy: the host array itself, or a copy from the device."""
        if isinstance(self._data, _Array):
            return self._data.to_numpy()
        return self._data

    def on_device(self):
        """Whether the bytes live in gpubuf memory (not a host numpy array)."""
        return isinstance(self._data, _Array)

    def __setitem__(self, key, value):
        core.check_item_key_is_1d_contiguous(key)
        value = _unwrap(value)
        if isinstance(self._data, _Array):
            self._data.set_region(key, value, self._pool())
        else:
            self._data[key] = value.to_numpy() if isinstance(value, _Array) else value

    def combine(self, others):
        """The concatenation of this buffer and ``others``: on the host when every part
        is, else in one new device array that each part is copied or uploaded into."""
        parts = [self._data] + [_unwrap(o) for o in others]
        for p in parts:
            if p.ndim != 1 or p.dtype != np.dtype("B"):
                raise InvalidArgumentError("combine takes 1-d byte buffers")
        if not any(isinstance(p, _Array) for p in parts):
            return self.__class__(np.concatenate(parts))
        backend = self._backend()
        pool = self._pool()
        out = pool.empty(sum(p.size for p in parts), "uint8")
        at = 0
        for p in parts:
            if isinstance(p, _Array):
                p = _on_device(p, backend)
            out.set_region(slice(at, at + p.size), p, pool)
            at += p.size
        return self.__class__(out)


class NDBuffer(core.NDBuffer, metaclass=_NDBufferMeta):
    """zarr's n-d buffer over gpubuf: a ``gpubuf.NDBuffer`` of ``backend`` (what
    ``create``, ``empty`` and ``from_numpy_array`` make, and what zarr reads into), or a
    numpy array (a decoded chunk on its way into a device array). Use the class
    ``buffer_prototype(backend).nd_buffer``; this base class has no backend.
    ``pool`` is the prototype's ``MemoryPool``: device arrays come from it (as CuPy's
    come from its pool in zarr's own GPU prototype), and uploads stage through it."""

    _device = None

    def __init__(self, array):
        if isinstance(array, _Array):
            array = _on_device(array, self._backend())
        elif not isinstance(array, np.ndarray):
            array = np.asarray(array)
        super().__init__(array)

    @classmethod
    def _backend(cls):
        return _class_device(cls, "nd_buffer")[0]

    @classmethod
    def _pool(cls):
        return _class_device(cls, "nd_buffer")[1]

    @classmethod
    def create(cls, *, shape, dtype, order="C", fill_value=None):
        """A new device array of ``shape`` and ``dtype`` in C or F ``order``, filled with
        ``fill_value`` on the device (uninitialised when None); a numpy array for a dtype
        gpubuf has no element type for."""
        out = cls.empty(tuple(shape), dtype, order)
        if fill_value is not None:
            out.fill(fill_value)
        return out

    @classmethod
    def empty(cls, shape, dtype, order="C"):
        """A new uninitialised device array from the prototype's ``pool`` (its block
        returns to the pool when the array and its views are gone; an F-order one is the
        transposed view of a C-order array of the reversed shape). A dtype gpubuf has no
        element type for (strings, bytes, structured, byte-swapped) gives a numpy array."""
        if order not in ("C", "F"):
            raise InvalidArgumentError(f"order is 'C' or 'F', not {order!r}")
        shape = tuple(int(n) for n in shape)
        pool = cls._pool()
        if _on_host(dtype):
            return cls(np.empty(shape, dtype=dtype, order=order))
        if order == "F":
            return cls(pool.empty(shape[::-1], np.dtype(dtype)).transpose())
        return cls(pool.empty(shape, np.dtype(dtype)))

    @classmethod
    def from_numpy_array(cls, array_like):
        """``array_like`` (anything ``numpy.asarray`` takes) uploaded to the device (on
        the CPU backend a suitable numpy array is shared, as ``gpubuf.NDBuffer.from_numpy``);
        kept on the host for a dtype gpubuf has no element type for."""
        array = np.asarray(array_like)
        backend = cls._backend()
        if _on_host(array.dtype):
            return cls(array)
        return cls(_Array.from_numpy(array, backend))

    def to_device(self):
        """This buffer with its data on the device (itself when it is there already)."""
        if isinstance(self._data, _Array):
            return self
        return self.from_numpy_array(self._data)

    def on_device(self):
        """Whether the data live in gpubuf memory (not a host numpy array)."""
        return isinstance(self._data, _Array)

    def as_numpy_array(self):
        """The data as numpy: the host array itself, or a copy from the device."""
        if isinstance(self._data, _Array):
            return self._data.to_numpy()
        return np.asarray(self._data)

    def astype(self, dtype, order="K"):
        """The data converted to ``dtype`` (``gpubuf.NDBuffer.astype`` for a device array;
        to a dtype gpubuf has no element type for, a numpy array)."""
        if isinstance(self._data, _Array):
            if _on_host(dtype):
                return self.__class__(self._data.to_numpy().astype(dtype, order=order))
            return self.__class__(self._data.astype(dtype, order=order))
        return self.__class__(self._data.astype(dtype, order=order))

    def all_equal(self, other, equal_nan=True):
        """Whether every element equals ``other`` with zarr's rules (NaN equals NaN when
        ``equal_nan``; a float zero compares bit patterns, so -0.0 is not 0.0; None is
        never equal). The first element is compared first, so an array that differs
        there (a chunk holding data, as most written chunks do) is answered after reading
        one element; otherwise a device array is read to the host for the comparison, and
        the CPU backend's is compared where it is."""
        data = self._data
        if data.size > 1:
            first = NDBuffer._host_of(data[(slice(0, 1),) * data.ndim])
            if not core.NDBuffer(first).all_equal(other, equal_nan=equal_nan):
                return False
        return core.NDBuffer(self._host_view()).all_equal(other, equal_nan=equal_nan)

    @staticmethod
    def _host_of(data):
        """``data`` (numpy or gpubuf) as numpy, without a copy where it is host memory."""
        if isinstance(data, _Array) and data.backend.name != "cpu":
            return data.to_numpy()
        return np.asarray(data)

    def _host_view(self):
        """The data as numpy without a copy where they are host memory (numpy arrays and
        the CPU backend's), else a copy from the device."""
        return NDBuffer._host_of(self._data)

    def copy(self):
        """A copy of the data in a new array of the prototype's pool (C order), on the
        device for a device array."""
        data = self._data
        if not isinstance(data, _Array):
            return self.__class__(data.copy())
        out = self._pool().empty(data.shape, data.dtype)
        if data.backend.name == "cpu":
            np.copyto(np.asarray(out), np.asarray(data))
        else:
            out.set_region(Ellipsis, _on_device(data, self._backend()), self._pool())
        return self.__class__(out)

    def fill(self, value):
        """Sets every element to ``value`` (on the device for a device array)."""
        self._data.fill(value)

    def __getitem__(self, key):
        """The region ``key`` selects, as a view (basic indexing on a device array)."""
        return self.__class__(self._data[key])

    def __setitem__(self, key, value):
        """Writes ``value`` (a zarr buffer, gpubuf or numpy array, or scalar) into the
        region ``key`` selects: into a device array by one region copy or upload, into a
        host array by numpy (reading a device value first)."""
        value = _unwrap(value)
        if isinstance(self._data, _Array):
            cpu = self._data.backend.name == "cpu"
            if cpu and (isinstance(value, np.ndarray) or (isinstance(value, _Array) and value.backend.name == "cpu")):
                # The CPU backend's memory is host memory, and numpy's view of an array
                # there is the array itself (no copy, any strides): numpy's assignment
                # writes a decoded chunk, or a shard's part of the output, in one pass on
                # the thread zarr runs it on, where set_region would stage a strided
                # region before writing it. numpy copies a value that overlaps first.
                np.asarray(self._data)[key] = np.asarray(value)
                return
            if not isinstance(value, _Array):
                self._data.set_region(key, value, self._pool())
                return
            value = _on_device(value, self._data.backend)
            try:
                self._data.set_region(key, value, self._pool())
            except (ShapeMismatchError, DTypeMismatchError):
                # A device value is copied as it is; numpy's assignment broadcasts and
                # casts (zarr writes a 0-d value over a region so): the value's host copy
                # is, as a numpy value. The refused copy wrote nothing.
                self._data.set_region(key, value.to_numpy(), self._pool())
        else:
            self._data[key] = value.to_numpy() if isinstance(value, _Array) else value


_PROTOTYPES = {}


def buffer_prototype(backend="cpu"):
    """The ``zarr.core.buffer.BufferPrototype`` whose ``buffer`` and ``nd_buffer`` classes
    keep data on ``backend`` (a name, ``"cpu"``, ``"opencl"`` or ``"cuda"``, or a
    ``gpubuf.Backend``). Pass it as ``prototype=`` to zarr's ``get_basic_selection``,
    ``set_basic_selection``, ``get_orthogonal_selection`` and friends.

    The same name (or the same ``Backend`` object) gives the same prototype, whose classes
    share one device and one ``MemoryPool`` (``proto.nd_buffer.pool``) that device arrays
    and upload staging come from: blocks are kept for reuse after their arrays are gone
    (``pool.free_held()`` gives them back to the device). Prototypes are kept for the life
    of the process (with their ``Backend`` and pool). The prototype of a name
    pickles (its classes are found again by name, ``gpubuf.zarr.OpenclBuffer``); one made
    for a ``Backend`` object does not. Raises
    ``BackendUnavailableError`` when the backend cannot run here, ``InvalidArgumentError``
    for an unknown name or another type.
    """
    if isinstance(backend, str):
        key = backend.lower()
        proto = _named(key)
        proto.nd_buffer._device.get()
        return proto
    if isinstance(backend, Backend):
        key = id(backend)
        with _LOCK:
            found = _PROTOTYPES.get(key)
            if found is None or found[0] is not backend:
                # The Backend is kept in the entry, so its id is not reused while cached.
                found = (backend, _make(backend))
                _PROTOTYPES[key] = found
            return found[1]
    raise InvalidArgumentError(f"a backend is a name or a gpubuf.Backend, not {type(backend).__name__}")


_LOCK = threading.Lock()


def _named(key):
    """The prototype of the backend name ``key`` (lower case), its device not yet made."""
    if key not in ("cpu", "opencl", "cuda"):
        raise InvalidArgumentError(f"unknown backend {key!r}: 'cpu', 'opencl' or 'cuda'")
    with _LOCK:
        if key not in _PROTOTYPES:
            _PROTOTYPES[key] = _make(key, by_name=True)
        return _PROTOTYPES[key]


def _make(backend, by_name=False):
    ns = {"_device": _Device(backend), "__module__": __name__}
    label = backend if by_name else backend.name
    name = label.capitalize()
    classes = []
    for base in (Buffer, NDBuffer):
        cls = type(f"{name}{base.__name__}", (base,), dict(ns, __doc__=f"``{base.__name__}`` on {label}."))
        if not by_name:
            # Only the prototypes of a name can be found again by pickle (module __getattr__).
            cls.__qualname__ = f"buffer_prototype.<locals>.{cls.__name__}"
        classes.append(cls)
    return BufferPrototype(buffer=classes[0], nd_buffer=classes[1])


def register(backend="cpu"):
    """Registers the classes of ``buffer_prototype(backend)`` with zarr's buffer and
    ndbuffer registries, under their names (``gpubuf.zarr.OpenclBuffer`` and
    ``gpubuf.zarr.OpenclNDBuffer`` for ``"opencl"``) and gpubuf's codec pipeline
    (``gpubuf.zarr_pipeline.CodecPipeline``: zarr's, with v2 chunks in device memory read
    to the host before numcodecs encodes them), and returns the ``zarr.config`` entries
    that name them: ``{"buffer": ..., "ndbuffer": ..., "codec_pipeline.path": ...}``.
    ``backend`` is a name
    (``"cpu"``, ``"opencl"``, ``"cuda"``): zarr finds classes by name, in other processes
    too. Raises as ``buffer_prototype``, and ``InvalidArgumentError`` for a
    ``gpubuf.Backend`` object."""
    if not isinstance(backend, str):
        raise InvalidArgumentError(
            f"zarr names its buffer classes: give a backend name, not {type(backend).__name__}"
        )
    from zarr.registry import fully_qualified_name, register_buffer, register_ndbuffer, register_pipeline

    from .zarr_pipeline import CodecPipeline

    proto = buffer_prototype(backend)
    register_buffer(proto.buffer)
    register_ndbuffer(proto.nd_buffer)
    register_pipeline(CodecPipeline)
    return {
        "buffer": fully_qualified_name(proto.buffer),
        "ndbuffer": fully_qualified_name(proto.nd_buffer),
        "codec_pipeline.path": fully_qualified_name(CodecPipeline),
    }


def enable(backend="cpu"):
    """Makes gpubuf's classes on ``backend`` zarr's default buffer and ndbuffer (and
    gpubuf's codec pipeline zarr's pipeline, see ``register``), as
    ``zarr.config.enable_gpu()`` does for CuPy: every read without ``prototype=`` then
    returns ``gpubuf.NDBuffer`` arrays on that device. Returns zarr's ``ConfigSet``, so
    ``with gpubuf.zarr.enable("opencl"): ...`` restores the previous classes on leaving.
    Raises as ``register``."""
    import zarr

    return zarr.config.set(register(backend))


_PICKLED = {f"{n.capitalize()}{c}": (n, i) for n in ("cpu", "opencl", "cuda") for i, c in enumerate(("Buffer", "NDBuffer"))}


def __getattr__(name):
    """``gpubuf.zarr.OpenclBuffer`` and the like: the classes of ``buffer_prototype(name)``,
    so pickle and zarr's entry points find them in any process. Getting one does not touch
    the device (zarr loads every entry point, ``cuda``'s too, on any machine)."""
    if name in _PICKLED:
        backend, i = _PICKLED[name]
        return _named(backend)[i]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
