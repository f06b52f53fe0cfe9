"""The package around the native module: `gpubuf` re-exports `gpubuf._gpubuf`, and the
classes keep their public names."""

import importlib.resources

import gpubuf
import gpubuf._gpubuf as native


def test_everything_public_is_re_exported():
    public = {n for n in dir(native) if not n.startswith("_")} | {"__version__"}
    assert public == set(gpubuf.__all__)
    for name in gpubuf.__all__:
        assert getattr(gpubuf, name) is getattr(native, name)


def test_names_read_gpubuf():
    for cls in (gpubuf.NDBuffer, gpubuf.MemoryPool, gpubuf.HaloDataTransformer, gpubuf.OutOfMemoryError):
        assert cls.__module__ == "gpubuf"
    assert gpubuf.OutOfMemoryError.__qualname__ == "OutOfMemoryError"
    assert repr(gpubuf.DTypeMismatchError("x")).startswith("DTypeMismatchError(")
    assert issubclass(gpubuf.OutOfMemoryError, (gpubuf.GpubufError, MemoryError))


def test_typed_package():
    files = importlib.resources.files("gpubuf")
    assert files.joinpath("py.typed").is_file()
    assert files.joinpath("_gpubuf.pyi").is_file()
