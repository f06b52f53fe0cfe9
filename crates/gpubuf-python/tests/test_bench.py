"""`python -m gpubuf.bench`: a smoke run of each benchmark (tiny sizes, one repetition)
checking the report has the JSON shape of `gpubuf bench --json`."""

import json
import os
import subprocess
import sys

import pytest

import gpubuf
from gpubuf import bench

KEYS = {"name", "value", "unit", "baseline", "ratio"}


def check_report(report, name, backend):
    assert set(report) == {"bench", "backend", "device", "results"}
    assert (report["bench"], report["backend"]) == (name, backend)
    assert isinstance(report["device"], str) and report["device"]
    assert report["results"]
    for e in report["results"]:
        assert {"name", "value", "unit"} <= set(e) <= KEYS
        assert e["value"] > 0 and e["baseline"] > 0
        assert e["ratio"] == pytest.approx(e["value"] / e["baseline"])
    return {e["name"]: e for e in report["results"]}


def test_halo_report(backend):
    r = bench.run("halo", backend.name, reps=1, quick=True)
    names = check_report(r, "halo", backend.name)
    for case in ("c192_rot0", "c192_rot1", "c192_vec_rot1", "c48_q30"):
        for regime in ("", "warm/"):
            for what in ("pack", "unpack"):
                e = names[f"{regime}{case}/{what}_gbps"]
                assert e["unit"] == "GB/s"
                if bench.import_pace() is not None:
                    assert f"{regime}{case}/{what}_vs_pace" in names


def test_pool_report_from_the_command_line(backend):
    # os.environ, not the process's C environment: OpenCL implementations edit the latter
    # when loaded (one removed NVIDIA's library from OCL_ICD_FILENAMES).
    out = subprocess.run(
        [sys.executable, "-m", "gpubuf.bench", "pool", "--backend", backend.name, "--json", "--reps", "1", "--quick"],
        check=True,
        capture_output=True,
        text=True,
        env=dict(os.environ),
    ).stdout
    lines = out.strip().splitlines()
    assert len(lines) == 1
    names = check_report(json.loads(lines[0]), "pool", backend.name)
    from gpubuf import bench_pool

    with_cl = backend.name == "opencl" and bench_pool.pyopencl_queue() is not None
    for size in bench_pool.POOL_SIZES:
        assert names[f"hit_ns/{size}"]["unit"] == "ns"
        if with_cl:
            assert names[f"vs_pyopencl/{size}"]["unit"] == "ns"
            assert names[f"pyopencl_buffers_vs_pyopencl/{size}"]["baseline"] > 0
    for n in bench_pool.ARRAY_SIZES:
        assert (f"array_us/{n}" in names) == with_cl


def test_zarr_report(backend):
    pytest.importorskip("zarr")
    r = bench.run("zarr", backend.name, reps=1, quick=True)
    names = check_report(r, "zarr", backend.name)
    cases = {f"{a}/{op}_gbps" for a in ("unsharded", "sharded") for op in ("read", "write")}
    assert set(names) == cases and all(names[c]["unit"] == "GB/s" for c in cases)


def test_bad_arguments():
    with pytest.raises(ValueError):
        bench.run("nope")
    with pytest.raises(ValueError):
        bench.run("pool", reps=0)


@pytest.mark.skipif("cuda" in gpubuf.available_backends(), reason="CUDA can run here")
def test_unavailable_backend_raises():
    with pytest.raises(gpubuf.BackendUnavailableError):
        bench.run("pool", "cuda", reps=1, quick=True)


def _cli(*args, stdout=subprocess.PIPE):
    return subprocess.run(
        [sys.executable, "-m", "gpubuf.bench", *args], stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=300
    )


def test_the_command_line_says_what_went_wrong_in_one_line():
    # Usage errors are argparse's (status 2); a backend that cannot run is one line and
    # status 1, never a traceback.
    for args in (["pool", "--reps", "0"], ["pool", "--reps", str(10**20)], ["mpi", "--backend", "opencl"]):
        r = _cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr
    if "cuda" not in gpubuf.available_backends():
        r = _cli("pool", "--backend", "cuda", "--quick", "--reps", "1")
        assert r.returncode == 1 and r.stderr.startswith("gpubuf: ") and "Traceback" not in r.stderr, r.stderr
    r = _cli("mpi", "--quick", "--reps", "1")  # one process: not a layout of ranks
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    if os.path.exists("/dev/full"):
        with open("/dev/full", "w") as full:
            r = _cli("pool", "--quick", "--reps", "1", "--json", stdout=full)
        assert r.returncode == 1 and "writing to stdout" in r.stderr and "Traceback" not in r.stderr, r.stderr
