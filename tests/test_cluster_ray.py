"""--cluster ray on the CPU: a local Ray instance runs the CPU pipeline over the elementwise_add
fixtures with the same verdicts as a local run; a lane (Ray actor) killed mid-pair costs one retry
on a new one, a second death records the pair as crashed with its node. (Without Ray, the flag's
one line: tests/test_cli.py.)"""
import json
import re
import subprocess
import sys

import pytest

from harness import REPO_ROOT
from harness.core.config import load_config, with_overrides
from harness.core.problems import problem_from_path
from harness.core.results import Status
from harness.run.runner import evaluate
from harness.core.solutions import Pair, solution_from_path
from conftest import ADD_PROBLEM, FIXTURES, FIXTURE_SOLUTIONS

pytestmark = pytest.mark.ray
pytest.importorskip("ray")  # CI installs requirements-ray.txt after the base suite, then runs -m ray

NAMES = ["cpp_ok", "cpp_wrong", "cpp_segv", "cpp_hang", "cheat_zeros"]


def config(tmp_path, **overrides):
    return with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"),
                          {"results_dir": str(tmp_path), "secret_seed": 7, "timeouts.call_s": 3, "timeouts.first_call_s": 4,
                           **overrides})


def pairs(names):
    problem = problem_from_path(ADD_PROBLEM)
    return [Pair(problem, solution_from_path(FIXTURE_SOLUTIONS / f"{n}.py")) for n in names]


BUSY_HOST = re.compile(r"; note: the host was busy \(load [\d.]+ on \d+ core\(s\)\), which the interval may not cover: "
                       r"time it again on a quiet host")


def verdicts(results):
    """Everything a result says apart from its timings, phases, environment and times of day (a
    time-out's message names the reference's time; a build's record its seconds and CPU seconds,
    and whether the first run had built it already; a CPU pair's note of a busy host the load
    average while it was timed; whether ground truth was computed for this pair or reused from one
    the lane ran before depends on the order the pairs reach the lanes)."""
    def message(r):
        return BUSY_HOST.sub("", r.message) if r.status is not Status.TIMEOUT else ""

    def builds(r):
        return [{**e, "seconds": 0, "cpu_s": 0, "cached": None} for e in r.build["extensions"]]
    return {r.solution["name"]: (r.status, r.phase, message(r), {k: v for k, v in r.correctness.items() if k != "truth"},
                                 r.seeds, r.flags, builds(r))
            for r in results}


def test_the_cpu_pipeline_on_ray_gives_the_local_verdicts(tmp_path):
    local = evaluate(pairs(NAMES), config(tmp_path / "local"), run_id="local", out=lambda line: None)
    on_ray = evaluate(pairs(NAMES), config(tmp_path / "ray", cluster="ray"), run_id="ray", out=lambda line: None)
    assert verdicts(on_ray) == verdicts(local)
    by_name = {r.solution["name"]: r for r in on_ray}
    assert by_name["cpp_ok"].status is Status.OK and by_name["cpp_hang"].status is Status.TIMEOUT
    assert by_name["cpp_segv"].status is Status.CRASHED and "SIGSEGV" in by_name["cpp_segv"].message
    assert "Ray node" in by_name["cpp_ok"].env["lane"]["node"]
    manifest = json.loads((tmp_path / "ray" / "ray" / "run.json").read_text())
    assert manifest["cluster"] == "ray" and "Ray node" in manifest["lanes_seen"][0]["node"]
    # the same run resumed: nothing runs again
    lines = []
    evaluate(pairs(NAMES), config(tmp_path / "ray", cluster="ray"), run_id="ray", resume=True, out=lines.append)
    assert any("5 pair(s) already recorded, 0 to run" in line for line in lines)


def test_a_killed_lane_costs_one_retry_and_a_second_death_is_a_crash(tmp_path, monkeypatch):
    monkeypatch.setenv("KB_TEST_KILL_ONCE", str(tmp_path / "marker"))
    lines = []
    results = evaluate(pairs(["kill_lane_once", "kill_lane", "cpp_ok"]),
                       config(tmp_path / "r", cluster="ray", sandbox="off"),  # in the sandbox the kill is refused
                       run_id="faults", out=lines.append)
    by_name = {r.solution["name"]: r for r in results}
    assert by_name["kill_lane_once"].status is Status.OK, by_name["kill_lane_once"].message  # retried on a new lane
    killer = by_name["kill_lane"]
    assert killer.status is Status.CRASHED and "died twice" in killer.message and "Ray node" in killer.message
    assert by_name["cpp_ok"].status is Status.OK
    assert sum(line.startswith("warning: lane") for line in lines) == 3


DRIVER = """
import sys
from harness.core.config import load_config, with_overrides
from harness.core.problems import problem_from_path
from harness.run.runner import evaluate
from harness.core.solutions import Pair, solution_from_path
config, problem, results_dir, *paths = sys.argv[1:]
pairs = [Pair(problem_from_path(problem), solution_from_path(p)) for p in paths]
cfg = with_overrides(load_config(config), {"results_dir": results_dir, "cluster": "ray"})
print(*[r.status.value for r in evaluate(pairs, cfg, run_id="driver", out=lambda line: None)])
print("imported:", *sorted({"torch", "numpy"} & set(sys.modules)))
"""


def test_the_driver_imports_neither_solutions_nor_torch(tmp_path):
    """What comes back from the lanes is plain data: the driver never imports torch (nor runs a
    solution, which would need it)."""
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(FIXTURES / "configs" / "fast.yaml"), str(ADD_PROBLEM),
                           str(tmp_path), *(str(FIXTURE_SOLUTIONS / f"{n}.py") for n in ("cpp_ok", "cpp_wrong"))],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-2:] == ["ok incorrect", "imported:"], proc.stdout
