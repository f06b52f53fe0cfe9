"""gpubuf under pyopencl objects: backends over pyopencl's context and queue, callable
allocators, a pool whose blocks pyopencl takes anywhere, adoption of pyopencl memory
without copies, and bad input from Python."""

import gc

import numpy as np
import pytest

import gpubuf

cl = pytest.importorskip("pyopencl")
cl_array = pytest.importorskip("pyopencl.array")
cl_tools = pytest.importorskip("pyopencl.tools")
gpyopencl = pytest.importorskip("gpubuf.pyopencl")


def _queue():
    try:
        gpubuf.Backend("opencl")
        return cl.CommandQueue(cl.create_some_context(interactive=False))
    except (gpubuf.BackendUnavailableError, cl.Error) as e:
        pytest.skip(f"no OpenCL device for pyopencl and gpubuf: {e}")


@pytest.fixture
def queue():
    return _queue()


def test_backend_is_pyopencls_context_and_queue(queue):
    b = gpubuf.Backend.from_pyopencl(queue)
    assert b.name == "opencl" and b.info["name"] == queue.device.name
    assert b.same_device(gpubuf.Backend.from_pyopencl(queue)), "one backend per context and queue"
    # gpubuf's memory there is memory of pyopencl's context: pyopencl copies out of it.
    a = gpubuf.NDBuffer.from_numpy(np.arange(8, dtype=np.float32), backend=b)
    out = np.empty(8, np.float32)
    m = gpubuf.ImmediateAllocator(queue)(32)
    cl.enqueue_copy(queue, m, np.arange(8, dtype=np.float32)).wait()
    v = gpyopencl.to_gpubuf(m, queue).view("float32")
    assert v.to_numpy().tolist() == list(range(8))
    assert a.to_numpy().tolist() == list(range(8))
    cl.enqueue_copy(queue, out, m).wait()
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.Backend.from_pyopencl(object())


def test_allocators_are_callable_as_pyopencls(queue):
    for alloc in (gpubuf.ImmediateAllocator(queue), gpubuf.DeferredAllocator(queue.context)):
        mem = alloc(15)
        assert isinstance(mem, cl.Buffer) and mem.size == 15 and mem.context == queue.context
        assert alloc(0) is None
        with pytest.raises(gpubuf.InvalidArgumentError):
            alloc(-1)
    assert gpubuf.ImmediateAllocator(queue, cl.mem_flags.READ_WRITE)(8) is not None
    with pytest.raises(gpubuf.InvalidArgumentError, match="READ_WRITE"):
        gpubuf.ImmediateAllocator(queue, cl.mem_flags.READ_ONLY)
    with pytest.raises(gpubuf.InvalidArgumentError, match="CommandQueue"):
        gpubuf.ImmediateAllocator(queue.context)
    with pytest.raises(gpubuf.InvalidArgumentError, match="Context"):
        gpubuf.DeferredAllocator(queue)
    # A backend-made allocator returns gpubuf arrays.
    b = gpubuf.ImmediateAllocator(gpubuf.Backend("cpu"))(16)
    assert isinstance(b, gpubuf.NDBuffer) and b.shape == (16,) and b.dtype == np.uint8


def test_pool_blocks_are_pyopencl_buffers(queue):
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    b = pool.allocate(1000)
    assert isinstance(b, cl.Buffer) and isinstance(b, gpyopencl.PooledBuffer)
    assert b.size == 1024  # the size class's block (pyopencl: 1023), rounded to 256 bytes
    assert pool.active_blocks == 1
    # A kernel and copies through pyopencl.
    prg = cl.Program(queue.context, "__kernel void twice(__global float *x) { x[get_global_id(0)] *= 2; }").build()
    cl.enqueue_copy(queue, b, np.arange(250, dtype=np.float32))
    prg.twice(queue, (250,), None, b)
    out = np.empty(250, np.float32)
    cl.enqueue_copy(queue, out, b).wait()
    assert out.tolist() == [2.0 * i for i in range(250)]
    b.bind_to_queue(queue)
    b.unbind_from_queue()
    native = gpubuf.MemoryPool(gpubuf.Backend.from_pyopencl(queue)).allocate(16)
    native.bind_to_queue(queue)
    native.unbind_from_queue()
    b.release()
    assert pool.active_blocks == 0 and pool.held_blocks == 1
    with pytest.raises(cl.LogicError):
        b.release()  # pyopencl's own error for a second release
    c = pool.allocate(1000)  # the held block again, a pyopencl buffer over the same cl_mem
    assert pool.held_blocks == 0
    del c
    gc.collect()
    assert pool.active_blocks == 0 and pool.held_blocks == 1
    # Every block its own cl_mem, of its size class: a held block serves only its class.
    d = pool.allocate(5000)
    assert pool.held_blocks == 1 and d.size == ((pool.alloc_size(pool.bin_number(5000)) + 255) // 256) * 256
    d.release()


def test_bins_and_blocks_match_pyopencls(queue):
    ours = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    theirs = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(queue))
    for size in [1, 15, 255, 256, 1000, 4096, (1 << 20) + 1, 3_000_000, 123_456_789, 2**31 - 7]:
        assert ours.bin_number(size) == theirs.bin_number(size)
        assert ours.alloc_size(ours.bin_number(size)) == theirs.alloc_size(theirs.bin_number(size))
    for size in [1000, (1 << 20) + 1, 3_000_000]:
        blk = ours.allocate(size)
        want = theirs.alloc_size(theirs.bin_number(size))
        assert want <= blk.size < want + 256, "the block is the size class's, not a 2 MiB multiple"
        blk.release()
    assert ours.managed_bytes < 3_000_000 + 2 * (1 << 20)


