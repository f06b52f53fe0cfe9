"""Type stubs of the native module ``gpubuf._gpubuf``, re-exported by ``gpubuf`` (see docs/python.md)."""

from types import TracebackType
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type, Union

import numpy as np
import numpy.typing as npt

__version__: str

_Shape = Union[int, Sequence[int]]
_DType = Union[str, np.dtype, Type[Any], None]

class GpubufError(Exception):
    """Base class of every error gpubuf raises."""

class OutOfMemoryError(GpubufError, MemoryError):
    """The device or the pool's limit could not provide the bytes; retrying after freeing memory may succeed."""

    requested: int
    available: Optional[int]
    pool: Optional[Dict[str, Optional[int]]]

class ShapeMismatchError(GpubufError, ValueError):
    """An array's shape is not the one the operation needs."""

    expected: List[int]
    got: List[int]

class LengthMismatchError(GpubufError, ValueError):
    """A length (of bytes or a list) is not the one the operation needs."""

    expected: int
    got: int

class DTypeMismatchError(GpubufError, TypeError):
    """An element type is not the one the operation needs, or gpubuf has none for numpy's dtype."""

    expected: Optional[str]
    got: str

class CapacityError(GpubufError, ValueError):
    """A fixed-capacity container cannot take more elements."""

class OutOfBoundsError(GpubufError, IndexError):
    """An index or byte range lies outside the object it addresses."""

class InvalidPlanError(GpubufError, ValueError):
    """A copy plan is malformed."""

class InvalidArgumentError(GpubufError, ValueError):
    """An argument is invalid for a reason no more specific class covers."""

class BackendUnavailableError(GpubufError, RuntimeError):
    """The backend is not compiled in or cannot run on this machine."""

    backend: str
    reason: str

class DeviceMismatchError(GpubufError, ValueError):
    """Two objects that must live on the same device do not."""

class BuildError(GpubufError, RuntimeError):
    """A kernel failed to compile."""

    backend: str
    log: str

class DriverError(GpubufError, RuntimeError):
    """The driver or runtime returned an error code."""

    backend: str
    code: int

class Backend:
    """A device of one backend, chosen by name at run time: "cpu", "opencl" or "cuda"."""

    def __init__(self, name: str = "cpu") -> None: ...
    @staticmethod
    def from_pyopencl(obj: Any) -> Backend:
        """The OpenCL backend over a pyopencl Context or CommandQueue (the same context)."""
    @property
    def name(self) -> str:
        """The backend's name: "cpu", "opencl" or "cuda"."""
    @property
    def info(self) -> Dict[str, Union[str, int]]:
        """The device's backend, name, vendor, version, total_memory and compute_units."""
    def synchronize(self) -> None:
        """Waits until all work queued on the device is done."""
    def same_device(self, other: Backend) -> bool:
        """Whether ``other`` is the same device."""
    def __reduce__(self) -> Tuple[Any, Tuple[str]]:
        """Pickles as ``Backend(name)``."""

def backends() -> List[Dict[str, Any]]:
    """Every backend: name, compiled, available, devices (names) and reason (or None)."""

def available_backends() -> List[str]:
    """The names of the backends that can run here."""

class Flags:
    """An array's layout flags (``NDBuffer.flags``), by attribute or numpy's key."""

    c_contiguous: bool
    f_contiguous: bool
    owndata: bool
    writeable: bool
    def __getitem__(self, key: str) -> bool:
        """A flag by numpy's name (``"C_CONTIGUOUS"``, ``"F"``, ...); KeyError for another."""

