"""Values that share memory with the gpubuf array they are written into: a numpy array the
array adopted, a numpy view of gpubuf memory, another gpubuf array over the same bytes.
Each is copied first, as numpy copies an assignment's overlapping value, and the result
is numpy's. Written in place into a contiguous region, such a value would be copied while
Rust held a shared and a mutable slice of the same bytes: the CPU backend refuses that with
InvalidArgumentError, so those cases fail if the copy is missing. Strided regions and
values go through staging memory and are checked for numpy's answer all the same."""

import numpy as np
import pytest

import gpubuf


def numpy_assign(x, key, value_of):
    """numpy's answer for ``y[key] = value_of(y)`` on a copy ``y`` of ``x``."""
    y = x.copy()
    y[key] = value_of(y)
    return y


SHIFTS = [
    (np.s_[1:], lambda v: v[:-1]),  # the destination after the source (forward copy reads written bytes)
    (np.s_[:-1], lambda v: v[1:]),
    (np.s_[0:4], lambda v: v[8:12]),  # the same allocation, bytes apart from the region
    (np.s_[::2], lambda v: v[1::2]),  # a strided region
    (np.s_[::-1], lambda v: v),  # the whole array reversed into itself
    (np.s_[...], lambda v: v[::-1]),  # a flipped value
]


@pytest.mark.parametrize("key,value_of", SHIFTS)
def test_setitem_of_the_adopted_numpy_array(cpu, key, value_of):
    x = np.arange(16.0)
    want = numpy_assign(x, key, value_of)
    a = gpubuf.NDBuffer.from_numpy(x, cpu)
    a[key] = value_of(x)
    np.testing.assert_array_equal(x, want)
    np.testing.assert_array_equal(a.to_numpy(), want)


@pytest.mark.parametrize("key,value_of", SHIFTS)
def test_setitem_of_a_numpy_view_of_the_array(cpu, key, value_of):
    a = gpubuf.NDBuffer.from_numpy(np.arange(16, dtype=np.int32), cpu, copy=True)
    want = numpy_assign(np.arange(16, dtype=np.int32), key, value_of)
    view = np.asarray(a)  # zero-copy on the CPU
    assert np.shares_memory(view, a.to_numpy())
    a[key] = value_of(view)
    np.testing.assert_array_equal(a.to_numpy(), want)


def test_set_region_with_a_pool_and_a_transposed_value(cpu):
    z = np.arange(36.0).reshape(6, 6)
    want = z.copy()
    want[1:5, ::2] = want.T[1:5, :3].copy()
    a = gpubuf.NDBuffer.from_numpy(z, cpu)
    pool = gpubuf.MemoryPool(cpu)
    a.set_region((slice(1, 5), slice(None, None, 2)), z.T[1:5, :3], pool)
    np.testing.assert_array_equal(z, want)
    # The whole array transposed into itself.
    w = np.arange(16.0).reshape(4, 4)
    b = gpubuf.NDBuffer.from_numpy(w, cpu)
    b[...] = w.T
    np.testing.assert_array_equal(w, np.arange(16.0).reshape(4, 4).T)


def test_setitem_of_another_array_over_the_same_bytes(cpu):
    """Two gpubuf arrays adopted from one numpy array are two allocations over the same
    bytes: the value is copied first, where the backend alone refuses the pair."""
    y = np.arange(16.0)
    b = gpubuf.NDBuffer.from_numpy(y, cpu)
    upper = gpubuf.NDBuffer.from_numpy(y[8:], cpu)
    b[4:12] = upper
    np.testing.assert_array_equal(y, numpy_assign(np.arange(16.0), np.s_[4:12], lambda v: v[8:]))
    b[0:8] = upper
    np.testing.assert_array_equal(y[:8], y[8:])


def test_bufferizer_appends_of_views_of_its_own_buffer(cpu):
    b = gpubuf.Bufferizer(4, 6, "float64", cpu)
    rows = np.arange(24.0).reshape(6, 4)
    b.append_multiple(rows[:2])
    view = np.asarray(b.buffer)  # numpy view of the buffer appends write
    model = np.zeros((6, 4))
    model[:2] = rows[:2]
    b.append_multiple(view[0:2])  # a batch copied from the buffer into the buffer
    model[2:4] = model[0:2].copy()
    b.append_one(view[3])  # one element, the row just before its destination
    model[4] = model[3].copy()
    b.append([view[4]])  # a list
    model[5] = model[4].copy()
    np.testing.assert_array_equal(b.buffer.to_numpy(), model)
    assert b.full


def test_bufferizer_append_of_its_own_buffer_as_ndbuffer(backend):
    b = gpubuf.Bufferizer(4, 4, "float32", backend)
    rows = np.arange(16, dtype=np.float32).reshape(4, 4)
    b.append_multiple(rows[:2])
    # A device view overlapping the destination (rows 2-3 get rows 1-2): copied first.
    b.append_multiple(b.buffer[1:3])
    want = np.zeros((4, 4), np.float32)
    want[:2] = rows[:2]
    want[2:4] = want[1:3].copy()
    np.testing.assert_array_equal(b.buffer.to_numpy(), want)


def test_bufferizer_append_of_strided_views_of_its_own_buffer(backend):
    b = gpubuf.Bufferizer(2, 4, "int32", backend)
    b.append_multiple(np.array([[1, 2], [3, 4]], np.int32))
    b.append_one(b.buffer[0, ::-1])  # flipped, elsewhere in the buffer
    b.append_one(b.buffer[0:2, 0])  # a column
    np.testing.assert_array_equal(b.buffer.to_numpy(), [[1, 2], [3, 4], [2, 1], [1, 3]])


def test_bufferizer_append_of_memory_it_adopted_through_numpy(cpu):
    """A gpubuf array adopted from a numpy view of the bufferizer's buffer is another
    allocation over its bytes."""
    b = gpubuf.Bufferizer(2, 4, "int64", cpu)
    b.append_multiple(np.array([[1, 2], [3, 4]], np.int64))
    again = gpubuf.NDBuffer.from_numpy(np.asarray(b.buffer)[0:2], cpu)
    b.append_multiple(again)
    np.testing.assert_array_equal(b.buffer.to_numpy(), [[1, 2], [3, 4], [1, 2], [3, 4]])


def test_halo_receive_of_its_own_unpack_buffer(cpu):
    """``receive`` takes the bytes of its argument before writing: a view of the unpack
    buffer itself is received unchanged."""
    a = np.arange(81.0).reshape(9, 9)
    q = gpubuf.QuantityHaloSpec(2, a.strides, a.itemsize, a.shape, (2, 2), (5, 5), ("x", "y"), np, a.dtype)
    s = gpubuf.HaloExchangeSpec(q, (slice(2, 4), slice(2, 7)), 0, (slice(0, 2), slice(2, 7)))
    t = gpubuf.HaloDataTransformer.get(np, [s], backend=cpu)
    t.receive(np.arange(10.0))
    t.receive(np.asarray(t.get_unpack_buffer())[::-1])
    np.testing.assert_array_equal(t.get_unpack_buffer().to_numpy(), np.arange(10.0)[::-1])
