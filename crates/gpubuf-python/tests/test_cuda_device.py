"""The CUDA backend on a real device: round trips, DLPack and the CUDA array interface
both ways with CuPy and PyTorch, views and the memory pool. Every test skips where CUDA
cannot run, unless ``GPUBUF_REQUIRE`` names ``cuda``; a consumer library that is not
installed skips its tests only."""

import os

import numpy as np
import pytest

import gpubuf


def _required():
    return {n.strip() for n in os.environ.get("GPUBUF_REQUIRE", "").split(",") if n.strip()}


@pytest.fixture(scope="module")
def cuda():
    try:
        return gpubuf.Backend("cuda")
    except gpubuf.BackendUnavailableError as e:
        if "cuda" in _required():
            pytest.fail(f"cuda is required (GPUBUF_REQUIRE) but unavailable: {e}")
        pytest.skip(f"cuda unavailable: {e.reason}")


def test_round_trip_of_every_dtype(cuda):
    for dtype in ("float32", "float64", "int32", "int64", "uint8", "uint32", "float16", "int8", "int16", "uint16", "uint64",
                  "complex64", "complex128"):
        host = (np.arange(2 * 3 * 5) % 7).astype(dtype).reshape(2, 3, 5)
        dev = gpubuf.NDBuffer.from_numpy(host, backend=cuda)
        assert dev.backend.name == "cuda"
        np.testing.assert_array_equal(dev.to_numpy(), host)
        np.testing.assert_array_equal(dev[1, ::2, 1:4].to_numpy(), host[1, ::2, 1:4])
        np.testing.assert_array_equal(dev.transpose().copy().to_numpy(), host.T)


def test_strided_writes_land(cuda):
    host = np.zeros((6, 8), "float32")
    dev = gpubuf.NDBuffer.from_numpy(host, backend=cuda)
    dev[1:5:2, 2:7] = np.full((2, 5), 3.5, "float32")
    dev[0] = 1.0
    host[1:5:2, 2:7] = 3.5
    host[0] = 1.0
    np.testing.assert_array_equal(dev.to_numpy(), host)


def test_cuda_array_interface_and_dlpack_with_cupy(cuda):
    cp = pytest.importorskip("cupy")
    host = np.arange(24, dtype="float32").reshape(4, 6)
    dev = gpubuf.NDBuffer.from_numpy(host, backend=cuda)
    cuda.synchronize()
    viewed = cp.asarray(dev)  # through __cuda_array_interface__, no copy
    np.testing.assert_array_equal(cp.asnumpy(viewed), host)
    viewed *= 2  # written through CuPy, read back through gpubuf
    cp.cuda.runtime.deviceSynchronize()
    np.testing.assert_array_equal(dev.to_numpy(), host * 2)
    from_cupy = gpubuf.NDBuffer.from_cuda_array_interface(cp.arange(10, dtype=cp.int32), backend=cuda)
    np.testing.assert_array_equal(from_cupy.to_numpy(), np.arange(10, dtype="int32"))
    via_dlpack = cp.from_dlpack(dev)
    np.testing.assert_array_equal(cp.asnumpy(via_dlpack), host * 2)
    back = gpubuf.from_dlpack(cp.ones((3, 3), dtype=cp.float64), backend=cuda)
    np.testing.assert_array_equal(back.to_numpy(), np.ones((3, 3)))


def test_dlpack_with_torch(cuda):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    host = np.arange(12, dtype="float32").reshape(3, 4)
    dev = gpubuf.NDBuffer.from_numpy(host, backend=cuda)
    t = torch.from_dlpack(dev)
    assert t.is_cuda
    np.testing.assert_array_equal(t.cpu().numpy(), host)
    t.add_(1)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(dev.to_numpy(), host + 1)
    back = gpubuf.from_dlpack(torch.arange(6, device="cuda", dtype=torch.int64), backend=cuda)
    np.testing.assert_array_equal(back.to_numpy(), np.arange(6))


def test_pool_on_cuda(cuda):
    pool = gpubuf.MemoryPool(gpubuf.DeferredAllocator(cuda))
    a = pool.zeros((1000,), "float32")
    np.testing.assert_array_equal(a.to_numpy(), np.zeros(1000, "float32"))
    before = pool.managed_bytes
    del a
    b = pool.empty((1000,), "float32")  # the block comes back from the pool
    assert pool.managed_bytes == before
    b.fill(2.0)
    np.testing.assert_array_equal(b.to_numpy(), np.full(1000, 2.0, "float32"))


def test_halo_transformer_on_cuda_matches_cpu(cuda):
    cp = pytest.importorskip("cupy")
    from gpubuf import halo

    host = np.arange(7 * 6 * 3, dtype="float64").reshape(7, 6, 3)
    packed = {}
    for xp, data in ((np, host.copy()), (cp, cp.asarray(host))):
        spec = halo.QuantityHaloSpec(
            2, data.strides, data.itemsize, data.shape, (2, 2, 0), (5, 4, 3), ("x", "y", "z"), xp, data.dtype
        )
        ex = halo.HaloExchangeSpec(spec, np.index_exp[2:4, 2:6, 0:3], 1, np.index_exp[0:2, 2:6, 0:3])
        t = halo.HaloDataTransformer.get(xp, [ex], backend=cuda if xp is cp else "cpu")
        t.async_pack([data])
        t.synchronize()
        array = t.get_pack_buffer().array
        packed[xp.__name__] = cp.asnumpy(array) if xp is cp else np.array(array)
        t.async_unpack([data])
        t.synchronize()
    np.testing.assert_array_equal(packed["cupy"], packed["numpy"])


def test_bufferizer_on_a_foreign_stream(cuda):
    """dolphin's ``Bufferizer(shape, buffer_size, dtype, stream)`` on a stream another
    library made (here the driver's own ``cuStreamCreate``, as CuPy and pycuda make theirs)."""
    import ctypes
    import gc

    lib = ctypes.CDLL("libcuda.so.1")
    cuda.synchronize()  # the backend's context is current on this thread
    handle = ctypes.c_void_p()
    assert lib.cuStreamCreate(ctypes.byref(handle), 1) == 0
    try:
        calls = []
        b = gpubuf.Bufferizer((2, 3), 4, "float32", handle.value, None, None, calls.append, None, calls.append)
        assert b.backend.name == "cuda"
        for i in range(4):
            b.append_one(np.full((2, 3), i, "float32"))
        assert calls == [b] * 5  # four append_one_hook calls, then buffer_full_hook
        np.testing.assert_array_equal(b.buffer.to_numpy()[:, 0, 0], [0, 1, 2, 3])
        b.flush()
        # A device array by the CUDA array interface (as numba or pycuda hand one over).
        src = gpubuf.NDBuffer.from_numpy(np.full((2, 3), 7, "float32"), backend=cuda)
        b.append_one(type("CAI", (), {"__cuda_array_interface__": src.__cuda_array_interface__})())
        np.testing.assert_array_equal(b.buffer.to_numpy()[0], np.full((2, 3), 7, "float32"))
    finally:
        # The stream outlives everything made on it: the bufferizer (in a cycle with its
        # hooks through ``calls``) and its memory, whose free is ordered after the stream's
        # work.
        b = calls = None
        gc.collect()
        assert lib.cuStreamDestroy_v2(handle) == 0
