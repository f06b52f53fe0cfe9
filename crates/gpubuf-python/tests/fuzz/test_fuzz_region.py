"""Fuzz: region writes ``a[key] = value``, ``a.set_region(key, value, pool)`` and
``a.fill(value)`` against numpy's ``x[key] = value``.

Values: Python and numpy scalars (huge ints, NaN, infinities, strings, None), numpy arrays
that broadcast to the region or do not, in any dtype, strided, flipped and unaligned,
nested lists, and ``NDBuffer``s (same or other dtype, shape and device). Where numpy's
assignment succeeds gpubuf's must give the same bytes; where numpy's fails gpubuf's must
fail too (a broadcast error as ``ShapeMismatchError``, numpy's conversion errors as
numpy raises them), and an ``NDBuffer`` of another dtype, shape or device is
``DTypeMismatchError``, ``ShapeMismatchError`` or ``DeviceMismatchError``. A write that
fails writes nothing.
"""

import warnings

import numpy as np
import pytest
from hypothesis import strategies as st

import gpubuf
from fuzz_strategies import build, layouts, numpy_source, sources, valid_keys
from gpubuf_fuzz import DTYPES, data, load_corpus, outcome, run, same

pytestmark = pytest.mark.fuzz

SCALARS = [0, 1, -1, 7, 255, 256, -129, 2**31, 2**32 - 1, 2**53 + 1, 2**63, 2**64, -(2**63) - 1, 0.5, -2.75,
           1e20, -1e300, float("nan"), float("inf"), -0.0, True, None, "5", "x", 1 + 2j, np.float64(1e20),
           np.float32("nan"), np.int64(-5), np.uint64(2**64 - 1), np.float16(3.5), np.int8(-3), np.bool_(True)]


@st.composite
def value_shapes(draw, region):
    """Shapes that broadcast to ``region`` (extents set to 1, leading axes dropped or added
    as 1) and some that do not."""
    kind = draw(st.sampled_from(["same", "ones", "drop", "lead", "random"]))
    shape = list(region)
    if kind == "ones":
        shape = [1 if draw(st.booleans()) else n for n in shape]
    elif kind == "drop":
        shape = shape[draw(st.integers(0, len(shape))) :]
    elif kind == "lead":
        shape = [1] * draw(st.integers(1, 2)) + shape
    elif kind == "random":
        shape = draw(st.lists(st.integers(0, 4), max_size=4))
    return tuple(shape)


@st.composite
def region_cases(draw):
    source = draw(sources())
    shape = np.empty(source[0], np.uint8)[source[2]][source[4]].shape
    if len(shape) >= 2 and shape[-1] >= 64 and draw(st.integers(0, 3)):
        # Strided outer axes over long rows: the row gather of region_plan.rs.
        outer = tuple(slice(None, None, draw(st.sampled_from([2, -1, -2, 3]))) for _ in shape[:-1])
        key = outer + (slice(draw(st.integers(0, 2)), None),)
    else:
        key = draw(valid_keys(shape))
    region = np.empty(shape, np.uint8)[key].shape
    kind = draw(st.sampled_from(["scalar", "array", "array", "list", "ndbuffer"]))
    if kind == "scalar":
        value = draw(st.sampled_from(SCALARS))
    else:
        vshape = draw(value_shapes(region))
        dtype = draw(st.sampled_from([source[1]] * 3 + DTYPES + ["bool", "complex64", "complex128", ">f8"]))
        if kind == "ndbuffer":
            dtype = dtype if dtype in DTYPES else source[1]
        np_key = draw(layouts(vshape)) if draw(st.booleans()) else ()
        value = (vshape, dtype, np_key, draw(st.integers(0, 3)) > 0)
    how = draw(st.sampled_from(["setitem", "set_region", "pool", "other_pool", "other_device", "fill"]))
    return source, key, kind, value, how


def numpy_value(kind, value, target):
    """The value a case describes, for an array of dtype ``target``."""
    if kind == "scalar":
        return value
    shape, dtype, np_key, aligned = value
    v = numpy_source(shape, dtype, (), aligned)
    if np_key:
        big = data(tuple(2 * n + 1 for n in shape), dtype, salt=1)
        v = big[tuple(slice(None, None, 2) for _ in shape)]
        v = v[np_key] if v[np_key].shape == shape else v
    if isinstance(v, np.ndarray) and v.dtype.kind == "f" and np.dtype(target).kind in "iu":
        # numpy leaves a float cast to an integer out of range undefined (its paths give
        # different bits): such elements become 0.
        info = np.iinfo(target)
        with np.errstate(all="ignore"):
            v[...] = np.where(np.isfinite(v) & (v >= info.min) & (v <= info.max), v, 0)
    return v.tolist() if kind == "list" else v


