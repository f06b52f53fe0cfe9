"""Corpus of ``test_reshape``: ``(source, shape)``, ``("star", *extents)`` for
``reshape(*extents)``."""

CASES = [
    # Non-integer shapes were pyo3's TypeError, not InvalidArgumentError.
    (((), "uint8", (), False, ()), 1.0),
    (((), "uint8", (), False, ()), (1.0,)),
    (((), "uint8", (), False, ()), 2**64),
    (((), "uint8", (), False, ()), ("star",)),
    (((2, 3), "int32", (slice(None, None, -1),), True, ()), (-1, 2)),
    (((2, 3), "int32", (), True, ()), (-1, -1)),
    (((2, 3), "int32", (), True, ()), (2**40, 2**40, -2)),
]
# Extents no layout holds, on an empty array.
CASES += [(((0, 0, 0, 0), "uint8", (), False, ()), (0, 2**40, 2**40))]
