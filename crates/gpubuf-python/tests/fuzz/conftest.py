"""The fuzz tests' budget and seed.

``GPUBUF_FUZZ_SECONDS`` (default 60) is the time the fuzz tests share: each takes the time
left over the tests left, after replaying its corpus, and runs at least one round.
``GPUBUF_FUZZ_SEED`` fixes the seed; without it the seed is fixed under CI (``CI`` set) and
drawn at random otherwise. Both are printed at the end of the run.
"""

import os
import random

import pytest

from gpubuf_fuzz import Clock, env_seconds

DEFAULT_SECONDS = 60
CI_SEED = 20270


def _seed():
    v = os.environ.get("GPUBUF_FUZZ_SEED", "").strip()
    if v:
        return int(v, 0)
    if os.environ.get("CI"):
        return CI_SEED
    return random.SystemRandom().randrange(2**32)


CLOCK = Clock(env_seconds(DEFAULT_SECONDS), _seed())


def _is_fuzz(item):
    return item.get_closest_marker("fuzz") is not None


def pytest_configure(config):
    config.addinivalue_line("markers", "fuzz: a property that takes a share of GPUBUF_FUZZ_SECONDS")


def pytest_collection_finish(session):
    CLOCK.remaining_tests = sum(1 for item in session.items if _is_fuzz(item))


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    if _is_fuzz(item):
        CLOCK.remaining_tests = max(CLOCK.remaining_tests - 1, 0)


@pytest.fixture
def clock(request):
    """The shared budget, and this test's id (for its rounds' seeds: the file's and the
    test's names, the same wherever pytest is started)."""
    return CLOCK, f"{request.node.path.name}::{request.node.name}"


def pytest_terminal_summary(terminalreporter):
    c = CLOCK
    if c.properties or c.corpus:
        terminalreporter.write_line(
            f"fuzz: {c.properties} properties, {c.corpus} corpus cases and {c.examples} random "
            f"examples in {c.elapsed():.0f} s (budget {c.budget:.0f} s, "
            f"GPUBUF_FUZZ_SECONDS), seed {c.base_seed} (GPUBUF_FUZZ_SEED)"
        )
