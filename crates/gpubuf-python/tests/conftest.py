"""Shared fixtures: every test taking ``backend`` runs on the CPU and on OpenCL.

A backend that cannot run here is skipped with its reason, unless ``GPUBUF_REQUIRE``
(a comma-separated list, as for the Rust suites) names it: then the test fails.
"""

import os

import pytest

import gpubuf

def _required():
    return {n.strip() for n in os.environ.get("GPUBUF_REQUIRE", "").split(",") if n.strip()}


# CUDA joins the backends where it is required (a machine with a GPU): elsewhere every
# backend test would only add a skip.
BACKENDS = ["cpu", "opencl"] + (["cuda"] if "cuda" in _required() else [])


@pytest.fixture(params=BACKENDS)
def backend(request):
    name = request.param
    try:
        return gpubuf.Backend(name)
    except gpubuf.BackendUnavailableError as e:
        if name in _required():
            pytest.fail(f"{name} is required (GPUBUF_REQUIRE) but unavailable: {e}")
        pytest.skip(f"{name} unavailable: {e.reason}")


@pytest.fixture
def cpu():
    return gpubuf.Backend("cpu")
