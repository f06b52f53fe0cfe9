"""Corpus of ``test_hostile_cuda_array_interface``: interface dicts (or other objects)."""

P = 0x7F00_0000_0000

CASES = [
    {"version": 3, "shape": (2, 3), "typestr": "<f4", "data": (P, False), "strides": None, "stream": 1},
    {"version": 3, "shape": (2, 3), "typestr": "<f4", "data": (P, True), "strides": None},
    {"version": 4, "shape": (2,), "typestr": "<f4", "data": (P, False)},
    {"version": 3, "shape": (2, -1), "typestr": "<f4", "data": (P, False)},
    {"version": 3, "shape": (2,), "typestr": "<f8", "data": (P, False), "strides": (3,)},
    {"version": 3, "shape": (2, 2), "typestr": "<f8", "data": (8, False), "strides": (-16, 8)},
    {"version": 3, "shape": (2,), "typestr": "<f8", "data": (2**64 - 8, False), "strides": (8,)},
    {"version": 3, "shape": (2,), "typestr": "<f8", "data": (P, False), "stream": 0},
    {"version": 3, "shape": (2,), "typestr": "<f8", "data": (P, False), "mask": 1},
    {"version": 3, "shape": (2,), "typestr": "<c16", "data": (P, False)},
    {"version": 3, "shape": (0, 2**63), "typestr": "<f8", "data": (0, False)},
    {"shape": (2,), "typestr": "<f8", "data": (P, False)},
    [("version", 3)],
    "raising",
]
