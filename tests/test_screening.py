"""timing.profile: screening on the CPU pipeline: fewer calls and rounds where they are auto, a
wrong solution's worker stopped before its timed calls (its verdict as the full profile gives it,
not timed), a correct one timed and marked as screened; the profile's numbers and its validation.
The full profile times a wrong solution's calls without the reference's rounds: its status as before."""
import pytest

from harness.core.config import load_config, with_overrides
from harness.core.errors import BadInput
from harness.core.problems import problem_from_path
from harness.core.results import Status
from harness.core.solutions import Pair, solution_from_path
from harness.run.runner import evaluate
from harness.verdict.timing import AUTO_TIMING, SCREENING, for_device, wrong_rounds_skipped
from conftest import ADD_PROBLEM, FIXTURES, FIXTURE_SOLUTIONS


def test_the_screening_profile_takes_fewer_calls_only_where_they_are_auto():
    assert for_device({"profile": "screening", "max_samples": "auto", "rounds": "auto", "min_samples": 10},
                      "cuda") == {"profile": "screening", "max_samples": 100, "rounds": 10, "min_samples": 10}
    assert for_device({"profile": "screening", "max_samples": 300, "rounds": "auto", "min_samples": 10},
                      "cpu")["max_samples"] == 300
    assert for_device({"profile": "full", "max_samples": "auto", "rounds": "auto", "min_samples": 10},
                      "cuda")["max_samples"] == AUTO_TIMING["cuda"]["max_samples"]
    assert all(SCREENING[d]["max_samples"] < AUTO_TIMING[d]["max_samples"] for d in SCREENING)
    with pytest.raises(BadInput, match="timing.profile must be full or screening"):
        with_overrides(load_config(None), {"timing.profile": "fast"})


def judged(results_dir, names, **overrides) -> dict:
    """The add's pairs with these fixture solutions, under the CPU tests' fast config and `overrides`."""
    cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"),
                         {"results_dir": str(results_dir), "timeouts.run_s": 30, **overrides})
    problem = problem_from_path(ADD_PROBLEM)
    pairs = [Pair(problem, solution_from_path(FIXTURE_SOLUTIONS / f"{n}.py")) for n in names]
    return {r.solution["name"]: r for r in evaluate(pairs, cfg, run_id="run", out=lambda line: None)}


@pytest.fixture(scope="module")
def screened(tmp_path_factory):
    return judged(tmp_path_factory.mktemp("results"), ("cpp_wrong", "cpp_ok"), **{
        "timing.profile": "screening", "timing.max_samples": "auto", "timing.rounds": "auto", "timing.max_time_s": 10.0})


def test_a_wrong_solution_is_judged_as_before_and_not_timed(screened):
    r = screened["cpp_wrong"]
    assert r.status is Status.INCORRECT and r.phase == "judge"
    assert "elements outside" in r.message and "worst at index" in r.message   # as tests/test_pipeline_cpu.py has it
    assert r.message.endswith("; not timed (timing.profile: screening stops a wrong solution before its timed calls)")
    assert "solution" not in r.timing and r.timing["profile"] == "screening"
    assert r.correctness["checked"]["trials"] >= 2 and r.correctness["checked"]["timed"] == 0


def test_a_correct_solution_is_timed_in_the_screening_rounds(screened):
    r = screened["cpp_ok"]
    assert r.status is Status.OK, r.message
    assert r.timing["profile"] == "screening" and r.timing["speedup"] > 0
    assert r.config["timing"]["rounds"] == SCREENING["cpu"]["rounds"]
    assert 3 <= r.timing["solution"]["samples"] <= SCREENING["cpu"]["max_samples"]


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    return judged(tmp_path_factory.mktemp("results"), ("cpp_wrong", "wrong_then_crash"))


def test_the_full_profile_times_a_wrong_solution_without_the_references_rounds(full):
    r = full["cpp_wrong"]
    assert r.status is Status.INCORRECT and r.phase == "judge"
    assert "elements outside" in r.message and "worst at index" in r.message and "not timed" not in r.message
    assert r.correctness["checked"]["timed_calls"] >= 3 and "solution" in r.timing   # its timed calls ran
    assert r.timing["rounds_skipped"] == "the solution was wrong before its timed calls"
    assert not r.timing["reference"].get("interleaved") and "rounds" not in r.timing["reference"]


def test_a_wrong_solution_that_crashes_in_its_timed_calls_keeps_its_status_in_full(full):
    r = full["wrong_then_crash"]
    assert r.status is Status.RUNTIME_ERROR and r.phase == "timing", r.message
    assert "a crash in the timed calls" in r.message


def test_screening_says_incorrect_for_it(tmp_path):
    r = judged(tmp_path, ("wrong_then_crash",), **{"timing.profile": "screening"})["wrong_then_crash"]
    assert r.status is Status.INCORRECT and r.message.endswith("before its timed calls)")


def test_wrong_rounds_auto_skips():
    assert wrong_rounds_skipped({"wrong_rounds": "auto"})
    assert wrong_rounds_skipped({"wrong_rounds": "skip"}) and not wrong_rounds_skipped({"wrong_rounds": "time"})
    assert load_config(None).timing.wrong_rounds == "auto"
    with pytest.raises(BadInput, match="timing.wrong_rounds must be auto, skip or time"):
        with_overrides(load_config(None), {"timing.wrong_rounds": "never"})


def test_wrong_rounds_time_keeps_the_references_rounds(tmp_path):
    r = judged(tmp_path, ("cpp_wrong",), **{"timing.wrong_rounds": "time"})["cpp_wrong"]
    assert r.status is Status.INCORRECT and "rounds_skipped" not in r.timing
    assert r.timing["reference"].get("interleaved") and r.timing["reference"]["rounds"]
