"""Fuzz: ``a[key]`` against numpy's basic indexing, keys of every kind (huge and negative
ints, numpy ints, slices with huge, negative and zero steps, ``...``, ``None``, too many
items, floats, bools, lists, arrays), and shapes given to ``zeros``/``empty``, huge empty
arrays included.

A key numpy's basic indexing takes must give numpy's view (shape, dtype, bytes; on the CPU
the same memory); an advanced key (lists, arrays, booleans) numpy's values in a new array
or numpy's exception class; any other key must raise the documented class
(``OutOfBoundsError`` for an index outside its axis or too many indices,
``InvalidArgumentError`` for the rest), and leave the array as it was.
"""

import operator

import numpy as np
import pytest
from hypothesis import strategies as st

import gpubuf
from fuzz_strategies import build, keys, sources, valid_keys
from gpubuf._fancy import is_fancy
from gpubuf_fuzz import DTYPES, FOREIGN_DTYPES, data, load_corpus, outcome, run, same

pytestmark = pytest.mark.fuzz


def _index(v):
    if isinstance(v, (bool, np.bool_)):
        return None
    try:
        return operator.index(v)
    except TypeError:
        return None


def faults(key, shape):
    """The error classes ``key`` may raise on an array of ``shape`` (empty: none)."""
    items = list(key) if type(key) is tuple else [key]
    out = set()
    consuming = [i for i in items if i is not None and i is not Ellipsis]
    if len(consuming) > len(shape):
        return {gpubuf.OutOfBoundsError}
    if sum(1 for i in items if i is Ellipsis) > 1:
        out.add(gpubuf.InvalidArgumentError)
    axis, seen = 0, False
    for it in items:
        if it is None or (it is Ellipsis and seen):
            continue
        if it is Ellipsis:
            axis += len(shape) - len(consuming)
            seen = True
            continue
        n = shape[axis]
        axis += 1
        if isinstance(it, slice):
            parts = (it.start, it.stop, it.step)
            if any(p is not None and not isinstance(p, bool) and _index(p) is None for p in parts):
                out.add(gpubuf.InvalidArgumentError)
            elif it.step is not None and operator.index(it.step) == 0:
                out.add(gpubuf.InvalidArgumentError)
            continue
        i = _index(it)
        if i is None:
            out.add(gpubuf.InvalidArgumentError)
        elif not -n <= i < n:
            out.add(gpubuf.OutOfBoundsError)
    return out


def check_key(a, x, key):
    """``a[key]`` against ``x[key]`` (``a`` holds ``x``'s values). An advanced key (lists,
    arrays, booleans) follows numpy exactly: the same values in a new array, or the same
    exception class."""
    if is_fancy(key):
        nkind, nval = outcome(lambda: x[key])
        kind, got = outcome(lambda: a[key])
        if nkind == "err":
            assert kind == "err", f"a[{key!r}] on {x.shape} gave {got!r}, numpy raised {nval!r}"
            assert type(got) is type(nval), f"a[{key!r}]: {type(got).__name__}: {got}; numpy: {nval!r}"
            same(a, x)  # unchanged and usable
            return None
        if kind == "err":
            raise AssertionError(f"a[{key!r}] on {x.shape} raised {type(got).__name__}: {got}") from got
        same(got, np.asarray(nval))
        return got
    want = faults(key, x.shape)
    kind, got = outcome(lambda: a[key])
    if want:
        assert kind == "err", f"a[{key!r}] on {x.shape} gave {got!r}, expected one of {want}"
        assert type(got) in want, f"a[{key!r}] on {x.shape}: {type(got).__name__}: {got}, expected {want}"
        same(a, x)  # unchanged and usable
        return None
    if kind == "err":
        raise AssertionError(f"a[{key!r}] on {x.shape} raised {type(got).__name__}: {got}") from got
    expected = x[key]
    same(got, expected)
    if a.backend.name == "cpu" and got.size:
        assert np.shares_memory(np.asarray(got), np.asarray(a)), "a view must share the array's memory"
    return got


@st.composite
def index_cases(draw):
    source = draw(sources())
    ndim = len(np.empty(source[0], np.uint8)[source[2]][source[4]].shape)
    return source, draw(keys(ndim))


