import dataclasses
import json

import pytest

from harness.core.errors import BadInput
from harness.core.results import SCHEMA_VERSION, EvalResult, Status, TimingStats
from harness.core.solutions import Pair, helper_files, solution_from_path
from harness.core.problems import problem_from_path
from harness.core.store import Store, load_run
from harness.verdict.timing import summarize
from conftest import ADD_PROBLEM, FIXTURE_SOLUTIONS


def make_result(status=Status.OK, **kw):
    problem = problem_from_path(ADD_PROBLEM)
    solution = solution_from_path(FIXTURE_SOLUTIONS / "cpp_ok.py")
    stats = summarize([1.0, 2.0, 3.0], "host").__dict__
    return EvalResult(problem=problem.to_dict(), solution=solution.to_dict(), status=status, message="m",
                      timing={"solution": stats, "reference": stats, "reference_fp32": stats, "speedup": 1.0,
                              "baseline": "reference_fp32"},
                      correctness={"max_abs_error": 1e-7, "precision": "fp32"}, seeds={"init": 1, "trials": [2, 3]},
                      flags=("library_passthrough",), **kw)


def test_round_trip_through_json():
    result = make_result(Status.INCORRECT, detail="trace")
    again = EvalResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result
    assert again.status is Status.INCORRECT
    assert TimingStats.from_dict(again.timing["solution"]).median_ms == 2.0


def test_unknown_schema_version_and_fields_rejected():
    d = make_result().to_dict()
    with pytest.raises(ValueError, match="schema_version"):
        EvalResult.from_dict({**d, "schema_version": SCHEMA_VERSION + 1})
    with pytest.raises(ValueError, match="unknown result fields"):
        EvalResult.from_dict({**d, "surprise": 1})


def test_store_writes_one_file_per_pair_and_resume_checks_content(tmp_path):
    store = Store(tmp_path, "run1")
    result = make_result()
    path = store.write(result)
    assert path.name == "elementwise_add__cpp_ok.json"
    assert load_run(tmp_path / "run1") == [result]
    pair = Pair(problem_from_path(ADD_PROBLEM), solution_from_path(FIXTURE_SOLUTIONS / "cpp_ok.py"))
    assert store.recorded(pair) == result
    changed = Pair(pair.problem, solution_from_path(FIXTURE_SOLUTIONS / "cpp_wrong.py"))
    assert store.recorded(changed) is None  # different solution: not recorded


def test_resume_sees_a_changed_helper_file(tmp_path):
    """A solution that loads a shared .cu is stale when that file changes, not only itself."""
    family = tmp_path / "solutions" / "fam"
    (family / "_shared").mkdir(parents=True)
    (family / "p1").mkdir()
    kernel = family / "_shared" / "k.cu"
    kernel.write_text("// v1\n")
    sol = family / "p1" / "fast.py"
    sol.write_text("ModelNew = None\n")
    before = solution_from_path(sol)
    assert kernel.resolve() in helper_files(sol.resolve())
    store = Store(tmp_path / "results", "run1")
    store.write(dataclasses.replace(make_result(), solution=before.to_dict()))
    problem = problem_from_path(ADD_PROBLEM)
    assert store.recorded(Pair(problem, before)) is not None
    kernel.write_text("// v2: the shared kernel changed, the solution file did not\n")
    after = solution_from_path(sol)
    assert after.sha256 == before.sha256 and after.sources_sha256 != before.sources_sha256
    assert store.recorded(Pair(problem, after)) is None


def test_corrupt_result_file_is_bad_input(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "x__y.json").write_text("{not json")
    with pytest.raises(BadInput, match="x__y.json"):
        load_run(tmp_path / "run")


def test_status_flags():
    assert Status.OK.passed and not Status.INCORRECT.passed
    assert not Status.SKIPPED.evaluated and Status.CRASHED.evaluated