def test_pyopencl_arrays_with_gpubufs_pool(queue):
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    a = cl_array.arange(queue, 2000, dtype=np.float32, allocator=pool)
    b = cl_array.to_device(queue, np.arange(2000), allocator=pool) + 4000
    assert a.allocator is pool and b.allocator is pool
    assert ((a * 2).get() == np.arange(2000, dtype=np.float32) * 2).all()
    assert (b.get() == np.arange(2000) + 4000).all()
    z = cl_array.zeros(queue, (5, 6, 7), dtype=np.float32, allocator=gpubuf.DeferredAllocator(queue.context))
    assert z.get().sum() == 0
    del a, b
    gc.collect()
    assert pool.active_blocks == 0


def test_pyopencl_memory_adopted_without_copy(queue):
    host = np.arange(24, dtype=np.float64).reshape(4, 6)
    a = cl_array.to_device(queue, host)
    g = gpyopencl.to_gpubuf(a)
    assert g.shape == (4, 6) and g.dtype == np.float64
    assert (g.to_numpy() == host).all()
    g[1, :] = -1.0  # written through gpubuf, seen by pyopencl: one memory
    queue.finish()
    assert (a.get()[1] == -1).all()
    host[1, :] = -1.0
    rows = gpyopencl.to_gpubuf(a[1:3])  # an offset into the buffer
    assert (rows.to_numpy() == host[1:3]).all()
    t = gpyopencl.to_gpubuf(a.transpose())  # strides
    assert (t.to_numpy() == host.T).all()
    buf = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, 64)
    assert gpyopencl.to_gpubuf(buf, queue).shape == (64,)
    ro = cl.Buffer(queue.context, cl.mem_flags.READ_ONLY, 64)
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpyopencl.to_gpubuf(ro, queue)
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpyopencl.to_gpubuf(object())


def buf_of(pool):
    return pool.allocate(64)


def test_arrays_on_gpubufs_pool_are_shared_not_copied(queue):
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    a = cl_array.arange(queue, 12, dtype=np.float32, allocator=pool).reshape(3, 4)
    g = gpyopencl.to_gpubuf(a[1:])
    assert (g.to_numpy() == np.arange(4, 12, dtype=np.float32).reshape(2, 4)).all()
    g[0, 0] = 100.0  # one memory
    queue.finish()
    assert a.get()[1, 0] == 100.0
    del a
    gc.collect()
    assert pool.active_blocks == 1, "the gpubuf view keeps the block"
    del g
    gc.collect()
    assert pool.active_blocks == 0


def test_an_array_over_the_whole_block_is_adopted(queue):
    # pyopencl bounds an array by the buffer's size, the whole block (a request of 100
    # bytes gets 256): so does to_gpubuf; the buffer itself stays the bytes asked for.
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    buf = pool(100)
    assert buf.size == 256
    a = cl_array.Array(queue, 64, np.float32, data=buf)
    a.fill(1.0)
    queue.finish()
    g = gpyopencl.to_gpubuf(a)
    assert g.shape == (64,) and (g.to_numpy() == 1.0).all()
    assert gpyopencl.to_gpubuf(buf).shape == (100,)
    past = cl_array.Array(queue, 65, np.float32, data=buf)  # 4 bytes past the block
    with pytest.raises(gpubuf.OutOfBoundsError):
        gpyopencl.to_gpubuf(past)
    del a, past, g, buf
    gc.collect()
    assert pool.active_blocks == 0


