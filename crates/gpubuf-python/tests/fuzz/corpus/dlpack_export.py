"""Corpus of ``test_dlpack_export``: ``(source, stream, dl_device, copy)``."""

CASES = [
    (((3, 4), "float16", (slice(None, None, -1),), True, (slice(None, None, 2),)), None, None, None),
    (((), "int64", (), True, ()), None, (1, 0), False),
    (((2,), "uint8", (), True, ()), 1, None, None),
    (((2,), "uint8", (), True, ()), None, (2, 0), None),
    (((2,), "uint8", (), True, ()), None, None, True),
]
