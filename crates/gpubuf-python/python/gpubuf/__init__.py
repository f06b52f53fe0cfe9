"""gpubuf: a GPU-memory toolkit (device-memory pool, n-d buffers with numpy, DLPack and
CUDA array interface interop, pace-util's halo transformer (also as ``gpubuf.halo``, and
under pace-util itself with ``gpubuf.pace.install()``), dolphin's bufferizer,
glumpy's GPUData as ``Mirror``) on CPU, OpenCL and CUDA.

The classes and functions live in the native module ``gpubuf._gpubuf`` and are
re-exported here, so ``gpubuf.NDBuffer`` and ``gpubuf.MemoryPool`` are what they were.
``gpubuf.zarr`` (imported on its own, it needs zarr-python 3) is zarr's buffer prototype
over gpubuf arrays. ``python -m gpubuf.bench halo|pool|zarr`` runs the Python benchmarks
(docs/python.md).
"""

from ._gpubuf import (
    Backend,
    BackendUnavailableError,
    BuildError,
    Bufferizer,
    CapacityError,
    DeferredAllocator,
    DeviceMismatchError,
    DriverError,
    DTypeMismatchError,
    Flags,
    GpubufError,
    HaloBuffer,
    HaloDataTransformer,
    HaloExchangeSpec,
    HaloFields,
    ImmediateAllocator,
    InvalidArgumentError,
    InvalidPlanError,
    LengthMismatchError,
    MemoryPool,
    Mirror,
    NDBuffer,
    OutOfBoundsError,
    OutOfMemoryError,
    PooledBuffer,
    QuantityHaloSpec,
    ShapeMismatchError,
    __version__,
    available_backends,
    backends,
    from_dlpack,
)

__all__ = [
    "Backend",
    "BackendUnavailableError",
    "BuildError",
    "Bufferizer",
    "CapacityError",
    "DeferredAllocator",
    "DeviceMismatchError",
    "DriverError",
    "DTypeMismatchError",
    "Flags",
    "GpubufError",
    "HaloBuffer",
    "HaloDataTransformer",
    "HaloExchangeSpec",
    "HaloFields",
    "ImmediateAllocator",
    "InvalidArgumentError",
    "InvalidPlanError",
    "LengthMismatchError",
    "MemoryPool",
    "Mirror",
    "NDBuffer",
    "OutOfBoundsError",
    "OutOfMemoryError",
    "PooledBuffer",
    "QuantityHaloSpec",
    "ShapeMismatchError",
    "__version__",
    "available_backends",
    "backends",
    "from_dlpack",
]
