"""gpubuf's MPI halo updater from Python, over an mpi4py communicator.

- ``HaloUpdater(comm, partitioner, specifications, specifications_y=None, name="halo")``:
  halo updates of several quantities at once (scalars, or vectors as x and y lists), one
  message a neighbour rank, with NDSL's rotations across cubed-sphere edges;
  ``HaloUpdater.on_node(...)`` copies through node-shared memory instead of messages
  where two ranks share a node, straight out of the neighbour's array when the quantities
  are ``node_buffer`` arrays. ``update(quantities, quantities_y=None)`` runs one update.
- ``node_buffer(shape, dtype=float64, fill=None)``: a numpy array in node-shared memory.
- ``TilePartitioner(layout, periodic=True)``, ``CubedSpherePartitioner(tile)``: how ranks
  are laid out (pace-util's own partitioner objects are taken too).

Specs are gpubuf's ``QuantityHaloSpec`` or pace-util's (read by their attributes); the
quantities are numpy arrays (or pace ``Quantity`` objects, whose ``data`` is one) of the
specs' shape and element type, updated in place. Creating an updater is collective over
the communicator; a rank whose own arguments are wrong still takes part, so every rank
raises (``InvalidArgumentError`` naming the rank at fault) instead of one waiting for
the others. In ``update``, a rank whose quantities are refused (wrong shape, element
type, count, a read-only array) raises, and each of its neighbours raises an error
naming it (their other halos updated); no rank waits. An updater whose communicator was
freed (``comm.Free()``), or used after ``MPI.Finalize``, raises on every rank.

The native module ``gpubuf._mpi`` links Open MPI (``libmpi.so.40``), which the wheel does
not bundle: mpi4py must use the same MPI library (checked on import). docs/python.md,
"MPI halo updates".
"""

import atexit
import sys
import threading
import weakref
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

try:
    from mpi4py import MPI
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError("gpubuf.mpi works over mpi4py communicators: pip install mpi4py") from e

try:
    from . import _mpi
except ImportError as e:
    raise ImportError(
        f"gpubuf.mpi needs the MPI library gpubuf was built with (Open MPI, libmpi.so.40): {e}"
    ) from e

from ._gpubuf import GpubufError, InvalidArgumentError

__all__ = [
    "CubedSpherePartitioner",
    "HaloUpdater",
    "TilePartitioner",
    "node_buffer",
]


def _library_name(version: str) -> str:
    """The library and version a ``Get_library_version`` string starts with."""
    return version.strip().split(",")[0].strip()


_ours, _theirs = _library_name(_mpi.library_version()), _library_name(MPI.Get_library_version())
if _ours != _theirs:
    raise ImportError(
        f"gpubuf.mpi is linked with {_ours!r} but mpi4py runs {_theirs!r}: both must use one MPI "
        "library (for mpi4py's binary wheels, the system's Open MPI is picked at run time)"
    )


class TilePartitioner:
    """A tile of ``layout = (ny, nx)`` ranks, rank ``j * nx + i`` at row ``j`` (south to
    north) and column ``i`` (west to east), wrapping around when ``periodic`` (as
    pace-util's ``TilePartitioner`` does)."""

    def __init__(self, layout: Tuple[int, int], periodic: bool = True):
        ny, nx = (int(n) for n in layout)
        if ny <= 0 or nx <= 0:
            raise InvalidArgumentError(f"layout {tuple(layout)} has no ranks")
        self.layout = (ny, nx)
        self.periodic = bool(periodic)

    @property
    def total_ranks(self) -> int:
        """Ranks of the tile."""
        return self.layout[0] * self.layout[1]

    def neighbors(self, rank: int) -> List[Tuple[str, int, int]]:
        """``(boundary, rank, quarter turns)`` for each boundary of ``rank`` that has a
        neighbour."""
        return _mpi.neighbors(_partitioner(self), rank)

    def __repr__(self) -> str:
        return f"TilePartitioner(layout={self.layout}, periodic={self.periodic})"


class CubedSpherePartitioner:
    """NDSL's cubed sphere: six tiles of a square layout (``tile``: a ``TilePartitioner``,
    pace-util's, or the number of ranks along a tile's side), rank ``tile * per_tile +
    tile_rank``; crossing a tile edge rotates data as NDSL does."""

    def __init__(self, tile: Any):
        n = _square(tile)
        self.tile = tile if hasattr(tile, "layout") else TilePartitioner((n, n))
        self.layout = (n, n)

    @property
    def total_ranks(self) -> int:
        """Ranks of the six tiles."""
        return 6 * self.layout[0] * self.layout[1]

    def neighbors(self, rank: int) -> List[Tuple[str, int, int]]:
        """As ``TilePartitioner.neighbors``."""
        return _mpi.neighbors(_partitioner(self), rank)

    def __repr__(self) -> str:
        return f"CubedSpherePartitioner(layout={self.layout})"


