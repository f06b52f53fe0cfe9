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
# A view starting inside an element of the new dtype: numpy takes it, gpubuf refuses it.
CASES += [(((65,), "uint8", (), False, (slice(1, None),)), "int32")]