class NDBuffer:
    """An n-d array of one dtype on one backend's device."""

    @staticmethod
    def from_numpy(
        array: npt.ArrayLike, backend: Optional[Backend] = None, copy: Optional[bool] = None
    ) -> NDBuffer:
        """``array`` on ``backend`` (default: a new CPU device): on the CPU a view of a
        C-contiguous, writeable, 8-byte aligned array's own memory, else a copy;
        ``copy=True`` always copies, ``copy=False`` raises when it cannot share."""
    @staticmethod
    def empty(shape: _Shape, dtype: _DType = None, backend: Optional[Backend] = None) -> NDBuffer:
        """An uninitialised array (default dtype float64)."""
    @staticmethod
    def zeros(shape: _Shape, dtype: _DType = None, backend: Optional[Backend] = None) -> NDBuffer:
        """An array of zeros (default dtype float64)."""
    def to_numpy(self) -> np.ndarray:
        """On the CPU a view of the same memory; elsewhere a C-order copy."""
    def to_backend(self, backend: Backend) -> NDBuffer:
        """A copy on ``backend``."""
    def copy(self) -> NDBuffer:
        """A contiguous copy on the same backend."""
    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def dtype(self) -> np.dtype: ...
    @property
    def strides(self) -> Tuple[int, ...]:
        """Strides in bytes, as numpy's."""
    @property
    def ndim(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def itemsize(self) -> int: ...
    @property
    def backend(self) -> Backend: ...
    @property
    def __array_interface__(self) -> Dict[str, Any]:
        """numpy's array interface (CPU backend only; AttributeError elsewhere)."""
    def __array__(self, dtype: _DType = None, copy: Optional[bool] = None) -> np.ndarray: ...
    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any:
        """A DLPack capsule sharing the memory (CPU and CUDA backends; BufferError elsewhere).
        On CUDA ``stream`` is the consumer's stream, made to wait for gpubuf's queued work
        (None: legacy default stream, 1 legacy, 2 per-thread, -1 no synchronisation, above:
        a ``CUstream``; 0 raises InvalidArgumentError); on the CPU only None."""
    def __dlpack_device__(self) -> Tuple[int, int]:
        """``(1, 0)`` on the CPU backend, ``(2, ordinal)`` on CUDA; BufferError elsewhere."""
    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        """The CUDA array interface, version 3 (CUDA backend only; AttributeError elsewhere):
        ``shape``, ``typestr``, ``data`` (pointer, False), ``strides`` (bytes, None when
        C-contiguous), ``version`` 3, ``stream`` (gpubuf's default stream)."""
    @staticmethod
    def from_cuda_array_interface(obj: Any, backend: Optional[Backend] = None) -> NDBuffer:
        """The device memory of an object with ``__cuda_array_interface__`` on ``backend``
        (default: the default CUDA device), without a copy; keeps ``obj`` alive."""
    def __len__(self) -> int: ...
    def __reduce__(self) -> Tuple[Any, Tuple[np.ndarray, Backend]]:
        """Pickles as ``NDBuffer.from_numpy(values, backend)`` (values in C order)."""
    def __eq__(self, other: Any) -> NDBuffer:  # type: ignore[override]
        """Elementwise ``==`` (numpy's rules): a bool array on this backend, computed on
        host values (in place on the CPU backend, one read elsewhere)."""
    def __ne__(self, other: Any) -> NDBuffer:  # type: ignore[override]
        """Elementwise ``!=``, as ``__eq__``."""
    __hash__: None  # type: ignore[assignment]
    def all(
        self, axis: Any = None, out: None = None, keepdims: bool = False, *, where: Any = None
    ) -> Union[bool, NDBuffer]:
        """Whether every element is true: a bool for a full reduction, else a bool array."""
    def any(
        self, axis: Any = None, out: None = None, keepdims: bool = False, *, where: Any = None
    ) -> Union[bool, NDBuffer]:
        """Whether any element is true, as ``all``."""
    def astype(
        self, dtype: _DType, order: str = "K", casting: str = "unsafe", subok: bool = True, copy: bool = True
    ) -> NDBuffer:
        """The values converted to ``dtype`` on this backend (numpy's ``order``); ``copy=False`` with
        the same dtype gives this array."""
    @property
    def flags(self) -> Flags:
        """The layout flags, as numpy's ``ndarray.flags``."""
    def tobytes(self, order: str = "C") -> bytes:
        """The values as bytes in ``order``, read from the device once."""
    def __getitem__(self, key: Any) -> NDBuffer:
        """A view (numpy's basic indexing: ints, slices with any step, ``...``, None), or
        for integer arrays, lists and masks (advanced indexing) a new array gathered on
        the device; OutOfBoundsError (numpy's IndexError for advanced keys) for an index
        outside its axis, InvalidArgumentError for a zero step or a second ``...``."""
    def __setitem__(self, key: Any, value: Any) -> None:
        """``set_region(key, value)`` with a fresh staging array."""
    def set_region(self, key: Any, value: Any, pool: Optional[MemoryPool] = None) -> None:
        """Writes ``value`` into the region ``key`` selects: an NDBuffer of the same dtype
        and shape is copied on the device; a scalar fills the region; a numpy array (in
        this dtype, broadcast to the region) is uploaded once, straight into a contiguous
        region, else into staging (from ``pool`` when given) moved by one plan. A value
        that shares memory with this array is copied first, as numpy does."""
    def fill(self, value: Any) -> None:
        """Sets every element to ``value`` on the device."""
    def reshape(self, *shape: Union[int, Sequence[int]], order: str = "C") -> NDBuffer:
        """Another shape (one extent may be -1) in ``order`` (C, F or A): a view when
        contiguous in that order, else a copy."""
    def ravel(self, order: str = "C") -> NDBuffer:
        """1-d in ``order`` (C, F, A or K): a view when contiguous in that order, else a copy."""
    def transpose(self, axes: Optional[Sequence[int]] = None) -> NDBuffer:
        """A view with the axes permuted (None reverses them; negative axes count from the end)."""
    def view(self, dtype: _DType) -> NDBuffer:
        """The bytes of a C-contiguous array seen as ``dtype`` (the last axis scales)."""

_Hook = Optional[Callable[["Bufferizer"], Any]]

class Bufferizer:
    """dolphin's batch buffer: ``buffer_size`` elements of ``shape`` and ``dtype`` on
    ``backend`` (CUDA with a ``stream``), zeroed; all-or-nothing appends of numpy arrays,
    ``__dlpack__`` objects and NDBuffers of its dtype (an input sharing memory with the
    buffer is copied first); hooks called with the bufferizer after each operation."""

    def __init__(
        self,
        shape: _Shape,
        buffer_size: int,
        dtype: _DType,
        stream: Any = None,
        flush_hook: _Hook = None,
        allocate_hook: _Hook = None,
        append_one_hook: _Hook = None,
        append_multiple_hook: _Hook = None,
        buffer_full_hook: _Hook = None,
        *,
        backend: Optional[Backend] = None,
    ) -> None: ...
    def append_one(self, element: Any) -> None:
        """One element of ``element_shape``; then append_one_hook, buffer_full_hook when full."""
    def append_multiple(self, elements: Any) -> None:
        """A batch ``(n, *element_shape)`` or a list of elements, all or nothing; then
        append_multiple_hook, buffer_full_hook when full."""
    def append(self, element: Any) -> None:
        """Dispatches on shape (one element or a batch) or takes a list, as dolphin."""
    def flush(self, value: Any = None) -> None:
        """Fills the whole buffer with ``value`` (default 0), empties it; then flush_hook."""
    def allocate(self) -> None:
        """A new zeroed buffer, empty; then allocate_hook and flush_hook."""
    def clear(self) -> None:
        """Empties the bufferizer without touching memory; no hook."""
    def take_batch(self) -> NDBuffer:
        """The appended elements (with the buffer's memory), handed over; later appends go
        to another buffer."""
    def len(self) -> int: ...
    def __len__(self) -> int: ...
    @property
    def buffer(self) -> NDBuffer:
        """The whole buffer ``(buffer_size, *element_shape)``, sharing its memory."""
    @property
    def filled(self) -> NDBuffer:
        """The appended elements, sharing the buffer's memory."""
    @property
    def full(self) -> bool: ...
    @property
    def buffer_size(self) -> int: ...
    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def element_shape(self) -> Tuple[int, ...]: ...
    @property
    def dtype(self) -> np.dtype: ...
    @property
    def element_nbytes(self) -> int:
        """Bytes of one element."""
    @property
    def nbytes(self) -> int: ...
    @property
    def backend(self) -> Backend: ...
    def flush_hook(self, hook: _Hook) -> None: ...
    def allocate_hook(self, hook: _Hook) -> None: ...
    def append_one_hook(self, hook: _Hook) -> None: ...
    def append_multiple_hook(self, hook: _Hook) -> None: ...
    def buffer_full_hook(self, hook: _Hook) -> None: ...

class Mirror(np.ndarray):
    """glumpy's ``GPUData``: a numpy array (a C-order copy of ``data``) mirrored on
    ``backend``; writes through indexing, slicing, in-place operators, ufuncs with ``out=``,
    ``fill``, ``sort``, ``put`` and ``numpy.copyto``/``put``/``place``/``putmask``/
    ``fill_diagonal``/``put_along_axis`` mark the bytes they cover; ``sync()`` uploads them."""

    def __new__(cls, data: npt.ArrayLike, backend: Optional[Backend] = None, policy: str = "hull") -> Mirror: ...
    @property
    def pending_data(self) -> Optional[Tuple[int, int]]:
        """The ``(start, stop)`` byte range written and not uploaded, or None."""
    @property
    def pending_ranges(self) -> List[Tuple[int, int]]: ...
    def sync(self) -> Dict[str, Any]:
        """Uploads the pending bytes: ``{"ranges", "bytes", "commands"}``."""
    @property
    def device(self) -> NDBuffer:
        """The device array of the whole mirrored data."""
    def mark_dirty(self) -> None:
        """Marks every byte of this view as written (after writes that bypass the array)."""

def _adopt_pyopencl(
    owner: Any, buffer: Any, shape: List[int], strides: List[int], dtype: _DType, offset: int
) -> NDBuffer: ...
def _strided_view(base: NDBuffer, shape: List[int], strides: List[int], dtype: _DType, offset: int) -> NDBuffer: ...
def _pyopencl_block_array(buf: Any) -> Tuple[NDBuffer, int]: ...
def _pyopencl_release(buf: Any) -> None: ...
def from_dlpack(obj: Any, backend: Optional[Backend] = None) -> NDBuffer:
    """Any object with ``__dlpack__`` on ``backend``. Host memory: shared on the CPU where
    ``NDBuffer.from_numpy`` would share it, else a copy. CUDA memory (kDLCUDA): adopted without
    a copy by a CUDA backend of the same device (default: the default CUDA device), the capsule
    taken and its deleter run when the last view is gone; InvalidArgumentError for another
    backend. An object without ``__dlpack__`` but with ``__cuda_array_interface__``
    (``backend`` None or CUDA) is adopted without a copy."""

# Private: the pure halves of the CUDA array interface, for tests.
def _cuda_array_interface(
    shape: Sequence[int], strides: Sequence[int], dtype: _DType, ptr: int, stream: Optional[int] = None
) -> Dict[str, Any]: ...
def _parse_cuda_array_interface(
    dict: Dict[str, Any],
) -> Tuple[str, List[int], int, int, List[int], int, Optional[int]]: ...

# Private: the pure halves of DLPack, for tests (none builds a capsule).
def _read_dlpack_capsule(capsule: Any) -> Tuple[Tuple[int, int], str, List[int], List[int], int]: ...
def _dlpack_consumer_stream(device_type: int, stream: Any = None) -> Optional[int]: ...

class ImmediateAllocator:
    """pyopencl's: memory exists when a call returns; over a Backend or a pyopencl queue."""

    def __init__(self, queue: Any, mem_flags: Optional[int] = None) -> None: ...
    def __call__(self, size: int) -> Any:
        """New memory of ``size`` bytes (a pyopencl.Buffer, or a uint8 NDBuffer for a
        backend); None for 0 bytes."""
    @property
    def backend(self) -> Backend: ...

class DeferredAllocator:
    """pyopencl's: the device may back memory on first use; over a Backend or a pyopencl
    context."""

    def __init__(self, context: Any, mem_flags: Optional[int] = None) -> None: ...
    def __call__(self, size: int) -> Any:
        """As ``ImmediateAllocator``'s."""
    @property
    def backend(self) -> Backend: ...

class PooledBuffer:
    """A block on loan from a MemoryPool."""

    @property
    def size(self) -> int:
        """The bytes asked for."""
    @property
    def block_size(self) -> Optional[int]:
        """The block's real size, or None once released."""
    @property
    def released(self) -> bool: ...
    @property
    def int_ptr(self) -> int:
        """The block's cl_mem, for a block that starts its OpenCL buffer."""
    @property
    def backend(self) -> Backend: ...
    def release(self) -> None:
        """Returns the block to the pool (InvalidArgumentError the second time)."""
    def bind_to_queue(self, queue: Any) -> None:
        """pyopencl's: a no-op."""
    def unbind_from_queue(self) -> None:
        """pyopencl's: a no-op."""
    def as_ndbuffer(self, shape: _Shape, dtype: _DType = None) -> NDBuffer:
        """The block as an array over its first bytes; the array then owns the block."""
    def __enter__(self) -> PooledBuffer: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

class MemoryPool:
    """pyopencl's MemoryPool over a gpubuf backend."""

    def __init__(
        self,
        allocator: Union[Backend, ImmediateAllocator, DeferredAllocator],
        leading_bits_in_bin_id: int = 4,
        limit: Union[int, float, None] = None,
    ) -> None: ...
    def allocate(self, size: int) -> Any:
        """A PooledBuffer (a gpubuf.pyopencl.PooledBuffer for a pool over pyopencl objects)."""
    def __call__(self, size: int) -> Any: ...
    def empty(self, shape: _Shape, dtype: _DType = None) -> NDBuffer: ...
    def zeros(self, shape: _Shape, dtype: _DType = None) -> NDBuffer: ...
    @property
    def held_blocks(self) -> int: ...
    @property
    def active_blocks(self) -> int: ...
    @property
    def managed_bytes(self) -> int: ...
    @property
    def active_bytes(self) -> int: ...
    @property
    def held_bytes(self) -> int: ...
    @property
    def limit(self) -> Optional[int]: ...
    def set_limit(self, limit: Union[int, float, None]) -> None: ...
    def stats(self) -> Dict[str, Optional[int]]: ...
    def free_held(self) -> None: ...
    def stop_holding(self) -> None: ...
    def bin_number(self, size: int) -> int: ...
    def alloc_size(self, bin: int) -> int: ...
    @property
    def backend(self) -> Backend: ...

class QuantityHaloSpec:
    """pace-util's QuantityHaloSpec: a quantity's memory (strides in bytes) and halo."""

    def __init__(
        self,
        n_points: int,
        strides: Sequence[int],
        itemsize: int,
        shape: Sequence[int],
        origin: Sequence[int],
        extent: Sequence[int],
        dims: Sequence[str],
        numpy_module: Any = None,
        dtype: _DType = None,
    ) -> None: ...
    @property
    def n_points(self) -> int: ...
    @property
    def strides(self) -> Tuple[int, ...]: ...
    @property
    def itemsize(self) -> int: ...
    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def origin(self) -> Tuple[int, ...]: ...
    @property
    def extent(self) -> Tuple[int, ...]: ...
    @property
    def dims(self) -> Tuple[str, ...]: ...
    @property
    def numpy_module(self) -> Any: ...
    @property
    def dtype(self) -> np.dtype: ...

class HaloExchangeSpec:
    """pace-util's HaloExchangeSpec: slices to pack (rotated clockwise) and to unpack into."""

    def __init__(
        self,
        specification: Any,  # a QuantityHaloSpec, gpubuf's or pace-util's
        pack_slices: Sequence[slice],
        pack_clockwise_rotation: int,
        unpack_slices: Sequence[slice],
    ) -> None: ...
    @property
    def specification(self) -> QuantityHaloSpec: ...
    @property
    def pack_slices(self) -> Sequence[slice]: ...
    @property
    def pack_clockwise_rotation(self) -> int: ...
    @property
    def unpack_slices(self) -> Sequence[slice]: ...
    @property
    def pack_buffer_size(self) -> int: ...

_Quantity = Union[np.ndarray, NDBuffer, Any]
_BackendArg = Union[Backend, str, None]

class HaloBuffer:
    """A halo transformer's pack or unpack buffer with pace-util's Buffer surface."""

    @property
    def array(self) -> Any: ...
    def assign_from(self, source: Any, buffer_slice: Any = None) -> None: ...
    def assign_to(self, destination_array: Any, buffer_slice: Any = None, buffer_reshape: Optional[Sequence[int]] = None) -> None: ...
    def finalize_memory_transfer(self) -> None: ...
    def to_numpy(self) -> np.ndarray: ...
    def __array__(self, dtype: _DType = None, copy: Optional[bool] = None) -> np.ndarray: ...
    @property
    def ndbuffer(self) -> NDBuffer: ...
    @property
    def size(self) -> int: ...
    @property
    def shape(self) -> List[int]: ...
    @property
    def dtype(self) -> np.dtype: ...
    @property
    def backend(self) -> Backend: ...
    def __len__(self) -> int: ...

class HaloDataTransformer:
    """pace-util's HaloDataTransformer: one pack and one unpack launch per exchange."""

    @staticmethod
    def get(
        np_module: Any,
        exchange_descriptors_x: Sequence[Any],  # HaloExchangeSpec, gpubuf's or pace-util's
        exchange_descriptors_y: Optional[Sequence[Any]] = None,
        backend: _BackendArg = None,
    ) -> HaloDataTransformer: ...
    @staticmethod
    def set_default_backend(backend: _BackendArg) -> Optional[Backend]: ...
    @staticmethod
    def default_backend() -> Optional[Backend]: ...
    def async_pack(
        self, quantities_x: Sequence[_Quantity], quantities_y: Optional[Sequence[_Quantity]] = None
    ) -> None: ...
    def async_unpack(
        self, quantities_x: Sequence[_Quantity], quantities_y: Optional[Sequence[_Quantity]] = None
    ) -> None: ...
    def synchronize(self) -> None: ...
    def get_pack_buffer(self) -> HaloBuffer: ...
    def get_unpack_buffer(self) -> HaloBuffer: ...
    @property
    def _pack_buffer(self) -> Optional[HaloBuffer]: ...
    @property
    def _unpack_buffer(self) -> Optional[HaloBuffer]: ...
    def receive(self, data: npt.ArrayLike) -> None: ...
    def loopback(self) -> None: ...
    def ready(self) -> bool: ...
    def finalize(self) -> None: ...
    @property
    def buffer_size(self) -> int: ...
    @property
    def dtype(self) -> np.dtype: ...
    @property
    def backend(self) -> Backend: ...

# A field of HaloFields: a QuantityHaloSpec (gpubuf's or pace's), an array whose shape and
# dtype describe it (with n_halo= and dims=), or a pair of either (a vector: x, y).
_FieldSpec = Union[QuantityHaloSpec, _Quantity, Tuple[Any, Any]]

class HaloFields:
    """The halo update of many fields at once, every boundary (edges and corners), built once:
    periodic on one rank (``update``), or rank ``rank`` of ``tile=(ny, nx)`` / ``cube=layout``
    exchanging one message per neighbour (``pack``, ``message``, ``receive``, ``unpack``)."""

    def __init__(
        self,
        fields: Sequence[_FieldSpec],
        n_halo: Optional[int] = None,
        dims: Optional[Sequence[str]] = None,
        backend: Optional[Backend] = None,
        periodic: bool = True,
        tile: Optional[Tuple[int, int]] = None,
        cube: Optional[int] = None,
        rank: int = 0,
    ) -> None: ...
    def update(self, arrays: Sequence[Union[_Quantity, Tuple[_Quantity, _Quantity]]]) -> None: ...
    def pack(self, k: int, arrays: Sequence[Union[_Quantity, Tuple[_Quantity, _Quantity]]]) -> None: ...
    def message(self, k: int) -> bytes: ...
    def receive(self, k: int, data: bytes) -> None: ...
    def unpack(self, k: int, arrays: Sequence[Union[_Quantity, Tuple[_Quantity, _Quantity]]]) -> None: ...
    @property
    def neighbors(self) -> List[int]: ...
    @property
    def dtypes(self) -> List[np.dtype]: ...
    @property
    def backend(self) -> Backend: ...
    def __len__(self) -> int: ...

# Private: the Rust side of `python -m gpubuf.bench`.
class _Evictor:
    def __init__(self, backend: Backend, nbytes: int) -> None: ...
    def __call__(self) -> None: ...

def _halo_times(
    transformer: HaloDataTransformer,
    quantities_x: Sequence[_Quantity],
    quantities_y: Optional[Sequence[_Quantity]],
    unpack: bool,
    reps: int,
    warm: bool,
    evictor: Optional[_Evictor] = None,
) -> List[float]: ...
def _pool_hit_ns(pool: MemoryPool, size: int, iters: int) -> float: ...
def _pool_gil_releases() -> int: ...
