"""pace-util's halo API under pace-util's module name: ``gpubuf.halo`` holds what
``pace.util.halo_data_transformer`` holds for a halo exchange, over gpubuf's native
classes (one pack and one unpack launch per exchange, on the CPU, OpenCL or CUDA).

- ``HaloDataTransformer.get(np_module, exchange_descriptors_x,
  exchange_descriptors_y=None, backend=None)``: the factory, as pace's. The device is
  ``backend=`` (a ``gpubuf.Backend`` or a name), else this module's default
  (``set_default_backend``), else what ``np_module`` says: numpy a new CPU device, CuPy
  the CUDA device.
- ``QuantityHaloSpec``, ``HaloExchangeSpec``: gpubuf's; pace's own spec objects are taken
  too (read by their attributes).
- ``Buffer``: the transformers' pack and unpack buffers (``gpubuf.HaloBuffer``), with
  pace's ``Buffer`` surface: ``array``, ``assign_from``, ``assign_to``,
  ``finalize_memory_transfer``.

``gpubuf.pace.install()`` puts these under pace-util itself (docs/python.md).
"""

from typing import Optional, Union

from ._gpubuf import Backend, HaloBuffer, HaloDataTransformer, HaloExchangeSpec, QuantityHaloSpec

Buffer = HaloBuffer

__all__ = [
    "Buffer",
    "HaloBuffer",
    "HaloDataTransformer",
    "HaloExchangeSpec",
    "QuantityHaloSpec",
    "get_default_backend",
    "set_default_backend",
]


def set_default_backend(backend: Union[Backend, str, None]) -> Optional[Backend]:
    """Makes ``backend`` (a ``gpubuf.Backend``, a name such as ``"opencl"``, or None for
    none) the device of every ``HaloDataTransformer.get`` without ``backend=``; returns
    the previous default. A name opens its backend now: ``BackendUnavailableError`` for
    one that cannot run here, ``InvalidArgumentError`` for an unknown name."""
    return HaloDataTransformer.set_default_backend(backend)


def get_default_backend() -> Optional[Backend]:
    """The default device of ``HaloDataTransformer.get``, or None (chosen from
    ``np_module``)."""
    return HaloDataTransformer.default_backend()
