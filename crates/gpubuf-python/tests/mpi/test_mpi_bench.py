"""``python -m gpubuf.bench mpi`` as a smoke run under ``mpirun -n 4`` and ``-n 6``: every
rank takes part, every case and kind has its figures, and the figures are times."""

import pytest

MPI = pytest.importorskip("mpi4py.MPI")
pytest.importorskip("gpubuf.mpi")

from gpubuf import bench  # noqa: E402

SIZE = MPI.COMM_WORLD.Get_size()
pytestmark = pytest.mark.skipif(SIZE not in (4, 6), reason="run under mpirun -n 4 or -n 6")


def test_every_case_has_its_figures():
    report = bench.run("mpi", "cpu", reps=1, quick=True)
    names = {e["name"]: e for e in report["results"]}
    pace = bench.import_pace() is not None and SIZE == 6
    for case in ("c48", "c96"):
        for kind in ("scalars", "vector"):
            want = [f"{case}/{kind}_vs_rust_us"]
            if pace:
                want += [f"{case}/{kind}_{k}" for k in ("vs_pace_us", "messages_vs_pace_us", "pace_installed_us")]
            else:
                assert names[f"{case}/{kind}_update_us"]["value"] > 0
                assert names[f"{case}/{kind}_messages_us"]["value"] > 0
            for n in want:
                e = names[n]
                assert e["unit"] == "us" and e["value"] > 0 and e["baseline"] > 0, e
                assert e["ratio"] == pytest.approx(e["value"] / e["baseline"])
    # Every rank computed the same slowest-rank figures.
    values = [e["value"] for e in report["results"]]
    assert MPI.COMM_WORLD.allgather(values) == [values] * SIZE


def test_the_command_line_prints_on_rank_zero_only(capsys):
    assert bench.main(["mpi", "--quick", "--reps", "1", "--json"]) == 0
    out = capsys.readouterr().out
    if MPI.COMM_WORLD.Get_rank() == 0:
        assert '"bench": "mpi"' in out and '"ranks": %d' % SIZE in out
    else:
        assert out == ""


def test_other_backends_are_refused():
    class OpenCL:
        name = "opencl"

    with pytest.raises(ValueError, match="--backend cpu"):
        bench.bench_mpi(OpenCL(), reps=1, quick=True)
