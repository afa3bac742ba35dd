"""The whole pipeline on the CPU: C++ fixture solutions for elementwise_add, one run, every
outcome recorded, and the run goes on past crashes and hangs."""
import json
from pathlib import Path

import pytest

from harness import REPO_ROOT
from harness.core.config import load_config, with_overrides
from harness.core.problems import problem_from_path
from harness.core.results import Status
from harness.run.runner import evaluate
from harness.core.solutions import Pair, solution_from_path
from conftest import ADD_PROBLEM, FIXTURES, FIXTURE_SOLUTIONS

# crash and hang first: the pairs after them must still run and be recorded
ORDER = ["cpp_segv", "cpp_hang", "import_raises", "cpp_syntax_error", "cpp_wrong", "cpp_ok"]
CUDA_ADD = REPO_ROOT / "solutions" / "examples" / "elementwise_add" / "cuda_add.py"


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    results_dir = tmp_path_factory.mktemp("results")
    cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"),
                         {"results_dir": str(results_dir), "timeouts.run_s": 15})
    problem = problem_from_path(ADD_PROBLEM)
    pairs = [Pair(problem, solution_from_path(FIXTURE_SOLUTIONS / f"{name}.py")) for name in ORDER]
    pairs.append(Pair(problem, solution_from_path(CUDA_ADD)))
    results = evaluate(pairs, cfg, run_id="cpu-e2e", out=lambda line: None)
    return {r.solution["name"]: r for r in results}, results_dir / "cpu-e2e"


def test_every_pair_is_recorded_on_disk(cpu_run):
    by_name, run_dir = cpu_run
    assert set(by_name) == set(ORDER) | {"cuda_add"}
    files = {p.name for p in run_dir.glob("*.json")}
    assert {f"elementwise_add__{n}.json" for n in by_name} | {"run.json"} == files
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["summary"]["ok"] == 1 and manifest["device"] == "cpu"


def test_correct_cpp_solution_passes_with_timing(cpu_run):
    r = cpu_run[0]["cpp_ok"]
    assert r.status is Status.OK, r.message
    assert r.correctness["max_abs_error"] < 1e-6 and r.correctness["ground_truth"] == "float64"
    assert r.timing["solution"]["timer"] == "host" and r.timing["solution"]["samples"] >= 3
    assert r.timing["reference"]["median_ms"] > 0 and r.timing["speedup"] > 0
    assert len(r.seeds["shapes"][0]["trials"]) == 2 and r.seeds["init"] >= 0
    assert r.env["torch"] and r.env["device"] == "cpu" and "git" in r.env
    ext = r.build["extensions"][0]
    assert ext["name"] == "fixture_add_variants"
    assert ext["cached"] or ext["nice"] == 10   # build.stagger off: the compilers at the build thread's (0) + 10
    assert ext["cached"] or ext["jobs"] >= 1    # MAX_JOBS: the cores shared among the run's builds
    assert r.config["correctness"]["trials"] == 2
    assert len(r.problem["sha256"]) == 64 and len(r.solution["sha256"]) == 64


def test_wrong_solution_is_incorrect_with_location(cpu_run):
    r = cpu_run[0]["cpp_wrong"]
    assert r.status is Status.INCORRECT
    assert "elements outside" in r.message and "worst at index" in r.message
    assert r.correctness["max_abs_error"] > 0.1


def test_import_error_is_load_error_with_line(cpu_run):
    r = cpu_run[0]["import_raises"]
    assert r.status is Status.LOAD_ERROR
    assert "import_raises.py:6" in r.message and "this solution fails at import" in r.message
    assert "Traceback" in r.detail


def test_syntax_error_is_build_error_with_compiler_message(cpu_run):
    r = cpu_run[0]["cpp_syntax_error"]
    assert r.status is Status.BUILD_ERROR
    assert "error:" in r.message and "fixture_syntax_error" in r.message
    assert "error:" in r.detail and "main.cpp" in r.detail  # the full compiler log is kept
    assert r.build["log"]


def test_segfault_is_crashed(cpu_run):
    r = cpu_run[0]["cpp_segv"]
    assert r.status is Status.CRASHED
    assert "SIGSEGV" in r.message and "correctness" in r.message


def test_hang_is_timeout(cpu_run):
    r = cpu_run[0]["cpp_hang"]
    assert r.status is Status.TIMEOUT
    assert "correctness" in r.message and "15 s" in r.message


def test_cuda_solution_is_skipped_on_cpu(cpu_run):
    r = cpu_run[0]["cuda_add"]
    assert r.status is Status.SKIPPED and "needs a CUDA device" in r.message


@pytest.mark.parametrize("name, deferred", [("cuda_at_import_tensor", True), ("import_raises", True),
                                            ("cpp_syntax_error", False)])
def test_a_cuda_runs_build_step_leaves_an_import_that_fails_without_the_gpu_to_the_worker(tmp_path, name, deferred):
    """On a CUDA run the build step imports with the GPU hidden; an import that fails there (CUDA
    at import, as KernelBench allows) goes on to the lane, whose worker imports it with its GPU
    visible and gives the verdict. A compile error stays the build step's."""
    from harness.run.pipeline import PairRun, RunContext
    cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"), {"results_dir": str(tmp_path)})
    import importlib.metadata
    import os
    ctx = RunContext(run_id="r", cfg=cfg, device="cuda", arch="9.0", cache_dir=Path(os.environ["KB_BUILD_CACHE"]),
                     work_root=tmp_path / "work", torch_version=importlib.metadata.version("torch"))
    run = PairRun(ctx, Pair(problem_from_path(ADD_PROBLEM), solution_from_path(FIXTURE_SOLUTIONS / f"{name}.py")))
    result = run.run_build()
    if deferred:
        assert result is None and "with the GPU hidden the import failed" in run.build["log"], result
    else:
        assert result is not None and result.status is Status.BUILD_ERROR
