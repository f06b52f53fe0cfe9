"""Corpus of ``test_region_writes``: ``(source, key, value kind, value, how)``; an array
value is ``(shape, dtype, np_key, aligned)``."""

import numpy as np

CASES = [
    # An int64 scalar past int32 was wrapped into the array where numpy refuses it.
    (((), "int32", (), False, ()), (), "array", ((), "int64", (), False), "setitem"),
    (((3,), "int32", (), True, ()), (), "scalar", np.float64(1e20), "fill"),
    (((3,), "int32", (), True, ()), (), "scalar", float("nan"), "setitem"),
    (((3,), "uint8", (), True, ()), (slice(None, None, -1),), "scalar", 256, "set_region"),
    # Values with leading axes of one element, and sequences into 0-d regions.
    (((0,), "uint8", (), False, ()), (), "array", ((1, 0), "uint8", (), False), "setitem"),
    (((), "uint8", (), False, ()), (), "list", ((1,), "int32", (), False), "setitem"),
    # Strided, flipped and unaligned values; pools; other devices and dtypes.
    (((4, 5), "float64", (slice(None, None, -1),), True, ()), (slice(None, None, 2),), "array",
     ((2, 5), "float64", (slice(None, None, -1), slice(None, None, 2)), False), "pool"),
    (((4, 5), "float16", (), True, ()), (1,), "ndbuffer", ((5,), "float32", (), True), "set_region"),
    (((4, 5), "float16", (), True, ()), (1,), "ndbuffer", ((5,), "float16", (), True), "other_device"),
    (((4, 5), "float16", (), True, ()), (1,), "array", ((3,), "float16", (), True), "other_pool"),
]
# Rows of 64 and more elements: the row gather of strided regions.
CASES += [
    (((4, 70), "float64", (), True, ()), (slice(None, None, 2),), "array", ((2, 70), "float64", (), True), "setitem"),
    (((3, 2, 130), "uint8", (slice(None, None, -1),), True, ()), (Ellipsis, slice(1, 129)), "array",
     ((3, 2, 128), "uint8", (slice(None, None, -1), slice(None, None, 1), slice(None, None, 2)), False), "pool"),
]
# Floats into integers: numpy's own cast (in range; out of range numpy leaves undefined).
CASES += [
    (((2, 2, 65), "uint32", (), False, ()), (slice(None, None, 2), slice(None, None, -1), slice(0, None)), "array",
     ((1, 2, 65), "float32", (), False), "setitem"),
]
