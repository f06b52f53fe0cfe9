"""Corpus of ``test_getitem_of_views``: ``(source, first key, second key)``."""

CASES = [
    (((4, 5), "float64", (slice(None, None, -1), slice(1, None, 2)), True, ()), (None, slice(None, None, -1)),
     (0, Ellipsis, slice(None, None, -2))),
    (((3,), "int32", (), True, ()), (slice(0, 0),), (slice(2**63, None),)),
    # An advanced key on a 0-d view (numpy's own view of it is a scalar).
    (((), "uint8", (), False, ()), (), [Ellipsis, [0]]),
    (((), "complex128", (), False, ()), (), [[0]]),
]