def _square(tile: Any) -> int:
    layout = getattr(tile, "layout", None)
    if layout is None:
        return int(tile)
    ny, nx = (int(n) for n in layout)
    if ny != nx:
        raise InvalidArgumentError(f"a cubed sphere's tiles are square, not {ny}x{nx}")
    return ny


def _partitioner(p: Any) -> tuple:
    """gpubuf's or pace-util's partitioner as the native module's tuple."""
    if isinstance(p, tuple):
        return p
    if hasattr(p, "tile"):
        return ("cube", _square(p.tile))
    layout = getattr(p, "layout", None)
    if layout is not None:
        ny, nx = (int(n) for n in layout)
        return ("tile", ny, nx, bool(getattr(p, "periodic", True)))
    raise InvalidArgumentError(
        f"a partitioner is a TilePartitioner or a CubedSpherePartitioner (gpubuf's or pace-util's), "
        f"not {type(p).__name__}"
    )


def _spec(s: Any) -> tuple:
    """A QuantityHaloSpec (gpubuf's or pace-util's) as the native module's tuple."""
    dtype = getattr(s, "dtype", None)
    return (
        int(s.n_points),
        [int(v) for v in s.strides],
        int(s.itemsize),
        [int(v) for v in s.shape],
        [int(v) for v in s.origin],
        [int(v) for v in s.extent],
        [str(d) for d in s.dims],
        np.dtype(dtype if dtype is not None else np.float64).name,
    )


def _quantity(q: Any) -> Any:
    """A numpy array or node array as it is; a pace Quantity as its ``data``."""
    if isinstance(q, (np.ndarray, _mpi.NodeArray)):
        return q
    data = getattr(q, "data", None)
    return q if data is None else data


# The live updaters in creation order, closed before MPI finalises (mpi4py's own exit
# handler, registered on its import before this module's, runs after this one).
_live: "weakref.WeakValueDictionary[int, HaloUpdater]" = weakref.WeakValueDictionary()
_serial = [0]


def _dying() -> bool:
    """Whether the interpreter is ending on an exception nothing caught (Python records it
    as ``sys.last_value``, ``sys.last_exc`` from 3.12, before the exit handlers run)."""
    return getattr(sys, "last_exc", None) is not None or getattr(sys, "last_value", None) is not None


@atexit.register
def _close_all() -> None:
    # Ending on an uncaught exception (of this rank alone, likely): the collective frees
    # of node windows could wait forever for ranks still inside an update, and would keep
    # mpi4py (`python -m mpi4py`) from aborting the job; the updaters are let go instead.
    dying = _dying()
    for k in sorted(_live.keys()):
        u = _live.get(k)
        if u is not None:
            if dying:
                u._native.abandon()
            else:
                u.close()


