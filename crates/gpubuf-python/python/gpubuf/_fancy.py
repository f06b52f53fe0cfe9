"""numpy's advanced indexing as flat indices, for ``gpubuf.NDBuffer``'s integer-array and
mask selections (the gather and scatter themselves run on the device)."""

import numpy as np

__all__ = ["flat_indices", "is_fancy"]


def _device_to_host(item):
    """A gpubuf array inside a key (an index array on a device) read to numpy."""
    from . import NDBuffer

    return item.to_numpy() if isinstance(item, NDBuffer) else item


def is_fancy(key):
    """Whether ``key`` uses advanced indexing: a list, an array of integers or booleans
    (numpy's or gpubuf's, not 0-d integer ones), or a boolean scalar."""
    from . import NDBuffer

    items = key if isinstance(key, tuple) else (key,)
    for item in items:
        if isinstance(item, (list, bool, np.bool_, NDBuffer)):
            return True
        if isinstance(item, np.ndarray) and (item.ndim > 0 or item.dtype == np.bool_):
            return True
    return False


def flat_indices(shape, key):
    """The C-order flat indices into an array of ``shape`` that ``array[key]`` selects,
    as an int64 numpy array of the selection's shape: numpy's own indexing rules (any
    order, repeats, masks, advanced indices with slices, ``None`` and ``...``) and errors,
    over zero-strided views of one axis each, so the memory is that of the selection."""
    shape = tuple(int(n) for n in shape)
    key = tuple(_device_to_host(k) for k in key) if isinstance(key, tuple) else _device_to_host(key)
    step, strides = 1, []
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    strides.reverse()
    total = None
    for axis, n in enumerate(shape):
        base = np.arange(n, dtype=np.int64) * strides[axis]
        view_strides = [0] * len(shape)
        view_strides[axis] = base.itemsize
        grid = np.lib.stride_tricks.as_strided(base, shape=shape, strides=view_strides, writeable=False)
        part = grid[key]
        total = part if total is None else total + part
    if total is None:  # a 0-d array
        total = np.zeros((), dtype=np.int64)[key]
    return np.ascontiguousarray(total, dtype=np.int64)
