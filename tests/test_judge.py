"""The lane's comparison out of device memory (harness/verdict/against.py AgainstTruth.compare): once more
with the cached ground truth dropped, then on the host; never the solution's fault."""
from types import SimpleNamespace

import torch

from harness.verdict import against, judge
from harness.verdict.asked import unasked, unjudged_trials


def test_out_of_memory_while_comparing_drops_the_cache_then_compares_on_the_host(monkeypatch):
    calls = []

    def classify(out, truth, dtype, tolerances):
        calls.append(out.device.type)
        if len(calls) < 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB")
        return "fp32", "compared"

    monkeypatch.setattr(against, "classify", classify)
    events = []
    lane = SimpleNamespace(cache=SimpleNamespace(clear=lambda: events.append("cache cleared")),
                           release=lambda force=False: events.append(f"released (force={force})"))
    pj = SimpleNamespace(judge=lane, on_host=0)
    out = truth = torch.zeros(4)
    assert against.AgainstTruth.compare(pj, out, truth, torch.float32, {}) == ("fp32", "compared")
    assert len(calls) == 3 and pj.on_host == 1
    assert events == ["cache cleared", "released (force=True)", "released (force=True)"]


def test_a_comparison_that_fits_is_made_once(monkeypatch):
    monkeypatch.setattr(against, "classify", lambda *a: ("tf32", "once"))
    pj = SimpleNamespace(judge=None, on_host=0)
    assert against.AgainstTruth.compare(pj, torch.zeros(1), torch.zeros(1), torch.float32, {}) == ("tf32", "once")
    assert pj.on_host == 0


# -- the screen of kept timed outputs (PairJudgement.screen) -------------------------------------------
PROBLEM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1)

    def forward(self, x):
        return self.conv(x)

def get_inputs():
    return [torch.randn(2, 8, 12, 10)]

def get_init_inputs():
    return []
