"""Backends chosen at run time, and gpubuf's errors as Python exception classes."""

import pytest

import gpubuf


def test_backends_lists_all_three_with_cpu_available():
    rows = {r["name"]: r for r in gpubuf.backends()}
    assert set(rows) == {"cpu", "opencl", "cuda"}
    assert rows["cpu"]["available"] and rows["cpu"]["compiled"] and rows["cpu"]["reason"] is None
    for r in rows.values():
        assert r["available"] == (r["reason"] is None)
        assert isinstance(r["devices"], list)
    assert gpubuf.available_backends()[0] == "cpu"
    assert set(gpubuf.available_backends()) == {n for n, r in rows.items() if r["available"]}


def test_backend_by_name(backend):
    assert backend.name in ("cpu", "opencl", "cuda")
    assert gpubuf.Backend(backend.name.upper()).name == backend.name
    info = backend.info
    assert info["backend"] == backend.name and isinstance(info["name"], str)
    assert backend.same_device(backend)
    backend.synchronize()
    assert backend.name in repr(backend)


def test_unknown_backend_is_invalid_argument():
    with pytest.raises(gpubuf.InvalidArgumentError) as e:
        gpubuf.Backend("metal")
    assert isinstance(e.value, ValueError) and isinstance(e.value, gpubuf.GpubufError)


def test_unavailable_backend_raises_backend_unavailable():
    rows = {r["name"]: r for r in gpubuf.backends()}
    missing = [n for n, r in rows.items() if not r["available"]]
    if not missing:
        pytest.skip("every backend runs here")
    with pytest.raises(gpubuf.BackendUnavailableError) as e:
        gpubuf.Backend(missing[0])
    assert e.value.backend == missing[0]
    assert e.value.reason == rows[missing[0]]["reason"].split(": ", 1)[1]
    assert isinstance(e.value, RuntimeError)


@pytest.mark.parametrize(
    "name, builtin",
    [
        ("OutOfMemoryError", MemoryError),
        ("ShapeMismatchError", ValueError),
        ("LengthMismatchError", ValueError),
        ("DTypeMismatchError", TypeError),
        ("CapacityError", ValueError),
        ("OutOfBoundsError", IndexError),
        ("InvalidPlanError", ValueError),
        ("InvalidArgumentError", ValueError),
        ("BackendUnavailableError", RuntimeError),
        ("DeviceMismatchError", ValueError),
        ("BuildError", RuntimeError),
        ("DriverError", RuntimeError),
    ],
)
def test_error_classes(name, builtin):
    cls = getattr(gpubuf, name)
    assert issubclass(cls, gpubuf.GpubufError) and issubclass(cls, builtin)
    assert cls.__module__ == "gpubuf" and cls.__doc__
    assert issubclass(gpubuf.GpubufError, Exception)

