"""Corpus of ``test_getitem``: ``(source, key)`` cases replayed before the random ones
(a source is ``(shape, dtype, np_key, aligned, gb_key)``, see fuzz_strategies.py)."""

import numpy as np

CASES = [
    # An int past i128 was InvalidArgumentError, not OutOfBoundsError.
    (((0,), "uint8", (), False, ()), (2**200,)),
    (((3,), "float64", (), True, ()), -(2**200)),
    (((3, 4), "int32", (), True, ()), (1, 2**64)),
    # numpy integers, huge slice parts and steps, new axes, one ellipsis.
    (((5,), "float16", (slice(None, None, -2),), True, ()), np.uint64(2)),
    (((4, 3), "int64", (), True, (slice(None, None, -1),)), (slice(2**63, -(2**63), -(2**100)), None, Ellipsis)),
    (((2, 3, 4), "uint32", (slice(1, None, 1), slice(2, None, -1), slice(None, None, 2)), False, ()),
     (None, Ellipsis, np.int8(-1), None)),
    # A zero step (a numpy zero too), two ellipses, too many indices, fancy and float keys.
    (((4,), "float32", (), True, ()), slice(None, None, 0)),
    (((4,), "float32", (), True, ()), slice(None, None, np.int64(0))),
    (((2, 2), "uint8", (), True, ()), (Ellipsis, Ellipsis)),
    (((2,), "uint8", (), True, ()), (0, 0)),
    (((3,), "uint8", (), True, ()), [0, 1]),
    (((3,), "uint8", (), True, ()), True),
    (((3,), "uint8", (), True, ()), 1.0),
    (((3,), "uint8", (), True, ()), np.array([1])),
    (((), "float64", (), True, ()), (None, Ellipsis, None)),
    (((0, 3), "float64", (), True, ()), (slice(2**62, None), 2)),
]
