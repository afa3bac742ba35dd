"""Checked and timed calls that look the same (issue 45): every timed call hands its output to
the lane, which judges a sample it drew in secret (harness/verdict/sample.py TimedSample). Fixtures that
compute only when they believe a call is checked (a call counter, the gap between calls, input
pointers and versions, Python's GC, the allocator, the stream, a mix) all fail; an honest one
passes; the sample is uniform and has the size the config asks for."""
import collections

import pytest
import torch

from harness.core.config import load_config, with_overrides
from harness.verdict.judge import Taken, TimedSample
from harness.core.problems import problem_from_path
from harness.core.results import Status
from harness.run.runner import evaluate
from harness.core.solutions import Pair, solution_from_path
from conftest import ADD_PROBLEM, FIXTURES, FIXTURE_SOLUTIONS

BELIEVERS = ["cheat_believes_counter", "cheat_believes_gap", "cheat_believes_inputs", "cheat_believes_gc",
             "cheat_believes_allocator", "cheat_believes_stream", "cheat_believes_mix"]


def _feed(sample, taken, view) -> bool:
    """What the lane does with one timed output: draw, and take it only where the sample keeps it."""
    slot = sample.draw()
    if slot is not None:
        sample.store(taken, view, slot)
    return slot is not None


def test_the_sample_is_uniform_over_the_calls_and_has_k_of_them():
    counts = collections.Counter()
    view = torch.zeros(4)
    for _ in range(3000):
        sample = TimedSample(6)
        for n in range(1, 21):
            _feed(sample, Taken({"kind": "timed", "trial": n, "seed": 0, "shape": 0}), view)
        assert len(sample.kept) == 6 and len(sample.buffers) == 6 and sample.seen == 20
        counts.update(t.entry["trial"] for t in sample.kept.values())
    expected = 3000 * 6 / 20
    assert all(abs(counts[n] - expected) < 0.15 * expected for n in range(1, 21)), counts  # 900 +- 135


def test_only_kept_calls_are_taken_and_a_kept_call_holds_its_own_output():
    """Call i is kept with chance k/i (the first k always); one not kept is not taken at all."""
    sample = TimedSample(2)
    view = torch.arange(4.0)
    taken_calls = []
    for n in range(1, 9):
        taken = Taken({"kind": "timed", "trial": n, "seed": 0, "shape": 0}, inputs=[view])
        if _feed(sample, taken, view * n):
            taken_calls.append(n)
    assert taken_calls[:2] == [1, 2] and len(sample.buffers) == 2 and len(sample.kept) == 2
    for taken in sample.kept.values():
        assert torch.equal(taken.out, view * taken.entry["trial"]) and taken.inputs == []


def test_a_reference_workers_sample_draws_alike_and_keeps_nothing():
    sample = TimedSample(6, keep=False)
    view = torch.ones(3)
    drawn = sum(_feed(sample, Taken({"kind": "timed", "trial": n, "seed": 0, "shape": 0}), view) for n in range(1, 41))
    assert drawn >= 6 and not sample.kept and len(sample.buffers) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_a_cpu_lanes_sample_is_kept_in_files_and_read_back_exactly(tmp_path, dtype):
    """A CPU lane keeps the k buffers as files (an output of hundreds of MB times 7 took the
    memory problem 69's float64 truth needed): a kept call's output comes back bit for bit when
    it is judged; release removes them."""
    sample = TimedSample(3, spill_dir=tmp_path / "sample")
    outputs = {}
    for n in range(1, 11):
        taken = Taken({"kind": "timed", "trial": n, "seed": 0, "shape": 0}, inputs=[torch.zeros(2)])
        out = (torch.randn(5, 7, dtype=torch.float64) * n).to(dtype)
        outputs[n] = out
        _feed(sample, taken, out)
        assert taken.inputs == [] or taken not in sample.kept.values()
    files = sorted((tmp_path / "sample").iterdir())
    assert len(files) == 3 and {f.stat().st_size for f in files} == {35 * out.element_size()}
    assert len(sample.kept) == 3
    for taken in sample.kept.values():
        assert taken.out is None
        assert torch.equal(sample.output_of(taken), outputs[taken.entry["trial"]])
    sample.release()
    assert not list((tmp_path / "sample").iterdir())


def _run(tmp_path, names, **overrides):
    cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"),
                         {"results_dir": str(tmp_path), "timing.min_samples": 16, "timing.max_samples": 20,
                          "timing.rounds": 4, **overrides})
    problem = problem_from_path(ADD_PROBLEM)
    pairs = [Pair(problem, solution_from_path(FIXTURE_SOLUTIONS / f"{n}.py")) for n in names]
    return {r.solution["name"]: r for r in evaluate(pairs, cfg, run_id="timed-checks", out=lambda line: None)}


def test_a_solution_that_computes_only_when_it_believes_it_is_checked_fails(tmp_path):
    """Every timed call checked (a sample as large as the calls): each believer returns a stale
    output on about half of them and is caught; the honest solution passes, every timed call of
    its handed over and the checked ones named in its result. A believer is caught by a timed
    call's check or by the profiled call's, which is judged like any other: which one reports a
    believer first depends on the signal it reads (CI's VM once reported the gap believer, whose
    signal is wall-clock gaps, at the profiled call). Either way a call it could not tell from
    an unchecked one."""
    got = _run(tmp_path, BELIEVERS + ["cpp_ok"], **{"checks.timed_output_checks": 100,
                                                     "checks.secret_timed_checks": "on"})
    for name in BELIEVERS:
        assert got[name].status is Status.INCORRECT, (name, got[name].message)
        assert got[name].message.startswith(("timed ", "the profiled call ")), (name, got[name].message)
    assert sum(got[name].message.startswith("timed ") for name in BELIEVERS) >= len(BELIEVERS) - 1
    honest = got["cpp_ok"]
    assert honest.status is Status.OK, honest.message
    checked = honest.correctness["checked"]
    assert checked["timed"] == checked["timed_calls"] >= 17 and "in secret" in checked["timed_rule"]


def test_the_default_sample_is_six_calls_drawn_in_secret_and_off_keeps_the_trailing_checks(tmp_path):
    got = _run(tmp_path, ["cpp_ok"])
    checked = got["cpp_ok"].correctness["checked"]
    assert checked["timed"] == 6 and checked["timed_calls"] >= 17, checked
    got = _run(tmp_path / "off", ["cpp_ok"], **{"checks.secret_timed_checks": "off"})
    checked = got["cpp_ok"].correctness["checked"]
    assert checked["timed"] == 6 and "timed_calls" not in checked and "last" in checked["timed_rule"], checked


@pytest.mark.gpu
def test_the_believers_fail_on_a_cuda_run(tmp_path):
    got = _run(tmp_path, BELIEVERS + ["cpp_ok"], device="cuda",
               **{"checks.timed_output_checks": 100, "checks.secret_timed_checks": "on"})
    for name in BELIEVERS:
        assert got[name].status is Status.INCORRECT, (name, got[name].message)