def test_memory_gpubuf_cannot_keep_alive_is_refused(queue):
    mf = cl.mem_flags
    # USE_HOST_PTR: the storage is pyopencl's hostbuf, kept by the buffer object, not by
    # the handle gpubuf retains; an adopted array read freed memory once both were gone.
    host = np.full(4096, 7, np.uint8)
    hosted = cl.Buffer(queue.context, mf.READ_WRITE | mf.USE_HOST_PTR, hostbuf=host)
    with pytest.raises(gpubuf.InvalidArgumentError, match="USE_HOST_PTR"):
        gpyopencl.to_gpubuf(hosted)
    with pytest.raises(gpubuf.InvalidArgumentError, match="USE_HOST_PTR"):
        gpyopencl.to_gpubuf(cl_array.Array(queue, 1024, np.float32, data=hosted))
    # A sub-buffer of a pool's block: it outlived the block, which went to the next user.
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    block = pool.allocate(1024)
    sub = cl.Buffer.get_sub_region(block, 0, 256)
    with pytest.raises(gpubuf.InvalidArgumentError, match="sub-buffer"):
        gpyopencl.to_gpubuf(sub)
    del sub
    block.release()
    # A sub-buffer of a buffer of the user's own is taken, as before.
    own = cl.Buffer(queue.context, mf.READ_WRITE, 1024)
    part = own.get_sub_region(256, 256)
    assert gpyopencl.to_gpubuf(part).shape == (256,)
    assert pool.active_blocks == 0


def test_the_plugin_swaps_every_session_of_a_process(tmp_path):
    import subprocess
    import sys

    (tmp_path / "test_swap.py").write_text(
        "import gpubuf\nfrom pyopencl.tools import MemoryPool\n"
        "def test_gpubufs():\n    assert MemoryPool is gpubuf.MemoryPool\n"
    )
    code = (
        "import sys, pytest\n"
        "args = ['-q', '-p', 'gpubuf.pyopencl_plugin', '-p', 'no:cacheprovider', sys.argv[1]]\n"
        "codes = [int(pytest.main(args)) for _ in range(2)]\n"
        "import pyopencl.tools, gpubuf\n"
        "assert pyopencl.tools.MemoryPool is not gpubuf.MemoryPool, 'left installed'\n"
        "sys.exit(max(codes))\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "test_swap.py")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_pool_memory_given_to_gpubuf_waits_for_the_arrays_work(queue):
    """A pool whose queue is not the array's (a DeferredAllocator over the context gets a
    queue of gpubuf's): the array's pending kernel runs before gpubuf reads the memory."""
    import threading

    pool = gpubuf.MemoryPool(gpubuf.DeferredAllocator(queue.context))
    a = cl_array.zeros(queue, 256, np.float32, allocator=pool)
    queue.finish()
    gate = cl.UserEvent(queue.context)  # holds the kernel back until set
    prg = cl.Program(queue.context, "__kernel void set(__global float *a) { a[get_global_id(0)] = 42.0f; }")
    a.add_event(prg.build().set(queue, a.shape, None, a.data, wait_for=[gate]))
    threading.Timer(0.2, gate.set_status, args=(cl.command_execution_status.COMPLETE,)).start()
    g = gpyopencl.to_gpubuf(a)
    assert (g.to_numpy() == 42.0).all()


def test_pool_memory_refuses_a_queue_of_another_context(queue):
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    a = cl_array.zeros(queue, 10, np.float32, allocator=pool)
    other = cl.CommandQueue(cl.Context([queue.device]))
    for obj in (a, a.base_data):
        with pytest.raises(gpubuf.DeviceMismatchError):
            gpyopencl.to_gpubuf(obj, queue=other)
        with pytest.raises(gpubuf.InvalidArgumentError):
            gpyopencl.to_gpubuf(obj, queue=42)
    assert gpyopencl.to_gpubuf(a, queue=queue).shape == (10,)
    assert gpyopencl.to_gpubuf(a.base_data, queue=queue.context).shape == (40,)


def test_bad_input_leaves_the_pool_usable(queue):
    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    for bad in (-1, "8", 2.5, 2**70):
        with pytest.raises(gpubuf.InvalidArgumentError):
            pool.allocate(bad)
    other = cl.CommandQueue(cl.Context([queue.device]))
    foreign = cl.Buffer(other.context, cl.mem_flags.READ_WRITE, 64)
    with pytest.raises(gpubuf.DeviceMismatchError):
        gpyopencl.to_gpubuf(foreign, queue)  # memory of another context
    b = pool.allocate(64)
    b.release()
    with pytest.raises(cl.LogicError):
        b.release()  # freed twice: pyopencl's error
    held = pool.allocate(64)
    held.release()
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpyopencl.to_gpubuf(held)  # released
    with pytest.raises(gpubuf.OutOfBoundsError):
        gpubuf._gpubuf._strided_view(gpyopencl.to_gpubuf(buf_of(pool)), [257], [1], "uint8", 0)  # past the block (256 bytes)
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf._gpubuf._strided_view(gpyopencl.to_gpubuf(buf_of(pool)), [4], [3], "float32", 0)  # not whole elements
    released = cl.CommandQueue(queue.context)
    released.finish()
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.MemoryPool(cl_tools.ImmediateAllocator(queue))  # pyopencl's own allocator
    c = pool.allocate(64)
    cl.enqueue_copy(queue, c, np.ones(16, np.float32)).wait()
    c.release()
    assert pool.active_blocks == 0


def test_install_swaps_pyopencl_tools_names(queue):
    before = cl_tools.MemoryPool
    with gpyopencl.installed():
        assert cl_tools.MemoryPool is gpubuf.MemoryPool
        assert cl_tools.ImmediateAllocator is gpubuf.ImmediateAllocator
        pool = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(queue))
        assert isinstance(pool.allocate(10), cl.Buffer)
    assert cl_tools.MemoryPool is before and not gpyopencl.is_installed()


