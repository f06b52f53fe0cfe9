"""Corpus of ``test_hostile_array_interface``: ``__array_interface__`` dicts whose data
``["buf", offset, read-only]`` points into the test's buffer."""

CASES = [
    # Strides that are not whole elements were read with rust-numpy's truncated strides:
    # the wrong elements, silently.
    {"version": 3, "shape": (1, 2), "typestr": "<f8", "data": ["buf", 0, False], "strides": (8, 9)},
    {"version": 3, "shape": (3,), "typestr": "<f4", "data": ["buf", 1, False], "strides": None},
    {"version": 3, "shape": (2, 2), "typestr": "<i8", "data": ["buf", 64, True], "strides": (-16, 8)},
    {"version": 3, "shape": (2,), "typestr": "|b1", "data": ["buf", 0, False], "strides": None},
    {"version": 3, "shape": (-1,), "typestr": "<f8", "data": ["buf", 0, False], "strides": None},
    {"version": 3, "shape": (2,), "typestr": ">f8", "data": ["buf", 0, False], "strides": None},
]
