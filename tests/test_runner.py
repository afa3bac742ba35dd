"""The runner's schedule: pairs go to lanes as their builds finish, a lane keeps to its problem,
and a lane waits while a build may still add work."""
import threading
import time
from types import SimpleNamespace

from harness.run.laneproc import gpu_ids
from harness.run.runner import Schedule


def run(problem: str):
    return SimpleNamespace(pair=SimpleNamespace(problem=SimpleNamespace(id=problem)))


def test_a_lane_keeps_to_its_problem_else_takes_the_first_in_order():
    a1, b1, a2 = run("a"), run("b"), run("a")
    schedule = Schedule({id(r): i for i, r in enumerate([a1, b1, a2])})
    for r in (a1, b1, a2):
        schedule.put(r)
    assert schedule.take(None) is a1
    assert schedule.take("a") is a2          # its ground truth and reference timing are warm
    assert schedule.take("a") is b1
    assert schedule.take("b") is None and not schedule.more()


def test_a_lane_waits_for_a_build_that_may_add_a_pair():
    late = run("a")
    schedule = Schedule({id(late): 0})
    schedule.expect(1)
    assert schedule.more()
    threading.Timer(0.2, schedule.built, args=(late, True)).start()
    start = time.monotonic()
    assert schedule.take(None) is late and time.monotonic() - start >= 0.15
    schedule.expect(1)
    threading.Timer(0.1, schedule.built, args=(run("b"), False)).start()  # a build that failed adds nothing
    assert schedule.take(None) is None


def test_a_pair_waits_for_its_yardsticks_build_whichever_way_it_ends():
    """The CI gate's pair is timed with its solution at the revision (its yardstick): it goes to a
    lane only once the yardstick's build has ended, so the lane has its libraries."""
    now, then = run("a"), run("a")
    schedule = Schedule({id(now): 0, id(then): 1}, {id(now): then})
    schedule.expect(2)
    schedule.built(now, True)
    assert schedule.more() and not schedule.ready           # built, parked until the yardstick's build ends
    schedule.built(then, True)
    assert schedule.take(None) is now and schedule.take("a") is then
    now, then = run("a"), run("a")
    schedule = Schedule({id(now): 0, id(then): 1}, {id(now): then})
    schedule.expect(1)
    schedule.put(now)
    threading.Timer(0.1, schedule.built, args=(then, False)).start()   # its build failed: the pair goes on alone
    assert schedule.take(None) is now and schedule.take("a") is None and not schedule.left


def test_lanes_take_the_visible_gpus_in_order(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert gpu_ids(2) == ["3", "1"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpu_ids(2) == ["0", "1"]


def test_progress_prints_lines_in_a_log_and_bars_in_a_terminal(capsys):
    from harness.run.progress import Progress
    lines = []
    plain = Progress(lines.append, pairs=2, builds=1, tty=False)
    plain.pair_done("[1/2] p / s: ok", "ok")
    plain.build_done()
    plain.close()
    assert lines == ["[1/2] p / s: ok"] and plain.pairs is None
    bars = Progress(lines.append, pairs=2, builds=1, tty=True)
    bars.pair_done("[1/2] p / s: ok", "ok")
    bars.build_done()
    assert bars.pairs.n == 1 and bars.builds.n == 1
    bars.close()
    captured = capsys.readouterr()
    assert "[1/2] p / s: ok" in captured.out and "pairs" in captured.err  # the line, and the bar with its ETA


def test_identical_solution_files_build_once_and_every_pair_is_judged(tmp_path, monkeypatch):
    """Eight problems, each with the same solution file (a generated corpus's duplicates): one
    build step runs, the other pairs take what it built, and every pair gets its verdict."""
    import shutil

    from harness import REPO_ROOT
    from harness.core.config import load_config, with_overrides
    from harness.run.pipeline import PairRun
    from harness.core.problems import problem_from_path
    from harness.core.results import Status
    from harness.run.runner import evaluate
    from harness.core.solutions import Pair, solution_from_path
    from conftest import ADD_PROBLEM, FIXTURES

    source = REPO_ROOT / "solutions" / "examples" / "elementwise_add" / "cpp_add.py"
    pairs = []
    for i in range(8):
        problem = tmp_path / "problems" / "dup" / f"{i}_add.py"
        problem.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ADD_PROBLEM, problem)
        solution = tmp_path / "solutions" / "dup" / problem.stem / "gen.py"
        solution.parent.mkdir(parents=True)
        shutil.copyfile(source, solution)
        pairs.append(Pair(problem_from_path(problem), solution_from_path(solution)))
    assert len({p.solution.sources_sha256 for p in pairs}) == 1
    cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"),  # a cache of its own: no earlier manifest
                         {"results_dir": str(tmp_path / "results"), "build.jobs": 8,
                          "build.cache_dir": str(tmp_path / "cache")})
    steps = []
    original = PairRun.run_build
    monkeypatch.setattr(PairRun, "run_build", lambda run: steps.append(run) or original(run))
    results = evaluate(pairs, cfg, run_id="dup", out=lambda line: None)
    assert [r.status for r in results] == [Status.OK] * 8, [r.message for r in results]
    assert len(steps) == 1  # one build step for the eight


def test_bad_input_found_at_the_start_records_nothing(tmp_path):
    """--gpus 2 on a CPU run is bad input: one line, and no results folder made (the GPU test
    test_more_gpus_than_the_host_has_is_bad_input_and_records_nothing holds the same on CUDA)."""
    import pytest

    from harness.core.config import load_config, with_overrides
    from harness.core.errors import BadInput
    from harness.core.problems import problem_from_path
    from harness.run.runner import evaluate
    from harness.core.solutions import Pair, solution_from_path
    from conftest import ADD_PROBLEM, FIXTURE_SOLUTIONS, FIXTURES

    pair = Pair(problem_from_path(ADD_PROBLEM), solution_from_path(FIXTURE_SOLUTIONS / "cpp_ok.py"))
    cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"), {"results_dir": str(tmp_path / "r"), "gpus": 2})
    with pytest.raises(BadInput, match="2 lanes need CUDA devices"):
        evaluate([pair], cfg, run_id="bad", out=lambda line: None)
    assert not (tmp_path / "r").exists()


def test_the_gates_yardstick_is_on_by_default_on_every_device_and_off_turns_it_off():
    from harness.core.config import load_config, with_overrides
    from harness.run.runner import gate_in_same_rounds
    cfg = load_config(None)
    assert gate_in_same_rounds(cfg, "cpu") and gate_in_same_rounds(cfg, "cuda")
    assert gate_in_same_rounds(with_overrides(cfg, {"timing.gate_yardstick": "on"}), "cuda")
    off = with_overrides(cfg, {"timing.gate_yardstick": "off"})
    assert not gate_in_same_rounds(off, "cuda") and not gate_in_same_rounds(off, "cpu")
    assert not gate_in_same_rounds(with_overrides(cfg, {"timing.enabled": False}), "cpu")
