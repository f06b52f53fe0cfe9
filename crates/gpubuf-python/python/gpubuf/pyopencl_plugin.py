"""pytest plugin: ``pytest -p gpubuf.pyopencl_plugin`` runs a test session with gpubuf's
``MemoryPool``, ``ImmediateAllocator`` and ``DeferredAllocator`` in ``pyopencl.tools``
(``gpubuf.pyopencl.install``), so that pyopencl's own tests, which import them from there,
allocate from gpubuf's pool unchanged.

The swap happens when pytest loads the plugin, before it imports any conftest or test
module (those import the names at their top), and again when each later session in the
same process is configured (``pytest.main`` run twice, an IDE's runner); it is undone at
each session's end.
"""

from . import pyopencl as _gpyopencl

_gpyopencl.install()


def pytest_configure(config) -> None:
    _gpyopencl.install()  # installed already for the first session: nothing to do


def pytest_unconfigure(config) -> None:
    _gpyopencl.uninstall()


def pytest_report_header(config) -> str:
    return "gpubuf.pyopencl_plugin: pyopencl.tools' MemoryPool and allocators are gpubuf's"
