"""What ``NDBuffer.from_cuda_array_interface`` must read from an interface dict: a model in
Python integers (no overflow) of the rules in docs/python.md, independent of the order in
which the code checks them."""

import operator

import numpy as np

import gpubuf

GOOD = {np.dtype(d).str: d for d in ["uint8", "int32", "uint32", "int64", "int8", "int16", "uint16", "uint64", "float16", "float32", "float64", "bool", "complex64", "complex128"]}
I64, U64 = 2**63, 2**64


def _int(v, lo, hi):
    """``v`` as an int in ``lo..hi`` (Python ints, bools and numpy ints), else None."""
    try:
        i = operator.index(v)
    except TypeError:
        return None
    return i if lo <= i < hi else None


def _ints(v, lo, hi):
    if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple, np.ndarray)):
        return None
    out = [_int(i, lo, hi) for i in v]
    return None if any(i is None for i in out) else out


def _get(d, k):
    try:
        return d[k]
    except Exception:  # noqa: BLE001 - a failing lookup is a missing key
        return None


def dtype_of(v):
    try:
        dt = np.dtype(v)
    except Exception:  # noqa: BLE001 - numpy's refusal is gpubuf's DTypeMismatchError
        return None
    for d in GOOD.values():
        if dt == np.dtype(d) and dt.isnative:
            return d
    return None


def c_strides(shape):
    """C-contiguous element strides as gpubuf's layouts make them, or None when the
    extents' product (zeros counted as one) passes ``isize``."""
    strides, acc = [], 1
    for n in reversed(shape):
        strides.insert(0, acc)
        acc *= max(n, 1)
    return strides if acc < I64 else None


def parse(d):
    """``(dtype, shape, base, len, strides, offset, stream)`` or a set of error classes."""
    invalid, mismatch = gpubuf.InvalidArgumentError, gpubuf.DTypeMismatchError
    faults = set()
    version = _get(d, "version")
    if version is None or _int(version, -I64, I64) is None or not 0 <= operator.index(version) <= 3:
        faults.add(invalid)
    raw_shape = _get(d, "shape")
    shape = None if raw_shape is None else _ints(raw_shape, -(2**127), 2**127)
    if shape is None or any(not 0 <= n < U64 for n in shape):
        faults.add(invalid)
        shape = None
    dtype = dtype_of(_get(d, "typestr")) if _get(d, "typestr") is not None else None
    if _get(d, "typestr") is None:
        faults.add(invalid)
    elif dtype is None:
        faults.add(mismatch)
    data = _get(d, "data")
    ptr = None
    if type(data) is not tuple or len(data) != 2 or _int(data[0], 0, U64) is None or not isinstance(data[1], bool):
        faults.add(invalid)
    elif data[1]:
        faults.add(invalid)  # read-only
    else:
        ptr = operator.index(data[0])
    if _get(d, "mask") is not None:
        faults.add(invalid)
    stream = _get(d, "stream")
    if stream is not None:
        stream = _int(stream, 0, U64)
        if not stream:
            faults.add(invalid)
    if mismatch in faults:
        return faults | {invalid}  # the element size is unknown: later checks may fail too
    if shape is None:
        return faults
    item = np.dtype(dtype).itemsize
    raw = _get(d, "strides")
    if raw is None:
        elems = c_strides(shape)
        strides = None if elems is None else [s * item for s in elems]
        if strides is None or any(not -I64 <= s < I64 for s in strides):
            return faults | {invalid}
    else:
        strides = _ints(raw, -I64, I64)
    if strides is None or len(strides) != len(shape):
        faults.add(invalid)
    if faults:
        return faults
    if 0 in shape:
        elems = c_strides(shape)
        if elems is None:
            return {invalid}
        return dtype, shape, ptr, 0, elems, 0, stream
    if any(s % item for s in strides):
        return {invalid}
    low = sum(min(0, s * (n - 1)) for n, s in zip(shape, strides))
    high = sum(max(0, s * (n - 1)) for n, s in zip(shape, strides))
    base, length = ptr + low, high - low + item
    if base < 0 or base + length >= U64:
        return {invalid}
    return dtype, shape, base, length, [s // item for s in strides], -low // item, stream
