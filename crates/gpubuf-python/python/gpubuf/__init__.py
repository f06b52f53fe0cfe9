"""gpubuf: a GPU-memory toolkit (device-memory pool, n-d buffers with numpy, DLPack and
CUDA array interface interop, pace-util's halo transformer, dolphin's bufferizer) on CPU, OpenCL and CUDA.

The classes and functions live in the native module ``gpubuf._gpubuf`` and are
re-exported here, so ``gpubuf.NDBuffer`` and ``gpubuf.MemoryPool`` are what they were.
``python -m gpubuf.bench halo|pool`` runs the Python benchmarks (docs/python.md).
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
    GpubufError,
    HaloDataTransformer,
    HaloExchangeSpec,
    ImmediateAllocator,
    InvalidArgumentError,
    InvalidPlanError,
    LengthMismatchError,
    MemoryPool,
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
    "GpubufError",
    "HaloDataTransformer",
    "HaloExchangeSpec",
    "ImmediateAllocator",
    "InvalidArgumentError",
    "InvalidPlanError",
    "LengthMismatchError",
    "MemoryPool",
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
