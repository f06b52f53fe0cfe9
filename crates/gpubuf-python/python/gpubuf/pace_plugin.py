"""pytest plugin: ``pytest -p gpubuf.pace_plugin`` runs a test session's pace-util halo
exchanges on gpubuf (``gpubuf.pace.install``) with the backend ``GPUBUF_PACE_BACKEND``
names (default ``cpu``; ``opencl``, ``cuda``), installed at session start and uninstalled
at its end, so pace-util's own tests run on gpubuf unchanged.

Importing the plugin maps ``numpy.lib.index_tricks`` for pace-util 0.9.0 on numpy 2 (see
``gpubuf.pace``), before pytest loads the tests' conftest files.
"""

import os

from . import pace as _pace

_pace._numpy2_compat()

ENV = "GPUBUF_PACE_BACKEND"


def _backend() -> str:
    return os.environ.get(ENV, "cpu")


def pytest_sessionstart(session) -> None:
    _pace.install(_backend())


def pytest_sessionfinish(session, exitstatus) -> None:
    _pace.uninstall()


def pytest_report_header(config) -> str:
    return f"gpubuf.pace_plugin: pace-util halo exchanges on gpubuf ({ENV}={_backend()})"
