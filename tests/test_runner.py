"""The runner's schedule: pairs go to lanes as their builds finish, a lane keeps to its problem,
and a lane waits while a build may still add work."""
import threading
import time
from types import SimpleNamespace

from harness.laneproc import gpu_ids
from harness.runner import Schedule


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
    threading.Timer(0.2, schedule.built, args=(late,)).start()
    start = time.monotonic()
    assert schedule.take(None) is late and time.monotonic() - start >= 0.15
    schedule.expect(1)
    threading.Timer(0.1, schedule.built, args=(None,)).start()  # a build that failed adds nothing
    assert schedule.take(None) is None


def test_lanes_take_the_visible_gpus_in_order(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert gpu_ids(2) == ["3", "1"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpu_ids(2) == ["0", "1"]


def test_progress_prints_lines_in_a_log_and_bars_in_a_terminal(capsys):
    from harness.progress import Progress
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
