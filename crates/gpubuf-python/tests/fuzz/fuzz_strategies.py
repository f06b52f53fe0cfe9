"""Strategies of the fuzz tests, and the numpy arrays and gpubuf arrays they describe.

Cases are plain values (tuples, ints, slices, strings), so a falsifying case prints as a
literal that the corpus files can hold.

A *source* is ``(shape, dtype, np_key, aligned, gb_key)``: random bytes of ``shape`` and
``dtype``, seen through ``np_key`` (a basic index: strided, flipped, offset views), moved
one byte off an 8-byte boundary when ``aligned`` is False, given to
``NDBuffer.from_numpy`` and then seen through ``gb_key`` on the gpubuf side. The numpy
array it stands for is ``base[np_key][gb_key]``.
"""

import numpy as np
from hypothesis import strategies as st

import gpubuf
from gpubuf_fuzz import DTYPES, data

HUGE = [2**31, 2**32, 2**62, 2**63 - 1, 2**63, 2**64, 2**100, 2**200]
HUGE = HUGE + [-h for h in HUGE]
NP_INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.intp]


def ints_near(n):
    """Integers around an axis of ``n``: inside, at both ends, just outside, and huge."""
    return st.one_of(
        st.integers(-n - 2, n + 2),
        st.sampled_from(HUGE),
    )


def as_numpy_int(i):
    """``i`` as a numpy integer scalar of a type that holds it, or ``i`` itself."""
    for t in NP_INTS:
        info = np.iinfo(t)
        if info.min <= i <= info.max:
            return t(i)
    return i


def slice_part(n, zero_ok):
    part = st.one_of(st.none(), ints_near(n), st.sampled_from([True, False]))
    step = st.one_of(st.none(), st.integers(-4, 4), st.sampled_from(HUGE))
    if not zero_ok:
        step = step.filter(lambda s: s is None or s is True or s != 0)
    return part, step


