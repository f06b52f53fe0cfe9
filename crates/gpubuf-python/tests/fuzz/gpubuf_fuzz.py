"""The fuzz harness: a property replays its corpus, then runs hypothesis in rounds until its
share of the time budget is spent.

A property is ``body(case, *args)``: ``case`` a plain value drawn from a strategy (or taken
from the corpus), ``args`` the test's fixtures. Each round is one hypothesis run of
``ROUND`` examples with its own seed, ``GPUBUF_FUZZ_SEED + round`` mixed with the test's
name, so a failure found in round k is reproduced first thing by
``GPUBUF_FUZZ_SEED=<seed + k>``; the falsifying case hypothesis prints can be pasted into
the corpus (``corpus/<name>.py``, ``CASES``) to run first from then on.
"""

import importlib.util
import os
import pathlib
import time
import zlib

import numpy as np
from hypothesis import HealthCheck, Phase, given, seed, settings

import gpubuf

#: Examples per hypothesis run; the budget is checked between runs.
ROUND = 25

#: The element types gpubuf has, and some it has not (each of those must be a
#: ``DTypeMismatchError``).
DTYPES = [
    "uint8", "int32", "uint32", "int64", "int8", "int16", "uint16", "uint64", "float16", "float32", "float64", "bool",
    "complex64", "complex128",
]
FOREIGN_DTYPES = ["clongdouble", ">c16", "longdouble", ">f8", ">i4", "S3", "V2", "O"]

SETTINGS = settings(
    max_examples=ROUND,
    deadline=None,
    database=None,
    derandomize=False,
    phases=[Phase.generate, Phase.shrink],
    print_blob=True,
    suppress_health_check=list(HealthCheck),
)

CORPUS_DIR = pathlib.Path(__file__).with_name("corpus")


class Clock:
    """The budget shared by the fuzz tests of one pytest run (made by conftest.py)."""

    def __init__(self, budget, base_seed):
        self.budget, self.base_seed = budget, base_seed
        self.start = self.end = None
        self.remaining_tests = 0
        self.properties = self.examples = self.corpus = 0

    def begin(self):
        """Starts the clock at the first fuzz test."""
        if self.start is None:
            self.start = time.monotonic()

    def share(self):
        """This test's seconds: what is left, over the fuzz tests left."""
        left = self.budget - (time.monotonic() - self.start)
        return max(left, 0.0) / max(self.remaining_tests, 1)

    def elapsed(self):
        return 0.0 if self.start is None else (self.end or self.start) - self.start


def load_corpus(name):
    """The ``CASES`` of ``corpus/<name>.py``."""
    path = CORPUS_DIR / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"gpubuf_fuzz_corpus_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.CASES)


def run(clock, test_id, body, strategy, corpus, *args):
    """Replays ``corpus`` through ``body``, then fuzzes it with ``strategy`` for a share."""
    clock.begin()
    for i, case in enumerate(corpus):
        try:
            body(case, *args)
        except BaseException as e:
            e.add_note(f"fuzz corpus case {i}: {case!r}")
            raise
        clock.corpus += 1
    share = clock.share()
    start = time.monotonic()
    calls = [0]
    k = 0
    while True:
        round_seed = clock.base_seed + k

        def prop(case):
            calls[0] += 1
            body(case, *args)

        wrapped = SETTINGS(seed(zlib.crc32(test_id.encode()) ^ round_seed)(given(strategy)(prop)))
        try:
            wrapped()
        except BaseException as e:
            e.add_note(f"fuzz: reproduce first with GPUBUF_FUZZ_SEED={round_seed} (round {k} of {test_id})")
            raise
        k += 1
        if time.monotonic() - start >= share:
            break
    clock.properties += 1
    clock.examples += calls[0]
    clock.end = time.monotonic()


def host(x):
    """``x`` (an ``NDBuffer``, numpy array or scalar) as a numpy array, copied."""
    if isinstance(x, gpubuf.NDBuffer):
        x = x.to_numpy()
    return np.array(x, copy=True)


def same(actual, expected):
    """Equal shape, dtype and bytes (so NaNs and signed zeros compare exactly)."""
    a, e = host(actual), host(expected)
    assert a.shape == e.shape, f"shape {a.shape} != {e.shape}"
    assert a.dtype == e.dtype, f"dtype {a.dtype} != {e.dtype}"
    assert a.tobytes() == e.tobytes(), f"values differ:\n{a!r}\n{e!r}"


def data(shape, dtype, salt=0):
    """Deterministic random bytes of ``shape`` and ``dtype``, NaNs and infinities included
    (bools: 0 and 1)."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=object)) * dt.itemsize
    rng = np.random.default_rng(zlib.crc32(repr((shape, dt.str, salt)).encode()))
    raw = rng.integers(0, 256, n, dtype=np.uint8)
    if dt == np.bool_:
        raw &= 1  # numpy's bools are the bytes 0 and 1 (its scalars normalise any other)
    return raw.view(dt).reshape(shape)


def outcome(f):
    """``("ok", value)`` or ``("err", exception)``."""
    try:
        return "ok", f()
    except Exception as e:  # noqa: BLE001 - the outcome is what is compared
        return "err", e


def expect_error(f, classes, what=""):
    """Runs ``f``, which must raise one of ``classes`` (a class or a tuple)."""
    kind, v = outcome(f)
    assert kind == "err", f"{what}: expected {classes}, got a result {v!r}"
    assert isinstance(v, classes), f"{what}: expected {classes}, got {type(v).__name__}: {v}"
    return v


def env_seconds(default):
    v = os.environ.get("GPUBUF_FUZZ_SECONDS", "").strip()
    return float(v) if v else float(default)
