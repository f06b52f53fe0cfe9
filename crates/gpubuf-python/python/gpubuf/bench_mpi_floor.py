"""References for ``python -m gpubuf.bench mpi``: the same bytes moved with nothing else.

- ``Floor``: the one-copy protocol of ``gpubuf.mpi.HaloUpdater.on_node`` with nothing but
  its synchronisation and one contiguous copy a link. Each rank sends each neighbour a
  note (its fields are ready), waits for the neighbours' notes, copies each link's bytes
  in one block out of that neighbour's segment of a node-shared window, then sends each
  neighbour a credit (done reading) and waits for theirs (nobody reads its fields any
  more). An update that copies each halo once between processes synchronises at least
  this much (the neighbour's cells are final before it is read, and stay so until it is
  read) and copies at least these bytes; this copies them contiguous, with no stride,
  rotation or Python around them.
- ``Raw``: MPI's own exchange of the same bytes, contiguous (``Irecv``/``Isend``/
  ``Waitall`` of each link's message size), as the baseline of ``gpubuf bench mpi``.

Both use persistent requests on a duplicate of the communicator, so that Python adds a
few calls an update and no message of theirs can match another's. Collective to make
(``Floor.make``, ``Raw``) and to ``close``; ``links`` is the updater's
``message_bytes``: ``(neighbour, bytes)`` per link, the same bytes each way.
"""

import numpy as np
from mpi4py import MPI


def _links(links):
    return [(int(n), max(8, int(b))) for n, b in links]


class Floor:
    """See the module docs. Made by ``make``."""

    @classmethod
    def make(cls, comm, links):
        """The floor, or ``None`` on every rank when some rank has a neighbour on another
        node (no shared memory between them). Collective over ``comm``."""
        links = _links(links)
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        peers = MPI.Group.Translate_ranks(comm.Get_group(), [n for n, _ in links], node.Get_group())
        local = all(p != MPI.UNDEFINED for p in peers)
        if not comm.allreduce(local, op=MPI.LAND):
            node.Free()
            return None
        return cls(comm, node, links, peers)

    def __init__(self, comm, node, links, peers):
        self._comm = comm.Dup()
        self._node = node
        most = max((b for _, b in links), default=8)
        self._win = MPI.Win.Allocate_shared(most, 1, comm=self._node)
        own = np.ndarray(most, dtype=np.uint8, buffer=self._win.tomemory())
        own[:] = np.random.default_rng(comm.Get_rank()).integers(0, 256, most, dtype=np.uint8)
        self._node.Barrier()
        self._src = []
        for p, (_, b) in zip(peers, links):
            buf, _ = self._win.Shared_query(p)
            self._src.append(np.ndarray(b, dtype=np.uint8, buffer=buf))
        self._dst = [np.empty(b, dtype=np.uint8) for _, b in links]
        token = [np.zeros(1, dtype=np.uint64) for _ in range(4 * len(links))]
        self._tokens = token
        c, ranks = self._comm, [n for n, _ in links]
        k = len(links)
        self._notes = [c.Recv_init(token[i], source=n, tag=1) for i, n in enumerate(ranks)]
        self._notes += [c.Send_init(token[k + i], dest=n, tag=1) for i, n in enumerate(ranks)]
        self._credits = [c.Recv_init(token[2 * k + i], source=n, tag=2) for i, n in enumerate(ranks)]
        self._credits += [c.Send_init(token[3 * k + i], dest=n, tag=2) for i, n in enumerate(ranks)]

    def __call__(self):
        MPI.Prequest.Startall(self._notes)
        MPI.Prequest.Waitall(self._notes)
        for s, d in zip(self._src, self._dst):
            np.copyto(d, s)
        MPI.Prequest.Startall(self._credits)
        MPI.Prequest.Waitall(self._credits)

    def close(self):
        for r in self._notes + self._credits:
            r.Free()
        self._src = []
        self._win.Free()
        self._node.Free()
        self._comm.Free()


class Raw:
    """See the module docs."""

    def __init__(self, comm, links):
        links = _links(links)
        self._comm = comm.Dup()
        rng = np.random.default_rng(comm.Get_rank())
        self._out = [rng.integers(0, 256, b, dtype=np.uint8) for _, b in links]
        self._in = [np.empty(b, dtype=np.uint8) for _, b in links]
        c = self._comm
        self._reqs = [c.Recv_init(buf, source=n, tag=3) for buf, (n, _) in zip(self._in, links)]
        self._reqs += [c.Send_init(buf, dest=n, tag=3) for buf, (n, _) in zip(self._out, links)]

    def __call__(self):
        MPI.Prequest.Startall(self._reqs)
        MPI.Prequest.Waitall(self._reqs)

    def close(self):
        for r in self._reqs:
            r.Free()
        self._comm.Free()
