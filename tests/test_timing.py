import time

from harness.timing import HostTimer, StoppingRule, sample, summarize


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
    from harness.guards import timing_consistent
    assert timing_consistent(1.00, 1.02) and timing_consistent(0.025, 0.045)
    assert not timing_consistent(0.001, 0.04)       # patched event timer on a tiny kernel
    assert not timing_consistent(0.5, 5.0)          # work the events did not see
