"""The leaderboard across runs from result files on disk: latest per (problem, solution, GPU),
one board per GPU, fast_p / geomean / pass@k checked against values worked out by hand, the
outputs of every format, and bad input."""
import json
import math

import pytest

from harness.record import standings
from harness.core.results import EvalResult, Status
from harness.core.store import Store
from run_eval import main

H200, H100 = "NVIDIA H200", "NVIDIA H100"


def result(problem, solution, gpu, status="ok", speedup=None, cls="tf32", run="r1", finished="2026-11-01T00:00:00",
           sources=None):
    timing = {}
    if speedup is not None:
        base = "reference" if cls == "tf32" else "reference_fp32"
        stat = {"median_ms": 1.0, "iqr_ms": 0.01, "q1_ms": 0.99, "q3_ms": 1.0}
        timing = {"solution": stat, base: {**stat, "median_ms": speedup}, "baseline": base, "speedup": speedup}
    return EvalResult(problem={"id": problem, "sha256": f"sha-{problem}"},
                      solution={"name": solution, "sha256": f"s-{solution}",
                                "sources_sha256": sources or f"src-{problem}-{solution}-{run}"},
                      status=Status(status), message=f"{status} message", run_id=run, timing=timing,
                      correctness={"precision": cls if status == "ok" else None},
                      env={"gpu": {"name": gpu}, "git": {"commit": "abcdef1234"}}, finished_at=finished)


@pytest.fixture
def runs(tmp_path):
    older = [result("p1", "fast", H200, speedup=1.2), result("p1", "direct", H200, speedup=0.5, cls="fp32"),
             result("p2", "fast", H200, speedup=2.5), result("p2", "direct", H200, status="incorrect"),
             result("p3", "fast", H200, status="incorrect"), result("p3", "direct", H200, speedup=1.6, cls="fp32"),
             result("p1", "gen.0", H200, speedup=1.5), result("p1", "gen.1", H200, status="incorrect"),
             result("p1", "gen.2", H200, speedup=0.8), result("p2", "gen.0", H200, speedup=2.2),
             result("p2", "gen.1", H200, speedup=1.1)]
    newer = [result("p3", "fast", H200, speedup=3.0, run="r2", finished="2026-11-02T00:00:00")]
    other_gpu = [result("p1", "fast", H100, speedup=1.8, run="r3")]
    for run_id, results in (("r1", older), ("r2", newer), ("r3", other_gpu)):
        store = Store(tmp_path / "results", run_id)
        for r in results:
            store.write(r)
        store.write_manifest({"run_id": run_id})
    return tmp_path / "results"


def summary_of(rows, solution, gpu=H200):
    return next(r for r in rows if r["solution"] == solution and r["gpu"] == gpu)


def test_latest_result_per_pair_and_one_board_per_gpu(runs):
    entries = standings.gather([runs])
    chosen = standings.select(entries)
    assert len(chosen) == 12  # 13 files, p3/fast of r1 replaced by r2
    boards = {b.gpu: b for b in standings.boards(chosen)}
    assert set(boards) == {H200, H100}
    p1 = boards[H200].problems["p1"]
    assert [e.result.solution["name"] for e in p1["ranked"]] == ["gen.0", "fast", "gen.2", "direct"]
    assert [e.result.solution["name"] for e in p1["others"]] == ["gen.1"]
    assert boards[H200].problems["p3"]["ranked"][0].result.run_id == "r2"
    assert len(standings.select(entries, keep_all=True)) == 13
    assert {e.result.solution["name"] for e in standings.select(entries, solution="gen")} == {"gen.0", "gen.1", "gen.2"}
    assert {standings.gpu_of(e.result) for e in standings.select(entries, gpu="h100")} == {H100}


def test_a_pair_that_ended_before_a_lane_took_it_is_on_its_runs_gpu_board():
    import dataclasses
    build_error = result("p1", "broken", H200, status="build_error")
    for env, board in (({"device": "cuda", "gpu_name": H200}, H200),  # the runner's env: no lane's gpu
                       ({"device": "cuda"}, "unknown GPU"), ({"device": "cpu"}, "CPU")):
        assert standings.gpu_of(dataclasses.replace(build_error, env=env)) == board


def test_fast_p_and_geomean_by_hand(runs):
    rows = standings.summarize(standings.select(standings.gather([runs])))
    fast = summary_of(rows, "fast")
    assert fast["attempted"] == 3 and fast["correct"] == 1.0 and fast["fast_1"] == 1.0
    assert fast["fast_1.5"] == pytest.approx(2 / 3) and fast["fast_2"] == pytest.approx(2 / 3)
    assert fast["geomean_speedup"] == pytest.approx((1.2 * 2.5 * 3.0) ** (1 / 3))
    assert fast["tf32"]["fast_1.5"] == pytest.approx(2 / 3) and fast["fp32"]["correct"] == 0.0
    direct = summary_of(rows, "direct")
    assert direct["correct"] == pytest.approx(2 / 3) and direct["fast_1"] == pytest.approx(1 / 3)
    assert direct["fast_2"] == 0.0 and direct["geomean_speedup"] == pytest.approx(math.sqrt(0.5 * 1.6))
    assert direct["fp32"]["correct"] == pytest.approx(2 / 3) and direct["tf32"]["geomean_speedup"] is None
    h100 = summary_of(rows, "fast", H100)
    assert (h100["attempted"], h100["fast_1.5"], h100["fast_2"]) == (1, 1.0, 0.0)


