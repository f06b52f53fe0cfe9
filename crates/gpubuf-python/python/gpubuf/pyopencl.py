"""gpubuf under pyopencl code: gpubuf's pool and allocators over pyopencl's own context and
queue, their blocks usable wherever pyopencl takes a buffer.

Made from pyopencl objects, gpubuf's allocators and pool work in that very context::

    import pyopencl as cl, pyopencl.array as cl_array
    import gpubuf

    queue = cl.CommandQueue(cl.create_some_context())
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    a = cl_array.arange(queue, 2000, dtype="float32", allocator=pool)   # pyopencl's array

``gpubuf.ImmediateAllocator(queue)`` and ``gpubuf.DeferredAllocator(context)`` (optional
``mem_flags``: ``READ_WRITE`` only) return ``pyopencl.Buffer`` objects when called, None for
0 bytes. A pool over such an allocator hands out :class:`PooledBuffer`, a subclass of
``pyopencl.Buffer`` (kernel arguments, ``enqueue_copy``, ``pyopencl.array``'s
``allocator=``), each block an OpenCL buffer of its own of its size class, as in pyopencl's
pool (handed to pyopencl as a ``pyopencl.Buffer`` over that buffer). The block goes back
to the pool at ``release()``, or once nothing but the pool refers to the object (the pool
looks when a request of its size class comes, before its counters are read, as its loans
outgrow the objects in use by a sixteenth, and before a request fails for want of memory);
pyopencl's references to it (an array's ``base_data``) keep it out until then.
``gpubuf.Backend.from_pyopencl(queue_or_context)`` is the OpenCL backend over the same
context, for gpubuf's own arrays there.

``to_gpubuf(obj)`` adopts a ``pyopencl.array.Array`` or ``pyopencl.Buffer`` as a gpubuf
array over the same memory, without a copy.

``install()`` / ``uninstall()`` / ``installed()`` put gpubuf's classes under the names
pyopencl users import them by (``pyopencl.tools.MemoryPool``, ``ImmediateAllocator``,
``DeferredAllocator``), so that unchanged pyopencl code allocates from gpubuf's pool;
``pytest -p gpubuf.pyopencl_plugin`` does so for a test session.
"""

import contextlib
from typing import Any, Dict, Iterator, Optional

import pyopencl as _cl

from ._gpubuf import (
    DeferredAllocator,
    DeviceMismatchError,
    ImmediateAllocator,
    InvalidArgumentError,
    MemoryPool,
    _adopt_pyopencl,
    _pyopencl_block_array,
    _pyopencl_release,
    _strided_view,
)

__all__ = ["PooledBuffer", "install", "installed", "is_installed", "to_gpubuf", "uninstall"]

class PooledBuffer(_cl.Buffer):
    """A block of a gpubuf pool as a ``pyopencl.Buffer`` (pyopencl's ``PooledBuffer``
    surface) over the block's own OpenCL buffer. The block goes back to the pool at
    ``release()`` (a second one raises pyopencl's ``LogicError``) or once nothing but the
    pool refers to the object; as with pyopencl's pool, work queued on the buffer is not
    waited for (the next user of the block is ordered after it on the same in-order
    queue). Sub-regions are refused, as by pyopencl's ``PooledBuffer``: one could outlive
    the block."""

    __slots__ = ()

    def __setattr__(self, name, value) -> None:
        # The class is how the block goes back once the pool stopped holding (its
        # subclass's __del__): fixed, as pyopencl's PooledBuffer's is (TypeError).
        if name == "__class__":
            raise TypeError("__class__ assignment: a pooled buffer's class is fixed")
        _cl.Buffer.__setattr__(self, name, value)

    def release(self) -> None:
        """Returns the block to the pool, then drops this object's reference to the
        buffer (pyopencl's ``release()``: a second call raises ``LogicError``)."""
        _pyopencl_release(self)

    def get_sub_region(self, origin, size, flags=0):
        """Refused: a sub-buffer of a pooled block could outlive the block."""
        raise InvalidArgumentError("a pooled buffer has no sub-regions (one could outlive its block)")

    def __getitem__(self, idx):
        """Refused, as ``get_sub_region``."""
        raise InvalidArgumentError("a pooled buffer has no sub-regions (one could outlive its block)")

    def bind_to_queue(self, queue) -> None:
        """pyopencl's: a no-op here (gpubuf's blocks are not bound to a queue)."""

    def unbind_from_queue(self) -> None:
        """pyopencl's: a no-op here."""


class _OrphanPooledBuffer(PooledBuffer):
    """A ``PooledBuffer`` whose pool object is gone or stopped holding: its block goes back
    at its end."""

    __slots__ = ()

    def __del__(self, _release=_pyopencl_release) -> None:
        try:
            _release(self)
        except Exception:  # released already: its block went back then
            pass