@st.composite
def slices(draw, n, zero_ok=True, numpy_ints=True):
    part, step = slice_part(n, zero_ok)
    a, b, c = draw(part), draw(part), draw(step)
    if numpy_ints and draw(st.integers(0, 5)) == 0:
        a, b, c = (as_numpy_int(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in (a, b, c))
    return slice(a, b, c)


INVALID_ITEMS = [1.0, -0.5, True, False, [0], [True], (), "0", b"0", np.float64(1.0), np.bool_(True),
                 np.array([0]), np.array(1.0), np.array(True), 1j, slice(0.5, None), slice(None, "a"),
                 slice(None, None, 1.5), object()]


@st.composite
def key_items(draw, ndim, valid):
    """One item of a key for an array of ``ndim`` axes."""
    kinds = ["int", "slice", "ellipsis", "none"] + ([] if valid else ["invalid"])
    kind = draw(st.sampled_from(kinds))
    n = 4
    if kind == "int":
        i = draw(st.integers(-n - 1, n + 1) if valid else ints_near(n))
        if draw(st.integers(0, 4)) == 0:
            i = as_numpy_int(i)
        if not valid and draw(st.integers(0, 8)) == 0:
            i = np.array(i) if -(2**63) <= i < 2**63 else i
        return i
    if kind == "slice":
        return draw(slices(n, zero_ok=not valid))
    if kind == "ellipsis":
        return Ellipsis
    if kind == "none":
        return None
    return draw(st.sampled_from(INVALID_ITEMS))


@st.composite
def keys(draw, ndim, valid=False):
    """A key: one item or a tuple of up to ``ndim + 2`` items (a list when not ``valid``)."""
    items = draw(st.lists(key_items(ndim, valid), max_size=ndim + 2))
    if valid:
        items = fit(items, ndim)
        if len(items) == 1 and draw(st.booleans()):
            return items[0]
        return tuple(items)
    form = draw(st.sampled_from(["tuple", "tuple", "bare", "list"]))
    if form == "bare" and len(items) == 1:
        return items[0]
    if form == "list" and items:
        return items
    return tuple(items)


def fit(items, ndim):
    """``items`` cut to a valid basic key: one ellipsis at most, no more axes than ``ndim``."""
    out, seen, used = [], False, 0
    for it in items:
        if it is Ellipsis:
            if seen:
                continue
            seen = True
        elif it is not None:
            if used == ndim:
                continue
            used += 1
        out.append(it)
    return out


@st.composite
def valid_keys(draw, shape):
    """A basic key that selects a view of ``shape`` without error (ints inside their axes)."""
    ndim = len(shape)
    items = fit(draw(st.lists(st.sampled_from([0, Ellipsis, None]), max_size=ndim + 2)), ndim)
    consumed = sum(1 for k in items if k is not None and k is not Ellipsis)
    out, axis = [], 0
    for k in items:
        if k is Ellipsis:
            out.append(Ellipsis)
            axis += ndim - consumed
        elif k is None:
            out.append(None)
        elif draw(st.booleans()) and shape[axis] > 0:
            out.append(draw(st.integers(-shape[axis], shape[axis] - 1)))
            axis += 1
        elif shape[axis] >= 64 and draw(st.booleans()):
            out.append(slice(draw(st.integers(0, 2)), None))  # a long row, kept
            axis += 1
        else:
            out.append(draw(slices(shape[axis], zero_ok=False, numpy_ints=False)))
            axis += 1
    return tuple(out)


dtypes = st.sampled_from(DTYPES)


@st.composite
def layouts(draw, shape):
    """A view of an array of ``shape`` for numpy's side: per axis a start and a step."""
    key = []
    for n in shape:
        step = draw(st.sampled_from([1, 1, -1, 2, -2, 3]))
        start = draw(st.integers(0, n)) if n else 0
        if step > 0:
            key.append(slice(start, None, step))
        else:
            key.append(slice(n - 1 - start, None, step) if n - 1 - start >= 0 else slice(0, 0, step))
    return tuple(key)


@st.composite
def sources(draw, max_ndim=4, gb_views=True):
    shape = tuple(draw(st.lists(st.integers(0, 5), max_size=max_ndim)))
    if shape and len(shape) <= 3 and draw(st.integers(0, 3)) == 0:
        # Rows long enough for the region writes' row gathers (region_plan.MIN_ROW is 64).
        shape = tuple(max(n, 2) for n in shape[:-1]) + (draw(st.sampled_from([63, 64, 65, 70, 130])),)
    dtype = draw(dtypes)
    long_rows = len(shape) >= 2 and shape[-1] >= 63
    np_key = draw(layouts(shape)) if not long_rows and draw(st.booleans()) else ()
    aligned = draw(st.integers(0, 4)) > 0
    viewed = np.empty(shape, dtype=np.uint8)[np_key].shape
    gb_key = draw(valid_keys(viewed)) if gb_views and not long_rows and draw(st.booleans()) else ()
    return shape, dtype, np_key, aligned, gb_key


def numpy_source(shape, dtype, np_key, aligned):
    """The numpy array a source hands to ``from_numpy`` (a view of fresh memory)."""
    base = data(shape, dtype)
    if not aligned:
        raw = np.empty(base.nbytes + 9, dtype=np.uint8)
        start = 9 - raw.ctypes.data % 8
        moved = raw[start : start + base.nbytes].view(base.dtype).reshape(shape)
        moved[...] = base
        base = moved
    return base[np_key]


def build(source, backend):
    """``(a, x)``: the gpubuf array of ``source`` on ``backend`` and the numpy array it equals."""
    shape, dtype, np_key, aligned, gb_key = source
    x = numpy_source(shape, dtype, np_key, aligned)
    a = gpubuf.NDBuffer.from_numpy(x, backend)
    expected = x.copy()
    return a[gb_key], np.asarray(expected[gb_key])