def test_samples_pass_at_k_and_best_sample(runs):
    gen = summary_of(standings.summarize(standings.select(standings.gather([runs]))), "gen")
    assert gen["samples"] == 3 and gen["attempted"] == 2
    assert gen["correct"] == pytest.approx((2 / 3 + 1) / 2)           # fast_0 per problem, then averaged
    assert gen["fast_1"] == pytest.approx((1 / 3 + 1) / 2)
    assert gen["pass_at_k"][1]["fast_0"] == pytest.approx((2 / 3 + 1) / 2)
    assert set(gen["pass_at_k"]) == {1}                                 # no problem has 5 samples
    assert gen["best"] == {"p1": "gen.0", "p2": "gen.0"}
    assert standings.pass_at_k(5, 2, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(5, 2))
    assert standings.sample_of("gen.12") == ("gen", 12) and standings.sample_of("fast_fp32") == ("fast_fp32", None)


def test_every_format_and_the_files_of_out(runs, tmp_path, capsys):
    out = tmp_path / "board"
    assert main(["leaderboard", str(runs), "--out", str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert names == {"leaderboard.txt", "leaderboard.md", "leaderboard.csv", "summary.csv", "leaderboard.json",
                     "leaderboard.html", "leaderboard.png"}
    assert (out / "leaderboard.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (out / "leaderboard.html").read_text()
    assert "data:image/png;base64," in page and "<table>" in page and H100 in page and "fast_1.5" in page
    data = json.loads((out / "leaderboard.json").read_text())
    assert [b["gpu"] for b in data["boards"]] == [H100, H200]
    assert "| 1      | gen.0" in (out / "leaderboard.md").read_text()
    assert (out / "leaderboard.csv").read_text().splitlines()[0].startswith("gpu,precision,problem,rank,solution")
    for fmt in ("text", "md", "csv", "json"):
        assert main(["leaderboard", str(runs), "--format", fmt]) == 0
        assert "gen.0" in capsys.readouterr().out


def test_bad_input_is_named(runs, tmp_path, capsys):
    not_a_run = tmp_path / "empty"
    not_a_run.mkdir()
    assert main(["leaderboard", str(not_a_run)]) == 2
    assert "not a run folder" in capsys.readouterr().err
    bad = runs / "r2" / "p9__x.json"
    bad.write_text(json.dumps({**result("p9", "x", H200).to_dict(), "schema_version": 9}))
    assert main(["leaderboard", str(runs)]) == 2
    assert "schema_version 9" in capsys.readouterr().err
    bad.write_text("{not json")
    assert main(["leaderboard", str(runs), "--format", "md"]) == 0   # a corrupt file is skipped ...
    assert "p9__x.json: skipped" in capsys.readouterr().err
    flaky = result("p1", "fast", H200, status="incorrect", run="r4", sources="same")
    Store(runs, "r4").write(flaky)
    Store(runs, "r5").write(result("p1", "fast", H200, speedup=1.0, run="r5", sources="same"))
    assert main(["leaderboard", str(runs)]) == 2                      # ... a verdict that does not repeat is not
    assert "records the same problem and solution sources" in capsys.readouterr().err
    only_corrupt = tmp_path / "corrupt" / "run"
    only_corrupt.mkdir(parents=True)
    (only_corrupt / "a__b.json").write_text("{")
    assert main(["leaderboard", str(only_corrupt)]) == 2
    assert "no readable results (1 file(s) skipped)" in capsys.readouterr().err


def test_an_untimed_pass_never_replaces_a_timed_result_of_the_same_sources(tmp_path):
    """check without --timing records ok without a speedup: the board keeps the timed result of
    the same problem and solution sources, and takes the untimed one only where the sources changed."""
    timed = result("p1", "fast", H200, speedup=2.0, sources="same", run="t", finished="2026-11-01T00:00:00")
    untimed = result("p1", "fast", H200, sources="same", run="u", finished="2026-11-02T00:00:00")
    changed = result("p1", "fast", H200, sources="new", run="v", finished="2026-11-03T00:00:00")
    for run_id, r in (("t", timed), ("u", untimed)):
        Store(tmp_path / "results", run_id).write(r)
    (chosen,) = standings.select(standings.gather([tmp_path / "results"]))
    assert chosen.result.run_id == "t" and chosen.result.timing["speedup"] == 2.0
    Store(tmp_path / "results", "v").write(changed)
    (chosen,) = standings.select(standings.gather([tmp_path / "results"]))
    assert chosen.result.run_id == "v"  # other sources: the newest verdict stands, untimed


def test_skipped_pairs_are_listed_apart_from_incorrect_ones(tmp_path, capsys):
    store = Store(tmp_path / "results", "r1")
    for r in (result("p1", "fast", H200, speedup=2.0), result("p1", "wrong", H200, status="incorrect"),
              result("p1", "cuda", H200, status="skipped")):
        store.write(r)
    assert main(["leaderboard", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out
    wrong, skipped = out.index("not correct:"), out.index("skipped (not run here):")
    assert wrong < out.index("wrong  ") < skipped < out.index("cuda  ")
    assert max(len(line) for line in out.splitlines()) <= 120


def test_with_no_argument_the_board_shows_your_runs_and_names_the_snapshots(tmp_path, monkeypatch, capsys):
    Store(tmp_path / "results", "mine").write(result("p1", "fast", H200, speedup=2.0, run="mine"))
    Store(tmp_path / "results" / "snapshots" / "2026-11-24-h200", "snap").write(
        result("p1", "fast", H100, speedup=9.0, run="snap"))
    monkeypatch.chdir(tmp_path)
    assert main(["leaderboard"]) == 0
    out, err = capsys.readouterr()
    assert "mine" in out and H100 not in out and "snap" not in out
    assert "snapshots (not on this board" in err and "results/snapshots/2026-11-24-h200" in err
    assert main(["leaderboard", "results/snapshots"]) == 0 and H100 in capsys.readouterr().out
