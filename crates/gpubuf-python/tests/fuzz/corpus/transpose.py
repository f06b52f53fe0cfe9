"""Corpus of ``test_transpose_ravel_copy``: ``(source, axes)``."""

CASES = [
    # Negative axes (numpy's) were pyo3's OverflowError.
    (((2, 3, 4), "float64", (), True, ()), [0, -1, 1]),
    (((), "uint8", (), False, ()), [-1]),
    (((2, 3), "uint8", (), True, ()), [0, 0]),
    (((2, 3), "uint8", (), True, ()), None),
]