'''
TOLERANCES = {"fp32": {"atol": 5.0e-5, "rtol": 5.0e-5, "rel_l2": 1.0e-5},
              "tf32": {"atol": 5.0e-3, "rtol": 5.0e-3, "rel_l2": 3.0e-3}}


def _judgement(tmp_path, trials=(11, 12, 13)):
    import hashlib
    path = tmp_path / "conv_problem.py"
    path.write_text(PROBLEM)
    lane = judge.Judge("cpu", 1 << 28)
    problem = lane.problem(path, hashlib.sha256(PROBLEM.encode()).hexdigest())
    seeds = {"init": 7, "shapes": [{"overrides": {}, "trials": list(trials)}]}
    return lane, problem, seeds


def _taken(pj, kind, trial, seed, out_of):
    inputs = pj.problem.inputs({}, seed)
    model = pj.problem.reference({}, pj.seeds["init"])["model"]
    with torch.no_grad():
        out = out_of(model(*inputs), seed)
    return judge.Taken({"kind": kind, "shape": 0, "trial": trial, "seed": seed}, out=out, inputs=inputs)


def _trials(pj):
    for i, seed in enumerate(pj.seeds["shapes"][0]["trials"]):
        assert pj.judge_output(_taken(pj, "trial", i, seed, lambda o, s: o))["ok"]


def _perturbed(scale):
    def out_of(out, seed):
        g = torch.Generator().manual_seed(seed)
        return out + scale * torch.randn(out.shape, generator=g)
    return out_of


def test_a_right_timed_output_is_settled_by_the_screen_without_a_float64_truth_of_its_own(tmp_path):
    lane, problem, seeds = _judgement(tmp_path)
    pj = lane.begin(problem, seeds, TOLERANCES)
    _trials(pj)
    bound = pj.truths.screen_bound(0)
    assert bound["trials"] == 3 and 0 < bound["max_abs"] < 5e-5 and 0 < bound["rel_l2"] < 1e-5
    computed = pj.truths.computed
    taken = _taken(pj, "timed", 40, 1001, lambda o, s: o)
    assert pj.screen(taken)
    result = pj.results[-1]
    assert result["ok"] and result["precision"] == "fp32" and result["screened"]["against"] == "float32_strict"
    assert pj.truths.computed == computed and pj.screened == 1
    assert pj.report()["truth"]["screened"] == 1 and pj.report()["checked"]["timed"] == 1


def test_the_screen_gives_every_output_the_verdict_and_class_of_its_own_float64_truth(tmp_path):
    """Outputs with errors from far inside the fp32 class to far outside the tf32 class: an output
    the screen settles has the class judge_output gives it; the others go to judge_output."""
    lane, problem, seeds = _judgement(tmp_path)
    screened = lane.begin(problem, seeds, TOLERANCES)
    _trials(screened)
    settled = 0
    for n, scale in enumerate([0.0, 1e-7, 1e-6, 4e-6, 8e-6, 2e-5, 5e-5, 1e-4, 1e-3, 2e-3, 1e-2, 1.0]):
        seed = 2000 + n
        taken = _taken(screened, "timed", n, seed, _perturbed(scale))
        if screened.screen(taken):
            settled += 1
            got = screened.results[-1]
        else:
            got = screened.judge_output(taken)
        alone = lane.begin(problem, seeds, TOLERANCES)
        expected = alone.judge_output(_taken(alone, "timed", n, seed, _perturbed(scale)))
        assert (got["ok"], got["precision"]) == (expected["ok"], expected["precision"]), scale
    assert 8 <= settled < 12  # within the fp32 or the tf32 class: the larger errors go to judge_output


def test_no_screen_without_trials_measured_in_float64_or_for_a_class_set_by_rounding(tmp_path):
    lane, problem, seeds = _judgement(tmp_path, trials=(11,))
    pj = lane.begin(problem, seeds, TOLERANCES)
    _trials(pj)
    assert pj.truths.screen_bound(0) is None  # one trial: no bound
    assert not pj.screen(_taken(pj, "timed", 1, 3001, lambda o, s: o))
    lane, problem, seeds = _judgement(tmp_path)
    rounded = {"tf32": {**TOLERANCES["tf32"], "between": 0.75}}
    pj = lane.begin(problem, seeds, rounded)
    _trials(pj)
    assert not pj.screen(_taken(pj, "timed", 1, 3001, lambda o, s: o))


# -- what the worker says it ran (harness/verdict/asked.py) ---------------------------------------------
def test_an_output_is_refused_unless_its_kind_shape_trial_and_seed_are_what_the_lane_asked_for(tmp_path):
    lane, problem, seeds = _judgement(tmp_path)
    pj = lane.begin(problem, {**seeds, "timing": [501, 502]}, TOLERANCES)
    entry = {"kind": "trial", "shape": 0, "trial": 1, "seed": 12}
    assert unasked(pj.seeds, entry) is None
    assert unasked(pj.seeds, {**entry, "kind": "timed", "seed": 502}) is None
    assert unasked(pj.seeds, {**entry, "kind": "profile", "seed": 501}) is None
    assert "came with seed 13, not the lane's 12" in unasked(pj.seeds, {**entry, "seed": 13})
    assert "trial 3 of shape 0, which the lane did not ask for" in unasked(pj.seeds, {**entry, "trial": 3})
    assert "trial True" in unasked(pj.seeds, {**entry, "trial": True})
    assert "shape 1" in unasked(pj.seeds, {**entry, "shape": 1})
    assert unasked(pj.seeds, {**entry, "kind": "timed", "seed": 777}) is None  # CUDA: each timed call's own seed
    assert "the lane times the benchmark shape" in unasked(pj.seeds, {**entry, "kind": "timed", "shape": 1})
    assert "kind 'extra'" in unasked(pj.seeds, {**entry, "kind": "extra"})
    taken = pj.take_output({**entry, "seed": 13, "output": [{"device": "cpu"}]}, b"", "cpu")
    assert taken.problem and "not the lane's 12" in taken.problem


def test_trial_coverage_is_on_on_every_device_and_off_takes_what_comes(tmp_path):
    from harness.verdict.asked import on_for
    assert on_for({"trial_coverage": "auto"}, "cpu") and on_for({"trial_coverage": "auto"}, "cuda")
    assert on_for({"trial_coverage": "on"}, "cuda") and not on_for({"trial_coverage": "off"}, "cpu")
    lane, problem, seeds = _judgement(tmp_path)
    pj = lane.begin(problem, seeds, TOLERANCES, asked=False)
    assert pj.judge_output(_taken(pj, "trial", 0, 11, lambda o, s: o))["ok"]
    assert pj.report()["ok"]   # trials 1 and 2 never came: off does not ask


def test_a_trial_never_handed_over_fails_the_pair_and_is_named(tmp_path):
    lane, problem, seeds = _judgement(tmp_path)
    pj = lane.begin(problem, seeds, TOLERANCES)
    for i, seed in [(0, 11), (2, 13)]:
        assert pj.judge_output(_taken(pj, "trial", i, seed, lambda o, s: o))["ok"]
    assert unjudged_trials(pj.seeds, pj.results) == [{"shape": 0, "trial": 1, "seed": 12}]
    report = pj.report()
    assert not report["ok"] and report["failed"]["trial"] == 1 and report["failed"]["seed"] == 12
    assert "never handed over (1 of the 3 trials" in report["message"]
    assert pj.judge_output(_taken(pj, "trial", 1, 12, lambda o, s: o))["ok"]
    assert pj.report()["ok"] and pj.report()["checked"]["shapes"] == 1
