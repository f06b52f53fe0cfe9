"""Interpreter exit with gpubuf memory still shared: DLPack deleters run while Python
finalizes its modules, when attaching to the interpreter is no longer possible. They must
neither abort the process nor touch Python then (they leak what they hold instead), so
the process exits with 0 and a file it wrote and did not close keeps its bytes."""

import subprocess
import sys
import textwrap

import pytest


def run_script(tmp_path, body):
    """Runs ``body`` in a fresh interpreter after it opened ``out.txt`` for writing; returns
    the process and the bytes the file holds after it exited."""
    out = tmp_path / "out.txt"
    script = tmp_path / "script.py"
    script.write_text(
        "import numpy as np\nimport gpubuf\n"
        + textwrap.dedent(body)
        + f"\nf = open({str(out)!r}, 'w')\nf.write('written at module level, never closed')\n"
    )
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    return p, out.read_bytes() if out.exists() else b""


CASES = {
    "numpy_view_of_dlpack": "v = np.from_dlpack(gpubuf.NDBuffer.zeros(4))\n",
    "unconsumed_capsule": "c = gpubuf.NDBuffer.zeros(4).__dlpack__()\n",
    "pool_block_shared": "pool = gpubuf.MemoryPool(gpubuf.Backend('cpu'))\nv = np.from_dlpack(pool.zeros(8))\n",
    "adopted_numpy_behind_capsule": "c = gpubuf.NDBuffer.from_numpy(np.arange(8.0)).__dlpack__()\n",
    "view_in_a_cycle": "class Box: pass\nb = Box(); b.me = b; b.v = np.from_dlpack(gpubuf.NDBuffer.zeros(3))\n",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_exit_with_shared_memory_is_clean(tmp_path, name):
    p, written = run_script(tmp_path, CASES[name])
    assert p.returncode == 0, p.stderr
    assert "panicked" not in p.stderr and "fatal runtime error" not in p.stderr, p.stderr
    assert written == b"written at module level, never closed"


def test_deleters_still_release_memory_while_running(tmp_path):
    """The exit path leaks; the running interpreter does not: views and capsules deleted
    before exit return their pool blocks, from any thread."""
    p, written = run_script(
        tmp_path,
        """
        import gc, threading
        pool = gpubuf.MemoryPool(gpubuf.Backend("cpu"))
        v = np.from_dlpack(pool.zeros(8))
        c = pool.zeros(8).__dlpack__()
        assert pool.active_blocks == 2
        holder = [v, c]
        del v, c
        def drop():
            holder.clear()
            gc.collect()
        t = threading.Thread(target=drop)
        t.start(); t.join()
        gc.collect()
        assert pool.active_blocks == 0, pool.active_blocks
        """,
    )
    assert p.returncode == 0, p.stderr
    assert written == b"written at module level, never closed"