def test_handles_are_read_from_pyopencls_own_objects(queue):
    class Evil(cl.Context):
        int_ptr = 12345  # a subclass cannot make gpubuf use another number

    evil = Evil([queue.device])
    b = gpubuf.Backend.from_pyopencl(evil)
    assert b.name == "opencl"
    fake = type("Context", (), {"int_ptr": 12345, "__module__": "pyopencl"})()
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf.Backend.from_pyopencl(fake)

    class EvilBuffer(cl.Buffer):
        int_ptr = 12345

    buf = EvilBuffer(queue.context, cl.mem_flags.READ_WRITE, 32)
    assert gpyopencl.to_gpubuf(buf, queue).shape == (32,)
    with pytest.raises(gpubuf.InvalidArgumentError):
        gpubuf._gpubuf._adopt_pyopencl(queue, fake, [4], [1], "uint8", 0)


def test_the_documented_example_runs(queue):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / "python.md").read_text()
    section = text.split("### pyopencl code on gpubuf's pool: `gpubuf.pyopencl`", 1)[1].split("\n#", 1)[0]
    blocks = [b.split("```", 1)[0] for b in section.split("```python\n")[1:]]
    assert blocks
    for code in blocks:
        scope = {}
        exec(compile(code, "docs/python.md", "exec"), scope)
        assert scope["g"].to_numpy().tolist() == list(range(2000))


def _mixed_managed_over_peak(pool, ops=4000):
    """``gpubuf bench pool``'s mixed workload (64 live blocks, sizes log-uniform in
    1 KiB..8 MiB, one replaced at random per step): managed bytes over the peak of live
    bytes."""
    import random

    rng = random.Random(7)
    size = lambda: int(1024 * 8192 ** rng.random())  # noqa: E731
    live = [None] * 64
    sizes = [0] * 64
    peak = 0
    for i in range(64):
        sizes[i] = size()
        live[i] = pool.allocate(sizes[i])
    peak = sum(sizes)
    for _ in range(ops):
        i = rng.randrange(64)
        live[i] = None
        sizes[i] = size()
        live[i] = pool.allocate(sizes[i])
        peak = max(peak, sum(sizes))
    return pool.managed_bytes / peak


def test_managed_memory_stays_near_the_live_peak(queue):
    for pool in (gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue)), gpubuf.MemoryPool(gpubuf.Backend.from_pyopencl(queue))):
        ratio = _mixed_managed_over_peak(pool)
        assert 1.0 <= ratio <= 1.3, ratio


def test_threads_share_a_pyopencl_pool(queue):
    """Four threads allocating, using and dropping pyopencl buffers of one gpubuf pool, and
    adopting some: no block is lost or handed out twice, and everything returns."""
    import threading

    pool = gpubuf.MemoryPool(gpubuf.ImmediateAllocator(queue))
    errors = []

    def work(seed):
        try:
            for i in range(300):
                a = cl_array.empty(queue, 256 + (seed * 37 + i) % 512, np.float32, allocator=pool)
                a.fill(float(seed))
                if i % 50 == 0:
                    g = gpyopencl.to_gpubuf(a)
                    queue.finish()
                    assert (g.to_numpy() == seed).all()
                    del g
                assert (a.get() == seed).all()
                del a
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gc.collect()
    assert not errors, errors
    assert pool.active_blocks == 0
