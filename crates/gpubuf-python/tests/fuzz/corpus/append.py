"""Corpus of ``test_bufferizer_appends``: ``((shape, dtype, np_key, aligned), odd strides,
"one" | "multiple" | "list")``."""

CASES = [
    # Strides that are not whole elements were appended from the wrong bytes.
    (((1, 2), "float64", (), True), True, "one"),
    (((3, 4), "float32", (slice(None, None, -1), slice(1, None, 2)), False), True, "multiple"),
    (((2, 3), "uint8", (), False), False, "list"),
    (((), "int64", (), False), True, "one"),
]
