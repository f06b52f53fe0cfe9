"""Corpus of ``test_overlapping_sources``: ``(source, key, value key, "ndbuffer" or
"numpy")``."""

CASES = [
    (((8,), "float64", (), True, ()), (slice(1, 8),), (slice(0, 7),), "numpy"),
    (((8,), "float64", (), True, ()), (slice(0, 7),), (slice(1, 8),), "ndbuffer"),
    (((4, 5), "int32", (), True, ()), (slice(0, 4), slice(0, 5)), (slice(3, None, -1), slice(0, 5)), "numpy"),
    (((70, 3), "uint8", (), True, ()), (slice(1, 70), slice(0, 3)), (slice(68, None, -1), slice(0, 3)), "ndbuffer"),
]
