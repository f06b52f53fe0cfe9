"""Corpus of ``test_hostile_dlpack``: ``(tensor, producer device kind, device)``; the
tensor's data is ``("buf", offset)`` into the test's buffer or ``("abs", address)``."""


def tensor(**kw):
    t = {"ndim": 1, "shape": [3], "shape_null": False, "strides": None, "dtype": (2, 64, 1), "device": (1, 0),
         "data": ("buf", 0), "byte_offset": 0}
    t.update(kw)
    return t


CASES = [
    # A __dlpack_device__ that is no pair of ints was pyo3's TypeError.
    (tensor(), "other", "x"),
    (tensor(), "other", (1.5, 0)),
    # Refused before the capsule is read: CUDA producers off CUDA.
    (tensor(data=("abs", 0x7000_0000_0000)), "cuda", (1, 0)),
    # Numbers the reader refuses without touching the data.
    (tensor(ndim=-1), "same", (1, 0)),
    (tensor(ndim=2, shape_null=True), "same", (1, 0)),
    (tensor(shape=[-1]), "same", (1, 0)),
    (tensor(ndim=3, shape=[0, 2, 2**62]), "same", (1, 0)),
    (tensor(data=("abs", 2**64 - 8), byte_offset=2**64 - 1), "same", (1, 0)),
    (tensor(dtype=(2, 64, 2)), "same", (1, 0)),
    (tensor(dtype=(6, 8, 1)), "same", (1, 0)),
    # In bounds: numpy's values.
    (tensor(ndim=2, shape=[2, 3], strides=[-3, 1], data=("buf", 64), byte_offset=24), "same", (1, 0)),
]