def region_write(case, backend):
    source, key, kind, value, how = case
    a, x = build(source, backend)
    if how == "fill":
        key = Ellipsis
    v = numpy_value(kind, value, x.dtype)
    expected = x.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want, err = outcome(lambda: expected.__setitem__(key, v))
    region_shape = x[key].shape
    errors, lenient = set(), False
    if kind == "ndbuffer":
        other = gpubuf.Backend("cpu") if how == "other_device" else backend
        v = gpubuf.NDBuffer.from_numpy(v, other)
        if v.dtype != a.dtype:
            errors.add(gpubuf.DTypeMismatchError)
        if v.shape != region_shape:
            errors.add(gpubuf.ShapeMismatchError)
        if how == "other_device":
            errors.add(gpubuf.DeviceMismatchError)
    elif want == "err":
        # A broadcast error as ShapeMismatchError; numpy's conversion errors as numpy
        # raises them (which one may differ: gpubuf converts before it broadcasts).
        errors.add(gpubuf.ShapeMismatchError if "broadcast" in str(err) else type(err))
        if np.ndim(v) > len(region_shape) or not isinstance(err, ValueError) or "broadcast" not in str(err):
            errors |= {gpubuf.ShapeMismatchError, OverflowError, TypeError, ValueError}
    elif kind in ("array", "list") and np.ndim(v) > len(region_shape):
        # numpy drops leading axes of one element from a value; gpubuf broadcasts as
        # numpy.broadcast_to does, which does not (docs/python.md).
        lenient = True
    if how == "other_pool":
        errors.add(gpubuf.DeviceMismatchError)
    writes = {
        "setitem": lambda: a.__setitem__(key, v),
        "set_region": lambda: a.set_region(key, v),
        "pool": lambda: a.set_region(key, v, gpubuf.MemoryPool(a.backend)),
        "other_pool": lambda: a.set_region(key, v, gpubuf.MemoryPool(gpubuf.Backend("cpu"))),
        "other_device": lambda: a.set_region(key, v),
        "fill": lambda: a.fill(v),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kind_out, got = outcome(writes[how])
    if lenient and kind_out == "err":
        errors = errors | {gpubuf.ShapeMismatchError}  # a value with leading axes of one
    if errors:
        assert kind_out == "err", f"the write succeeded, expected one of {errors}"
        assert type(got) in errors or isinstance(got, tuple(errors)), f"{type(got).__name__}: {got}, expected {errors}"
        same(a, x)  # nothing written
        return
    if kind_out == "err":
        raise AssertionError(f"{type(got).__name__}: {got} where numpy wrote") from got
    same(a, expected)


def test_region_writes(clock, backend):
    run(*clock, region_write, region_cases(), load_corpus("region"), backend)


@st.composite
def overlap_cases(draw):
    source = draw(sources(gb_views=False))
    shape = np.empty(source[0], np.uint8)[source[2]].shape
    key, key2 = [], []
    for n in shape:
        m = draw(st.integers(0, n))
        s1, s2 = draw(st.integers(0, n - m)), draw(st.integers(0, n - m))
        key.append(slice(s1, s1 + m))
        if m and draw(st.booleans()):
            key2.append(slice(s2 + m - 1, s2 - 1 if s2 else None, -1))
        else:
            key2.append(slice(s2, s2 + m))
    return source, tuple(key), tuple(key2), draw(st.sampled_from(["ndbuffer", "numpy"]))


def overlapping(case, backend):
    """A value over the memory written (a gpubuf view of the same array, or on the CPU a
    numpy view of it) is written as numpy writes ``x[key] = x[key2]``: as if copied first."""
    source, key, key2, how = case
    a, x = build(source, backend)
    expected = x.copy()
    expected[key] = expected[key2]
    if how == "numpy" and backend.name == "cpu":
        a[key] = np.asarray(a)[key2]
    else:
        a[key] = a[key2]
    same(a, expected)


def test_overlapping_sources(clock, backend):
    run(*clock, overlapping, overlap_cases(), load_corpus("overlap"), backend)


@st.composite
def append_cases(draw):
    shape, dtype, np_key, aligned, _ = draw(sources(max_ndim=3, gb_views=False))
    return (shape, dtype, np_key, aligned), draw(st.integers(0, 2)) == 0, draw(st.sampled_from(["one", "multiple", "list"]))


def odd_strides(x):
    """``x``'s values in a view whose strides are not whole elements (one byte more each)."""
    item = x.itemsize
    strides, acc = [], item + 1
    for n in reversed(x.shape):
        strides.insert(0, acc)
        acc = acc * max(n, 1) + 1
    raw = bytearray(acc + 16)
    y = np.ndarray(x.shape, dtype=x.dtype, buffer=raw, offset=1, strides=strides)
    y[...] = x
    return y


def append(case, backend):
    """Bufferizer appends read numpy inputs of every layout (strided, flipped, unaligned,
    strides that are not whole elements) as numpy sees them."""
    spec, odd, how = case
    x = numpy_source(*spec)
    x = odd_strides(np.asarray(x)) if odd else np.asarray(x)
    if how == "multiple" and x.ndim == 0:
        how = "one"
    element = x.shape if how != "multiple" else x.shape[1:]
    expected = {"one": x[None], "multiple": x, "list": np.stack([x, x])}[how]
    kind, b = outcome(lambda: gpubuf.Bufferizer(element, max(len(expected), 1), x.dtype, backend))
    if kind == "err":
        assert isinstance(b, gpubuf.GpubufError), repr(b)
        return
    {"one": b.append_one, "multiple": b.append_multiple, "list": b.append}[how](x if how != "list" else [x, x])
    same(b.filled, expected)


def test_bufferizer_appends(clock, backend):
    run(*clock, append, append_cases(), load_corpus("append"), backend)
