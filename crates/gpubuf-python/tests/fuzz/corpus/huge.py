"""Corpus of ``test_huge_empty_arrays``: ``(shape, dtype, key, other dtype)``."""

CASES = [
    # to_numpy() of this array on OpenCL crashed the process (numpy refused the shape and
    # rust-numpy used the NULL it returned).
    ((2**62, 0), "float64", (), "uint8"),
    ((2**62, 0), "float64", (slice(None, None, -1), None), "float16"),
    ((0, 2**62), "uint8", (), "float64"),
    ((2**40, 0, 3), "int32", (2**40 - 1,), "uint8"),
    ((3, 0, 2**63 - 1), "float32", (), "float32"),
]
