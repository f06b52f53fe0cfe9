"""Corpus of ``test_many_axes``: ``(shape, dtype, flipped, new axes)``."""

CASES = [
    # Past rust-numpy's 32 axes from_numpy and to_numpy panicked (PanicException).
    ((1,) * 32 + (2,), "float64", True, 0),
    ((2,) + (1,) * 40, "uint8", False, 10),
    ((1,) * 64, "int32", True, 0),
]
