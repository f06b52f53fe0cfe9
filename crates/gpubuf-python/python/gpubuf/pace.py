"""pace-util's halo exchanges on gpubuf, with no change to pace code.

``install(backend=None)`` makes every halo data transformer pace-util builds a gpubuf
one; ``uninstall()`` puts pace-util back exactly as it was; ``installed(backend=None)``
does both around a ``with`` block::

    import gpubuf.pace
    gpubuf.pace.install("cpu")          # or "opencl", "cuda", a gpubuf.Backend, None
    ...                                 # pace code, unchanged

What is patched, and why it reaches every path: pace-util builds each transformer through
one call, ``HaloDataTransformer.get(np_module, descriptors_x, descriptors_y)``, looked up
on the class object ``pace.util.halo_data_transformer.HaloDataTransformer`` (the name
``pace.util.halo_updater`` imports; ``HaloUpdater.from_scalar_specifications`` and
``from_vector_specifications`` call it, and the communicators' ``halo_update``,
``start_halo_update``, ``vector_halo_update``, ``start_vector_halo_update``,
``get_scalar_halo_updater`` and ``get_vector_halo_updater`` go through those). So
``install`` replaces the ``get`` attribute of that class, which every module that
imported the class sees, whenever it imported it, rather than each imported name.
pace's own ``HaloUpdater`` then drives gpubuf transformers: their buffers
(``gpubuf.HaloBuffer``) have the ``.array`` it hands to MPI. ``install`` also makes
``pace.util.buffer.Buffer.push_to_cache`` leave a gpubuf buffer alone (its transformer
owns it) and hand anything else to pace's own. ``synchronize_vector_interfaces`` copies
through pace's ``Buffer`` and stays on pace.

``backend`` is a ``gpubuf.Backend`` or a name (opened once, at ``install``); None chooses
per transformer from ``np_module`` (numpy: a new CPU device; CuPy: CUDA). Importing this
module does not import pace-util; ``install`` raises ``ImportError`` without it.

pace-util 0.9.0 imports ``numpy.lib.index_tricks``, which numpy 2 renamed
``numpy.lib._index_tricks_impl``: ``install`` (and the pytest plugin
``gpubuf.pace_plugin``, at its import) maps the old name to the new module when the old
one is missing, so that ``import pace.util`` works on numpy 2.
"""

import contextlib
import sys
from typing import Any, Dict, Iterator, Optional, Union

from ._gpubuf import Backend, HaloBuffer, HaloDataTransformer

__all__ = ["install", "installed", "is_installed", "uninstall", "pytest_plugin"]

_MISSING = object()
# While installed: the backend, and the attributes replaced with what they were.
_state: Optional[Dict[str, Any]] = None


def _numpy2_compat() -> None:
    """Maps ``numpy.lib.index_tricks`` to numpy 2's module when it is missing."""
    try:
        import numpy.lib.index_tricks  # noqa: F401
    except ImportError:
        try:
            import numpy.lib._index_tricks_impl as tricks
        except ImportError:
            return
        sys.modules.setdefault("numpy.lib.index_tricks", tricks)


def _import_pace():
    _numpy2_compat()
    try:
        import pace.util.buffer as buffer
        import pace.util.halo_data_transformer as hdt
    except ImportError as e:
        raise ImportError(
            f"gpubuf.pace.install() needs pace-util (pip install pace-util): {e}"
        ) from e
    return hdt, buffer


def _get(np_module, exchange_descriptors_x, exchange_descriptors_y=None):
    """pace's ``HaloDataTransformer.get``, on gpubuf."""
    backend = _state["backend"] if _state is not None else None
    return HaloDataTransformer.get(np_module, exchange_descriptors_x, exchange_descriptors_y, backend=backend)


def _push_to_cache(buffer):
    """pace's ``Buffer.push_to_cache``, leaving gpubuf's buffers to their transformer."""
    if isinstance(buffer, HaloBuffer):
        return None
    original = _state["push_to_cache"] if _state is not None else None
    if original is None:  # uninstalled meanwhile: pace's own is back on the class
        import pace.util.buffer as pbuf

        return pbuf.Buffer.push_to_cache(buffer)
    return original.__func__(buffer)


def _open(backend: Union[Backend, str, None]) -> Optional[Backend]:
    if backend is None or isinstance(backend, Backend):
        return backend
    if isinstance(backend, str):
        return Backend(backend)
    raise TypeError(f"backend is a gpubuf.Backend, a name or None, not {type(backend).__name__}")


def is_installed() -> bool:
    """Whether pace-util's transformers are gpubuf's now."""
    return _state is not None


def install(backend: Union[Backend, str, None] = None) -> None:
    """Makes pace-util build gpubuf transformers (see the module docs). Installing again
    only changes the backend. Raises ``ImportError`` without pace-util,
    ``BackendUnavailableError`` for a backend that cannot run here."""
    global _state
    hdt, pbuf = _import_pace()
    device = _open(backend)
    if _state is not None:
        _state["backend"] = device
        return
    cls, buf = hdt.HaloDataTransformer, pbuf.Buffer
    state = {
        "backend": device,
        "class": cls,
        "get": cls.__dict__.get("get", _MISSING),
        "buffer_class": buf,
        "push_to_cache": buf.__dict__.get("push_to_cache", _MISSING),
    }
    cls.get = staticmethod(_get)
    buf.push_to_cache = staticmethod(_push_to_cache)
    _state = state


def uninstall() -> None:
    """Puts back what ``install`` replaced (nothing when not installed)."""
    global _state
    if _state is None:
        return
    state, _state = _state, None
    for owner, name in ((state["class"], "get"), (state["buffer_class"], "push_to_cache")):
        if state[name] is _MISSING:
            delattr(owner, name)
        else:
            setattr(owner, name, state[name])


@contextlib.contextmanager
def installed(backend: Union[Backend, str, None] = None) -> Iterator[None]:
    """``install(backend)`` for a ``with`` block; afterwards what was before (uninstalled,
    or installed with its backend)."""
    before = None if _state is None else _state["backend"]
    was = _state is not None
    install(backend)
    try:
        yield
    finally:
        if not was:
            uninstall()
        elif _state is not None:
            _state["backend"] = before
        else:  # uninstalled inside the block: installed again, as it was before it
            install(before)


from . import pace_plugin as pytest_plugin  # noqa: E402
