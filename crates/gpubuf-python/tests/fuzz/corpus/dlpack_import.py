"""Corpus of ``test_dlpack_import``: ``(shape, dtype, np_key, aligned)``."""

CASES = [
    ((3, 4), "float64", (slice(None, None, -1), slice(1, None, 2)), False),
    ((), "uint32", (), True),
    ((0, 5), "float16", (), True),
]
