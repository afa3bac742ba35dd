"""More trials for a pair near its class's bound (harness/run/confirm.py, correctness.near_bound):
a kernel right on every draw still passes, with the trials recorded; one wrong on a few draws that
the first checks missed fails on the first near-bound trial that draws one; a kernel far from its
bound runs none. One run of the add on the CPU (and one on CUDA, marked gpu), its secret chosen so
that the first checks miss."""
import pytest

from harness.core.config import load_config, with_overrides
from harness.core.problems import load_module, make_inputs, problem_from_path
from harness.core.results import Status
from harness.core.solutions import Pair, solution_from_path
from harness.run.confirm import trials_for
from harness.run.pipeline import derive_seed, make_seeds
from harness.run.runner import evaluate
from harness.verdict.timing import call_seed
from conftest import ADD_PROBLEM, FIXTURES, FIXTURE_SOLUTIONS


def bad(module, seed: int, device: str) -> bool:
    return float(make_inputs(module, seed, device)[0].flatten()[0]) > 2.0  # near_bound_flaky's wrong draws


def timed_seeds(seeds: dict, device: str, calls: int = 40) -> list[int]:
    """The seeds of the run's timed inputs: the pool's two on the CPU, each call's own on CUDA (fast.yaml
    makes under ten timed calls: warm-up and at most 5 samples)."""
    if device == "cpu":
        return list(seeds["timing"])
    return [seeds["timing"][0]] + [call_seed(seeds["timing"][0], n) for n in range(calls)]


def a_secret_the_first_checks_miss(cfg, device: str) -> int:
    """A secret whose trials and timing inputs are right for near_bound_flaky and one of whose
    near-bound trials is not."""
    module = load_module(ADD_PROBLEM)
    n = trials_for(cfg.to_dict()["correctness"], device)
    for secret in range(200):
        seeds = make_seeds(cfg.seed, secret, [], cfg.correctness.trials, cfg.correctness.extra_shape_trials)
        if any(bad(module, s, device) for s in [*seeds["shapes"][0]["trials"], *timed_seeds(seeds, device)]):
            continue
        if any(bad(module, derive_seed(cfg.seed, secret, "confirm", t), device) for t in range(n)):
            return secret
    raise AssertionError("no secret in 200 (about one in three should do on the CPU, one in seven on CUDA)")


@pytest.fixture(scope="module", params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def run(request, tmp_path_factory):
    """The run on the CPU and on CUDA, the near-bound trials asked for as auto gives them."""
    device = request.param
    cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"),
                         {"device": device, "results_dir": str(tmp_path_factory.mktemp("results")),
                          "correctness.near_bound_trials": 20})
    cfg = with_overrides(cfg, {"secret_seed": a_secret_the_first_checks_miss(cfg, device)})
    add = problem_from_path(ADD_PROBLEM)
    pairs = [Pair(add, solution_from_path(FIXTURE_SOLUTIONS / f"{n}.py"))
             for n in ("near_bound_ok", "near_bound_flaky", "cheat_reference_output")]
    return {r.solution["name"]: r for r in evaluate(pairs, cfg, run_id="near", out=lambda line: None)}


def test_a_kernel_near_its_bound_on_every_draw_passes_with_the_more_trials_recorded(run):
    r = run["near_bound_ok"]
    assert r.status is Status.OK and r.correctness["precision"] == "fp32", r.message
    assert 1.0 < r.correctness["near_bound"]["least_margin"] < 1.5 and r.correctness["near_bound"]["trials"] == 20
    assert r.correctness["checked"]["confirm"] == 20
    assert sum(o["kind"] == "confirm" and o["ok"] for o in r.correctness["outputs"]) == 20
    assert r.phases["confirm_s"] > 0
    assert "; 20 more trials passed, as near its bound (correctness.near_bound)" in r.message


def test_a_kernel_wrong_on_a_draw_the_first_checks_missed_fails_on_a_near_bound_trial(run):
    r = run["near_bound_flaky"]
    assert r.status is Status.INCORRECT, r.message
    assert r.message.startswith("near-bound trial ") and "rel L2" in r.message, r.message
    assert r.correctness["failed"]["kind"] == "confirm"
    first = [o for o in r.correctness["outputs"] if o["kind"] != "confirm"]
    assert first and all(o["ok"] for o in first)  # the run's own checks passed it


def test_a_kernel_far_from_its_bound_runs_no_more_trials(run):
    r = run["cheat_reference_output"]
    assert r.status is Status.OK and r.correctness["min_margin"] > 10
    assert "near_bound" not in r.correctness and "confirm" not in r.correctness["checked"]
    assert "confirm_s" not in r.phases


def test_auto_is_twenty_on_every_device_and_a_number_is_that_number():
    cfg = load_config(None).to_dict()["correctness"]
    assert (trials_for(cfg, "cpu"), trials_for(cfg, "cuda")) == (20, 20)
    assert trials_for({**cfg, "near_bound_trials": 5}, "cuda") == 5
    assert trials_for({**cfg, "near_bound_trials": 0}, "cpu") == 0
