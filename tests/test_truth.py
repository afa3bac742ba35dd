"""What a lane judges a pair's outputs against (harness/verdict/truth.py Truths): each output's float64
ground truth computed once and then reused from the lane's cache, its cost counted, and the
rounding errors kept per shape told apart from none known."""
import copy
import hashlib

import pytest
import torch

from harness.verdict import judge, truth

PROBLEM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 8)

    def forward(self, x):
        return self.lin(x)

def get_inputs():
    return [torch.randn(4, 16)]

def get_init_inputs():
    return []
'''


def _truths(tmp_path, run="fp32"):
    path = tmp_path / "lin_problem.py"
    path.write_text(PROBLEM)
    lane = judge.Judge("cpu", 1 << 26)
    problem = lane.problem(path, hashlib.sha256(PROBLEM.encode()).hexdigest())
    seeds = {"init": 5, "shapes": [{"overrides": {}, "trials": [1, 2]}]}
    return lane, lane.truths(problem, seeds, run)


def test_a_ground_truth_is_computed_once_per_output_and_then_reused(tmp_path):
    lane, truths = _truths(tmp_path)
    inputs = truths.inputs(0, 1)
    first, precision, dtype = truths.truth(0, 1, inputs)
    assert precision == "float64" and first.dtype == torch.float64 and dtype == torch.float32
    expected = copy.deepcopy(truths.reference(0)["model"]).double()(inputs[0].double())
    assert torch.equal(first, expected)
    again, _, _ = truths.truth(0, 1, truths.inputs(0, 1))
    assert again is first and (truths.computed, truths.cached) == (1, 1) and truths.seconds > 0
    other = lane.truths(truths.problem, truths.seeds)   # another pair of the run: the lane's cache serves it
    assert other.truth(0, 1, inputs)[0] is first and (other.computed, other.cached) == (0, 1)
    truths.truth(0, 2, truths.inputs(0, 2))
    assert truths.computed == 2


def test_time_is_counted_only_where_the_work_ended(tmp_path):
    _, truths = _truths(tmp_path)
    with truths.counted():
        pass
    counted = truths.seconds
    with pytest.raises(RuntimeError):
        with truths.counted():
            raise RuntimeError("the reference failed")
    assert truths.seconds == counted


def test_the_float32_references_own_error_bounds_the_screen_once_two_trials_measured_it(tmp_path):
    _, truths = _truths(tmp_path)
    for seed in (1, 2):
        inputs = truths.inputs(0, seed)
        assert truths.screen_bound(0) is None
        truths.reference_error(0, seed, inputs, truths.truth(0, seed, inputs)[0])
    bound = truths.screen_bound(0)
    errors = [truths.judge.reference_errors[truths.key(0, s)] for s in (1, 2)]
    assert bound["trials"] == 2
    assert bound["max_abs"] == truth.SCREEN_FACTOR * max(e["max_abs"] for e in errors) > 0


def test_rounding_errors_kept_per_shape_are_known_even_where_none_could_be_measured(tmp_path):
    _, truths = _truths(tmp_path)
    numel = truth.SHARED_ROUNDING_NUMEL
    assert truths.shape_rounding(0, numel) == (False, None)
    truths.judge.rounding[truths.key(0, None)] = None      # measured, and nothing came of it
    assert truths.shape_rounding(0, numel) == (True, None)
    assert truths.shape_rounding(0, numel - 1) == (False, None)  # small outputs: kept per seed only
