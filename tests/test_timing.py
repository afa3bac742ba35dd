import time

from harness.verdict.timing import HostTimer, StoppingRule, sample, summarize


def test_summary_median_and_iqr():
    s = summarize([5.0, 1.0, 3.0, 2.0, 4.0], "host")
    assert s.median_ms == 3.0 and s.q1_ms == 2.0 and s.q3_ms == 4.0 and s.iqr_ms == 2.0
    assert (s.min_ms, s.max_ms, s.samples) == (1.0, 5.0, 5)
    assert summarize([7.0], "host").iqr_ms == 0.0


def test_stopping_rule():
    rule = StoppingRule(min_samples=5, max_samples=10, min_time_s=1.0, max_time_s=3.0)
    assert not rule.done(4, 10.0, 0.1)         # too few samples
    assert not rule.done(5, 0.5, 0.5)          # too little measured time
    assert rule.done(5, 1.0, 1.0)
    assert rule.done(10, 0.0, 0.0)             # max samples
    assert rule.done(3, 0.0, 3.5)              # wall-clock cap once 3 samples exist
    assert not rule.done(2, 0.0, 3.5)


def test_sample_runs_warmup_then_stops():
    calls = []
    rule = StoppingRule(min_samples=4, max_samples=4, min_time_s=0.0, max_time_s=10.0)
    samples = sample(lambda: calls.append(1), HostTimer(), rule, warmup=2)
    assert len(samples) == 4 and len(calls) == 6


def test_host_timer_measures():
    ms = HostTimer()(lambda: time.sleep(0.02))
    assert 15.0 <= ms <= 200.0


def test_timing_consistency_rule():
    from harness.verdict.guards import timing_consistent
    assert timing_consistent(1.00, 1.02) and timing_consistent(0.025, 0.045)
    assert not timing_consistent(0.001, 0.04)       # patched event timer on a tiny kernel
    assert not timing_consistent(0.5, 5.0)          # work the events did not see


def test_planned_samples_follow_the_rule_for_the_calls_time():
    from harness.verdict.timing import per_round, planned_samples
    rule = StoppingRule(min_samples=10, max_samples=100, min_time_s=0.5, max_time_s=10.0)
    assert planned_samples(rule, 5.0) == 100          # 0.5 s of 5 ms calls, capped at max_samples
    assert planned_samples(rule, 20.0) == 25          # 0.5 s of 20 ms calls
    assert planned_samples(rule, 200.0) == 10         # min_samples
    assert planned_samples(rule, 4000.0) == 3         # max_time_s allows 2; at least 3
    assert per_round(100, 10) == (10, 10) and per_round(25, 10) == (10, 3) and per_round(3, 10) == (3, 1)


def test_the_ratio_interval_covers_the_truth_and_narrows_with_steady_rounds():
    import random

    from harness.verdict.timing import ratio_interval, speedup_change_interval
    rng = random.Random(1)
    rounds = lambda ms, spread: [[ms * (1 + rng.gauss(0, spread)) for _ in range(10)] for _ in range(10)]  # noqa: E731
    lo, hi = ratio_interval(rounds(2.0, 0.02), rounds(1.0, 0.02), 0.95)
    assert lo < 2.0 < hi and hi - lo < 0.05
    wide = ratio_interval(rounds(2.0, 0.3), rounds(1.0, 0.3), 0.95)
    assert wide[1] - wide[0] > 5 * (hi - lo)
    # drift shared by a round (the machine slowed both) cancels: rounds are resampled in pairs
    drift = [1 + 0.3 * (i % 2) for i in range(10)]
    ref = [[2.0 * d] * 10 for d in drift]
    sol = [[1.0 * d] * 10 for d in drift]
    assert ratio_interval(ref, sol, 0.95) == (2.0, 2.0)
    lo, hi = speedup_change_interval((rounds(2.0, 0.02), rounds(1.1, 0.02)), (rounds(2.0, 0.02), rounds(1.0, 0.02)),
                                     0.95)
    assert 0.87 < lo < hi < 0.95  # 10% slower: the whole interval below 0.95


def test_moving_the_inputs_gives_new_memory_each_block_keeps_values_and_holds_what_it_left():
    """timing.move_inputs: before each block the timed inputs move to newly allocated memory (the
    memory a process holds can be slow or fast for the whole run; moved, each round draws its
    own), their values and strides kept; the memory left stays held, so the next allocation
    cannot hand the same pages back, up to HOLD_BYTES (the oldest let go first)."""
    import torch
    from harness.verdict.timing import InputPool, moves_inputs
    sets = [[torch.randn(4, 256), torch.randn(256, 4).t(), 3], [torch.randn(4, 256), torch.randn(256, 4).t(), 3]]
    pool = InputPool(sets, [11, 12])
    seen = {pool.live[0].data_ptr()}
    for block in range(5):
        before = [x.clone() if isinstance(x, torch.Tensor) else x for x in pool.live]
        pool.move()
        assert pool.live[0].data_ptr() not in seen and pool.live[1].data_ptr() not in seen
        seen |= {pool.live[0].data_ptr(), pool.live[1].data_ptr()}
        assert torch.equal(pool.live[0], before[0]) and torch.equal(pool.live[1], before[1]) and pool.live[2] == 3
        assert pool.live[1].stride() == sets[0][1].stride()
        assert pool.refresh() == 12 - block % 2 * 1 and torch.equal(pool.live[0], sets[1 - block % 2][0])
    assert len(pool.held) == 5
    small = InputPool(sets)
    small.HOLD_BYTES = 3 * 2 * 4 * 256 * 4   # three moves' worth of two 4 KiB tensors
    for _ in range(6):
        small.move()
    assert len(small.held) == 3
    assert moves_inputs("auto", "cpu") and not moves_inputs("auto", "cuda")
    assert moves_inputs("on", "cuda") and not moves_inputs("off", "cpu")