def to_gpubuf(obj, queue=None):
    """A gpubuf array over the memory of ``obj`` (no copy): a ``pyopencl.array.Array`` (its
    shape, strides, dtype and offset) or a ``pyopencl.Buffer`` (its bytes, uint8). The
    array's device is ``gpubuf.Backend.from_pyopencl`` of ``queue``, else of the array's
    queue, else of the context; work queued on the array's events is waited for unless
    it runs on that same queue.

    Memory from a gpubuf pool (a :class:`PooledBuffer`) is shared with the pool's block,
    which then returns to the pool once the pyopencl buffer and every gpubuf view of it
    are gone; the array is then on the pool's device (``queue`` must be of the same
    context), and the pyopencl array's pending work is waited for first, since the pool's
    queue need not be the array's.

    Raises ``InvalidArgumentError`` for a read-only buffer, strides that are not whole
    elements or a released pooled buffer; ``DeviceMismatchError`` for memory of another
    context than ``queue``'s."""
    import pyopencl.array as cl_array

    if isinstance(obj, PooledBuffer):
        _same_context(queue, obj)
        whole, asked = _pyopencl_block_array(obj)
        return whole[:asked]  # the bytes asked for (obj.size is the block's)
    if isinstance(obj, cl_array.Array):
        owner = queue if queue is not None else (obj.queue if obj.queue is not None else obj.context)
        if obj.events and owner is not obj.queue:
            _cl.wait_for_events(obj.events)
        base = obj.base_data
        if base is None:  # an empty array has no buffer
            raise InvalidArgumentError("an array without memory (size 0) cannot be adopted")
        if isinstance(base, PooledBuffer):
            _same_context(queue, base)
            if obj.events:
                _cl.wait_for_events(obj.events)
            # Bounded by the whole block (the buffer's size), as pyopencl bounds the array.
            whole, _ = _pyopencl_block_array(base)
            return _strided_view(whole, list(obj.shape), list(obj.strides), obj.dtype, obj.offset)
        return _adopt_pyopencl(owner, base, list(obj.shape), list(obj.strides), obj.dtype, obj.offset)
    if isinstance(obj, _cl.Buffer):
        owner = queue if queue is not None else obj.context
        return _adopt_pyopencl(owner, obj, [obj.size], [1], "uint8", 0)
    raise InvalidArgumentError(f"to_gpubuf takes a pyopencl.array.Array or pyopencl.Buffer, not {type(obj).__name__}")


def _same_context(queue, buf) -> None:
    """Raises ``DeviceMismatchError`` when ``queue`` (a pyopencl queue or context; None: no
    check) is of another context than the buffer ``buf``, ``InvalidArgumentError`` when it
    is neither."""
    if queue is None:
        return
    ctx = queue if isinstance(queue, _cl.Context) else getattr(queue, "context", None)
    if not isinstance(ctx, _cl.Context):
        raise InvalidArgumentError("queue is a pyopencl.CommandQueue or pyopencl.Context")
    if ctx.int_ptr != buf.context.int_ptr:
        raise DeviceMismatchError("the buffer belongs to another OpenCL context than the queue's")


_NAMES = ("MemoryPool", "ImmediateAllocator", "DeferredAllocator")
_OURS = {"MemoryPool": MemoryPool, "ImmediateAllocator": ImmediateAllocator, "DeferredAllocator": DeferredAllocator}
# While installed: what pyopencl.tools had under each name.
_saved: Optional[Dict[str, Any]] = None


def is_installed() -> bool:
    """Whether ``pyopencl.tools``' pool and allocators are gpubuf's now."""
    return _saved is not None


def install() -> None:
    """Puts gpubuf's ``MemoryPool``, ``ImmediateAllocator`` and ``DeferredAllocator`` in
    ``pyopencl.tools`` (code that imports them from there afterwards gets gpubuf's; a name
    imported before keeps pyopencl's). Installing again does nothing."""
    global _saved
    import pyopencl.tools as tools

    if _saved is not None:
        return
    _saved = {name: getattr(tools, name) for name in _NAMES}
    for name in _NAMES:
        setattr(tools, name, _OURS[name])


def uninstall() -> None:
    """Puts pyopencl's own classes back (nothing when not installed)."""
    global _saved
    import pyopencl.tools as tools

    if _saved is None:
        return
    saved, _saved = _saved, None
    for name, value in saved.items():
        setattr(tools, name, value)


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """``install()`` for a ``with`` block; afterwards as before."""
    was = is_installed()
    install()
    try:
        yield
    finally:
        if not was:
            uninstall()