class HaloUpdater:
    """Halo updates of several quantities at once over ``comm`` (module docs).

    Collective over ``comm``: every rank makes its updaters in the same order.
    ``specifications_y`` makes it a vector updater (x and y components, exchanged
    together, signs flipped across rotated edges as in NDSL). Each updater exchanges over
    a duplicate of ``comm`` of its own, so its messages never mix with the caller's or
    another updater's; ``name`` (in error messages and message tags) need not differ.
    """

    def __init__(
        self,
        comm: "MPI.Comm",
        partitioner: Any,
        specifications: Sequence[Any],
        specifications_y: Optional[Sequence[Any]] = None,
        *,
        name: str = "halo",
        on_node: bool = False,
    ):
        if not isinstance(comm, MPI.Comm):
            raise InvalidArgumentError(f"comm is an mpi4py communicator, not {type(comm).__name__}")
        if comm == MPI.COMM_NULL:
            raise InvalidArgumentError("comm is MPI.COMM_NULL")
        local_error = None
        part, x, y = ("tile", 1, 1, True), [], None
        try:
            part = _partitioner(partitioner)
            x = [_spec(s) for s in specifications]
            if specifications_y is not None:
                y = [_spec(s) for s in specifications_y]
        except Exception as e:  # every rank must reach the collective creation
            local_error = f"{type(e).__name__}: {e}"
        self._comm = comm
        self._native = _mpi.HaloUpdater(comm, part, x, y, str(name), bool(on_node), local_error)
        _serial[0] += 1
        _live[_serial[0]] = self

    @classmethod
    def on_node(
        cls,
        comm: "MPI.Comm",
        partitioner: Any,
        specifications: Sequence[Any],
        specifications_y: Optional[Sequence[Any]] = None,
        *,
        name: str = "halo",
    ) -> "HaloUpdater":
        """An updater that moves halos through node-shared memory where two ranks share a
        node (one copy, straight from the neighbour's array, for ``node_buffer``
        quantities), and by messages to other nodes. Closing it (``close``, the end of a
        ``with`` block, or its last reference) is collective over the node's ranks."""
        return cls(comm, partitioner, specifications, specifications_y, name=name, on_node=True)

    def _checked(self):
        if self._comm == MPI.COMM_NULL:
            raise InvalidArgumentError(
                "the updater's communicator was freed (comm.Free()): make a new updater"
            )
        _thread_allowed()
        return self._native

    def update(self, quantities: Sequence[Any], quantities_y: Optional[Sequence[Any]] = None) -> None:
        """One halo update of ``quantities`` (and ``quantities_y`` for a vector updater),
        in place; collective over the neighbours. Numpy arrays, ``node_buffer`` arrays or
        pace Quantities; nothing else touches them until it returns."""
        native = self._checked()
        try:
            x = [_quantity(q) for q in quantities]
            y = None if quantities_y is None else [_quantity(q) for q in quantities_y]
        except Exception:
            native.refuse()  # the neighbours raise naming this rank, and none waits
            raise
        native.update(x, y)

    @property
    def dtype(self) -> np.dtype:
        """The quantities' element type."""
        return np.dtype(self._native.dtype)

    @property
    def neighbors(self) -> List[int]:
        """The neighbour ranks, one a link."""
        return self._checked().neighbors

    @property
    def shared_neighbors(self) -> List[int]:
        """The neighbours reached through node-shared memory."""
        return self._checked().shared_neighbors

    @property
    def message_bytes(self) -> List[Tuple[int, int]]:
        """``(neighbour, bytes)`` of each link's message, each way."""
        return self._checked().message_bytes

    @property
    def copied_bytes(self) -> int:
        """Bytes copied straight out of neighbours' node arrays so far."""
        return self._checked().copied_bytes

    def phases(self) -> dict:
        """Mean microseconds per update of each phase (post, pack, send, wait, unpack,
        complete) since the last ``reset_phases``."""
        return self._checked().phases()

    def reset_phases(self) -> None:
        """Forgets the phase times so far."""
        self._checked().reset_phases()

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called."""
        return self._native.closed

    def close(self) -> None:
        """Frees the updater's messages, communicator and shared memory (collective over
        the node's ranks for an ``on_node`` updater); later calls raise."""
        if not self._native.closed:
            _thread_allowed()
        self._native.close()

    def __enter__(self) -> "HaloUpdater":
        return self

    def __exit__(self, kind: Any, *exc: Any) -> None:
        """Closes the updater, also when a gpubuf error leaves the block (those of
        ``update`` are raised on every rank concerned, and the others go on to close it
        too). Any other exception lets the updater go without the collective frees: a
        rank ending on an error of its own must not wait in them for ranks still inside
        an update (with ``python -m mpi4py`` the job then aborts)."""
        if kind is None or issubclass(kind, GpubufError):
            self.close()
        else:
            self._native.abandon()


def _thread_allowed() -> None:
    """Raises ``InvalidArgumentError`` for a call from another thread than the main one
    where MPI was initialised below ``MPI_THREAD_SERIALIZED`` (only the main thread may
    call MPI then)."""
    if threading.current_thread() is threading.main_thread():
        return
    if MPI.Query_thread() < MPI.THREAD_SERIALIZED:
        raise InvalidArgumentError(
            "MPI was initialised below MPI_THREAD_SERIALIZED: use the updater from the main thread"
        )


def node_buffer(shape: Sequence[int], dtype: Any = np.float64, fill: Any = None) -> np.ndarray:
    """A numpy array of ``shape`` in node-shared memory (C order; zeros, or ``fill``):
    ``on_node`` updaters copy neighbours' halos straight out of such arrays when they are
    the quantities updated (not views of them). Its memory lives as long as the array (or
    any view of it)."""
    shape = [int(n) for n in shape]
    if any(n < 0 for n in shape):
        raise InvalidArgumentError(f"shape {tuple(shape)} has a negative extent")
    arr = np.asarray(_mpi.node_array(shape, np.dtype(dtype).name))
    if fill is not None:
        arr[...] = fill
    return arr
