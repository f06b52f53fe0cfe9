"""Corpus of ``test_shape_arguments``: ``(shape, dtype, zero-filled)``."""

import numpy as np

CASES = [
    ((0, 2**64), None, True),
    ((2**40, 2**40), "uint8", True),
    (2**64, "float64", False),
    (-1, "float64", True),
    ((2, "x"), "float32", True),
    (np.array([2, 3]), "int8", True),
    ((0, 2**62), "float64", True),
]
