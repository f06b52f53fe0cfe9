"""Corpus of ``test_view_dtype``: ``(source, dtype)``."""

CASES = [
    (((3, 4), "uint8", (), True, (slice(1, None),)), "float16"),
    (((3, 4), "uint8", (), True, (Ellipsis, slice(None, None, -1))), "uint8"),
    (((), "float32", (), True, ()), "int32"),
    (((), "float32", (), True, ()), "float64"),
    (((0, 3), "float64", (), True, ()), "uint8"),
    (((2, 3), "float64", (), True, ()), "complex64"),
    (((2, 3), "float64", (), True, ()), ">f8"),
]
