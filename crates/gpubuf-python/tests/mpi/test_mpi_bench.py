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
            want = [f"{case}/{kind}_vs_rust_us", f"{case}/{kind}_vs_floor_us"]
            if pace:
                more = ("vs_pace_us", "messages_vs_pace_us", "pace_installed_us")
                want += [f"{case}/{kind}_{k}" for k in more + ("floor_vs_pace_us", "raw_vs_pace_us")]
                # The floor, MPI's exchange and the updaters were timed in one run.
                floor, update = names[f"{case}/{kind}_floor_vs_pace_us"], names[f"{case}/{kind}_vs_pace_us"]
                raw = names[f"{case}/{kind}_raw_vs_pace_us"]
                assert floor["baseline"] == update["baseline"] == raw["baseline"]
                vs_floor = names[f"{case}/{kind}_vs_floor_us"]
                assert (vs_floor["value"], vs_floor["baseline"]) == (update["value"], floor["value"])
            else:
                assert names[f"{case}/{kind}_update_us"]["value"] > 0
                assert names[f"{case}/{kind}_messages_us"]["value"] > 0
                assert names[f"{case}/{kind}_raw_us"]["value"] > 0
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


def test_each_entry_takes_its_own_timings(monkeypatch):
    """Every entry's value and baseline come from the rotation and position that timed
    them: a fake rotation returns distinct times, 10 * call + position + 1 microseconds."""
    from gpubuf import bench_mpi

    calls = []

    def fake(comm, reps, fns, block=1):
        calls.append(len(fns))
        return [(10 * (len(calls) - 1) + j + 1) * 1e-6 for j in range(len(fns))]

    monkeypatch.setattr(bench_mpi, "_round_robin", fake)
    results = bench_mpi.bench_mpi(reps=1, quick=True)
    got = {e["name"]: (round(e["value"]), round(e.get("baseline", -1))) for e in results}
    pace = bench.import_pace() is not None and SIZE == 6
    per = 3 if pace else 2  # rotations per case and kind
    assert len(calls) == 4 * per
    for i, (case, kind) in enumerate((c, k) for c in ("c48", "c96") for k in ("scalars", "vector")):
        pair, rest, inst = 10 * per * i, 10 * (per * i + 1), 10 * (per * i + 2)
        # The pair: update from Python, then in Rust; the rest: update, floor, raw, messages, pace.
        assert got[f"{case}/{kind}_vs_rust_us"] == (pair + 1, pair + 2)
        assert got[f"{case}/{kind}_vs_floor_us"] == (rest + 1, rest + 2)
        if pace:
            assert got[f"{case}/{kind}_vs_pace_us"] == (rest + 1, rest + 5)
            assert got[f"{case}/{kind}_floor_vs_pace_us"] == (rest + 2, rest + 5)
            assert got[f"{case}/{kind}_raw_vs_pace_us"] == (rest + 3, rest + 5)
            assert got[f"{case}/{kind}_messages_vs_pace_us"] == (rest + 4, rest + 5)
            assert got[f"{case}/{kind}_pace_installed_us"] == (inst + 1, inst + 2)
        else:
            assert got[f"{case}/{kind}_update_us"] == (rest + 1, -1)
            assert got[f"{case}/{kind}_raw_us"] == (rest + 3, -1)
            assert got[f"{case}/{kind}_messages_us"] == (rest + 4, -1)