def getitem(case, backend):
    source, key = case
    a, x = build(source, backend)
    check_key(a, x, key)


def test_getitem(clock, backend):
    run(*clock, getitem, index_cases(), load_corpus("index"), backend)


@st.composite
def chains(draw):
    source = draw(sources(gb_views=False))
    shape = np.empty(source[0], np.uint8)[source[2]].shape
    first = draw(valid_keys(shape))
    second = draw(keys(len(np.empty(shape, np.uint8)[first].shape)))
    return source, first, second


def chained(case, backend):
    """A key on a view: offsets, strides and new axes compose."""
    source, first, second = case
    a, x = build(source, backend)
    v = check_key(a, x, first)
    # numpy gives a scalar for a 0-d result, gpubuf a 0-d array: index the 0-d array.
    check_key(v, np.asarray(x[first]), second)


def test_getitem_of_views(clock, backend):
    run(*clock, chained, chains(), load_corpus("chains"), backend)


def slice_len(s, n):
    start, stop, step = s.indices(n)
    if step > 0:
        return max(0, (stop - start + step - 1) // step)
    return max(0, (start - stop - step - 1) // -step)


def view_shape(key, shape):
    """The shape of a valid basic key's view, in Python ints (no numpy: extents may be huge)."""
    items = list(key) if type(key) is tuple else [key]
    consuming = sum(1 for i in items if i is not None and i is not Ellipsis)
    out, axis = [], 0
    for it in items:
        if it is None:
            out.append(1)
        elif it is Ellipsis:
            out.extend(shape[axis : axis + len(shape) - consuming])
            axis += len(shape) - consuming
        elif isinstance(it, slice):
            out.append(slice_len(it, shape[axis]))
            axis += 1
        else:
            axis += 1
    return tuple(out) + tuple(shape[axis:])


@st.composite
def huge_empty(draw):
    ndim = draw(st.integers(1, 4))
    shape = [draw(st.sampled_from([0, 1, 3, 2**31, 2**40, 2**62, 2**63 - 1])) for _ in range(ndim)]
    shape[draw(st.integers(0, ndim - 1))] = 0
    shape = tuple(shape)
    return shape, draw(st.sampled_from(DTYPES)), draw(valid_keys(shape)), draw(st.sampled_from(DTYPES))


def huge(case, backend):
    """Empty arrays with huge extents: every operation gives the right shape or a typed
    error (numpy's ``ValueError`` where numpy cannot make such an array), never a wrap."""
    shape, dtype, key, other = case
    kind, a = outcome(lambda: gpubuf.NDBuffer.zeros(shape, dtype, backend))
    if kind == "err":
        assert isinstance(a, gpubuf.InvalidArgumentError), repr(a)
        return
    assert a.shape == shape and a.size == 0 and a.nbytes == 0
    kind, v = outcome(lambda: a[key])
    if kind == "err":
        assert isinstance(v, gpubuf.InvalidArgumentError), repr(v)
        return
    assert v.shape == view_shape(key, shape)
    for op in (
        lambda: v.copy(),
        lambda: v.reshape(-1),
        lambda: v.view(other),
        lambda: v.to_numpy(),
        lambda: np.asarray(v),
        lambda: np.from_dlpack(v),
        lambda: v.__setitem__(Ellipsis, 1),
        lambda: v.fill(0),
        lambda: v.transpose(),
    ):
        kind, r = outcome(op)
        if kind == "err":
            assert isinstance(r, (gpubuf.GpubufError, ValueError, BufferError)), repr(r)
        elif isinstance(r, (gpubuf.NDBuffer, np.ndarray)):
            assert r.size == 0, r.shape


def test_huge_empty_arrays(clock, backend):
    run(*clock, huge, huge_empty(), load_corpus("huge"), backend)


# Sizes are tiny (at most 8 MiB) or past any machine (at least 2**40 bytes), never between.
BIG = [2**40, 2**62, 2**63 - 1, 2**63, 2**64, 2**100]
SHAPE_ARGS = st.one_of(
    st.integers(-3, 6),
    st.lists(st.integers(-1, 6), max_size=4),
    st.lists(st.integers(-1, 6), max_size=4).map(tuple),
    st.lists(st.sampled_from([0, 1, 2, 2**10, *BIG]), min_size=1, max_size=2).map(tuple),
    st.sampled_from(BIG + [-b for b in BIG] + [1.0, 2.5, "3", None, (2, "x"), ((2,),), (1.0, 2)]),
    st.sampled_from([np.int64(3), np.uint8(2), np.array([2, 3]), np.array(4), [np.int32(2), 1]]),
)


def shape_case(shape, dtype):
    """What ``zeros(shape, dtype)`` must do: ``(shape, errors)``, the shape None when it must
    fail with one of ``errors``, else it may also fail with one of them."""
    dtype_ok = dtype is None or dtype in DTYPES
    if isinstance(shape, (list, tuple)) or (isinstance(shape, np.ndarray) and shape.ndim):
        extents = [None if isinstance(n, (list, tuple)) else _index(n) for n in shape]
    else:
        extents = [_index(shape)]
    if any(n is None or n < 0 or n >= 2**64 for n in extents):
        return None, {gpubuf.InvalidArgumentError} | (set() if dtype_ok else {gpubuf.DTypeMismatchError})
    if not dtype_ok:
        return None, {gpubuf.DTypeMismatchError}
    size = int(np.prod(extents, dtype=object))
    if size == 0:
        return tuple(extents), {gpubuf.InvalidArgumentError}
    if size * np.dtype(dtype or "float64").itemsize <= 2**24:  # the largest shape short of BIG
        return tuple(extents), set()
    return None, {gpubuf.OutOfMemoryError, gpubuf.InvalidArgumentError}


def zeros(case, backend):
    shape, dtype, fill = case
    want, errors = shape_case(shape, dtype)
    make = gpubuf.NDBuffer.zeros if fill else gpubuf.NDBuffer.empty
    kind, a = outcome(lambda: make(shape, dtype, backend))
    if kind == "err" or want is None:
        assert kind == "err", f"{shape!r}, {dtype!r} gave {a!r}, expected one of {errors}"
        assert type(a) in errors, f"{shape!r}, {dtype!r}: {type(a).__name__}: {a}, expected {errors}"
        return
    assert a.shape == want and a.dtype == np.dtype(dtype or "float64")
    if fill and a.size:
        same(a, np.zeros(want, dtype or "float64"))


def test_shape_arguments(clock, backend):
    cases = st.tuples(SHAPE_ARGS, st.sampled_from([None, *DTYPES, *FOREIGN_DTYPES, "nope", 3]), st.booleans())
    run(*clock, zeros, cases, load_corpus("shapes"), backend)


@st.composite
def many_axes(draw):
    ndim = draw(st.integers(30, 64))
    shape = tuple(draw(st.lists(st.sampled_from([1, 1, 1, 2]), min_size=ndim, max_size=ndim)))
    return shape, draw(st.sampled_from(DTYPES)), draw(st.booleans()), draw(st.integers(0, 40))


def axes(case, backend):
    """numpy's 64 axes: views, downloads and uploads of arrays past rust-numpy's 32 give
    numpy's values or ``InvalidArgumentError``, never a panic."""
    shape, dtype, flip, extra = case
    extra = min(extra, 63 - len(shape))  # numpy's 64 axes
    x = data(shape, dtype)
    x = x[(slice(None, None, -1),) * len(shape)] if flip else x
    for op in (
        lambda: gpubuf.NDBuffer.from_numpy(x, backend),
        lambda: gpubuf.NDBuffer.from_numpy(x, backend, copy=True)[(None,) * extra],
    ):
        kind, a = outcome(op)
        if kind == "err":
            assert isinstance(a, gpubuf.InvalidArgumentError), repr(a)
            continue
        for get in (lambda: a.to_numpy(), lambda: a.copy(), lambda: a.__setitem__(Ellipsis, x[(None,) * (a.ndim - x.ndim)] if a.ndim >= x.ndim else x)):
            kind, r = outcome(get)
            if kind == "err":
                assert isinstance(r, (gpubuf.InvalidArgumentError, ValueError)), repr(r)
        kind, r = outcome(lambda: a.to_numpy())
        if kind == "ok":
            same(r.reshape(x.shape), x)


def test_many_axes(clock, backend):
    run(*clock, axes, many_axes(), load_corpus("many_axes"), backend)
