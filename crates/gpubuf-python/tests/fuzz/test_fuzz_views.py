"""Fuzz: ``view(dtype)``, ``reshape``, ``ravel``, ``transpose``, ``copy`` and
``to_backend`` against numpy, on arrays of every layout (strided, flipped, offset, 0-d,
empty).

``view(dtype)`` of a C-contiguous array is numpy's view (the last axis scaled), a strided
one ``InvalidArgumentError``, a dtype gpubuf lacks ``DTypeMismatchError``; ``reshape``
gives numpy's values or ``ShapeMismatchError`` (sizes differ) / ``InvalidArgumentError``
(negative or non-integer extents, a second -1); ``transpose`` takes numpy's axes
(negative ones included) or raises ``InvalidArgumentError``.
"""

import numpy as np
import pytest
from hypothesis import strategies as st

import gpubuf
from fuzz_strategies import build, sources
from gpubuf_fuzz import DTYPES, FOREIGN_DTYPES, expect_error, load_corpus, outcome, run, same

pytestmark = pytest.mark.fuzz


def c_contiguous(a):
    """Whether a gpubuf array is C-contiguous (numpy's rule: axes of extent 1 and empty
    arrays place no constraint)."""
    if a.size == 0:
        return True
    want = a.itemsize
    for n, s in zip(reversed(a.shape), reversed(a.strides)):
        if n != 1 and s != want:
            return False
        want *= n
    return True


def view(case, backend):
    source, dtype = case
    a, x = build(source, backend)
    if dtype not in DTYPES:
        expect_error(lambda: a.view(dtype), gpubuf.DTypeMismatchError, f"view({dtype!r})")
        return
    numpy_kind, expected = outcome(lambda: np.ascontiguousarray(x).view(dtype) if x.ndim else x.view(dtype))
    # gpubuf's arrays start on a whole element of their dtype; numpy's views need not.
    # from_numpy's array (shared or copied) starts at the numpy array's first element.
    shape, _, np_key, _, gb_key = source
    given = np.empty(shape, np.uint8)[np_key].shape
    first = np.asarray(np.arange(int(np.prod(given))).reshape(given)[gb_key]).reshape(-1)[:1]
    misaligned = a.size and (int(first[0]) * a.itemsize) % np.dtype(dtype).itemsize
    if not c_contiguous(a) or numpy_kind == "err" or misaligned:
        expect_error(lambda: a.view(dtype), gpubuf.InvalidArgumentError, f"view({dtype!r}) of {a!r}")
        same(a, x)
        return
    v = a.view(dtype)
    same(v, expected)
    if a.backend.name == "cpu" and v.size:
        assert np.shares_memory(np.asarray(v), np.asarray(a))


def test_view_dtype(clock, backend):
    cases = st.tuples(sources(), st.sampled_from(DTYPES * 3 + FOREIGN_DTYPES + ["nope"]))
    run(*clock, view, cases, load_corpus("view"), backend)


EXTENTS = st.one_of(st.integers(-3, 8), st.sampled_from([2**40, 2**63, 2**64, -(2**63), 1.0, "2", None]))
RESHAPES = st.one_of(
    st.lists(EXTENTS, max_size=4).map(tuple),
    st.lists(st.integers(-1, 6), max_size=4),
    EXTENTS,
    st.lists(EXTENTS, max_size=3).map(lambda t: ("star",) + tuple(t)),
)


def _int(n):
    return isinstance(n, (int, np.integer)) and not isinstance(n, bool)


def reshape(case, backend):
    source, shape = case
    a, x = build(source, backend)
    star = isinstance(shape, tuple) and shape[:1] == ("star",)
    args = shape[1:] if star else (shape,)
    extents = list(args) if star else (list(shape) if isinstance(shape, (list, tuple)) else [shape])
    call = lambda: a.reshape(*args)  # noqa: E731
    if not all(_int(n) for n in extents) or any(n < -1 for n in extents) or extents.count(-1) > 1:
        expect_error(call, (gpubuf.InvalidArgumentError, gpubuf.ShapeMismatchError), f"reshape{args!r}")
        if not all(_int(n) for n in extents):
            expect_error(call, gpubuf.InvalidArgumentError, f"reshape{args!r}")
        return
    kind, expected = outcome(lambda: x.reshape(*args) if args else x.reshape(()))
    if kind == "err":
        # An extent past usize, or extents no layout holds (their product, zeros counted
        # as one, past isize), are InvalidArgumentError too.
        big = max(extents, default=0) >= 2**63 or int(np.prod([max(n, 1) for n in extents], dtype=object)) >= 2**63
        errors = (gpubuf.ShapeMismatchError,) + ((gpubuf.InvalidArgumentError,) if big else ())
        expect_error(call, errors, f"reshape{args!r} of {x.shape}")
        return
    same(call(), expected)


def test_reshape(clock, backend):
    run(*clock, reshape, st.tuples(sources(), RESHAPES), load_corpus("reshape"), backend)


@st.composite
def axes_cases(draw):
    source = draw(sources())
    ndim = len(np.empty(source[0], np.uint8)[source[2]][source[4]].shape)
    perm = draw(st.permutations(range(ndim)))
    kind = draw(st.sampled_from(["none", "perm", "negative", "random"]))
    if kind == "none":
        return source, None
    if kind == "negative":
        return source, [p - ndim if draw(st.booleans()) else p for p in perm]
    if kind == "random":
        return source, draw(st.lists(st.integers(-ndim - 1, ndim + 1), max_size=ndim + 1))
    return source, list(perm)


def transpose(case, backend):
    source, axes = case
    a, x = build(source, backend)
    kind, expected = outcome(lambda: x.transpose(axes))
    if kind == "err":
        expect_error(lambda: a.transpose(axes), gpubuf.InvalidArgumentError, f"transpose({axes!r}) of {x.shape}")
        return
    t = a.transpose(axes)
    same(t, expected)
    same(a.ravel(), x.ravel())
    same(t.copy(), expected)
    same(t.to_backend(gpubuf.Backend("cpu")), expected)


def test_transpose_ravel_copy(clock, backend):
    run(*clock, transpose, axes_cases(), load_corpus("transpose"), backend)
