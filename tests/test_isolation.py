import time

from harness.isolation import run_module


def run(tmp_path, action, limit_s=10.0, **kw):
    phase_limits = kw.pop("phase_limits", None)
    return run_module("tests.fixtures.child", {"action": action, **kw}, tmp_path, limit_s=limit_s,
                      phase_limits=phase_limits)


def test_clean_run_reports_events(tmp_path):
    out = run(tmp_path, "report")
    assert out.returncode == 0 and not out.timed_out and out.phase == "work"
    assert out.last("done") is not None


def test_segfault_is_reported_with_signal_and_phase(tmp_path):
    out = run(tmp_path, "segv")
    assert out.signal_name == "SIGSEGV" and out.phase == "correctness" and not out.timed_out


def test_hang_is_killed_at_the_limit(tmp_path):
    start = time.monotonic()
    out = run(tmp_path, "hang", limit_s=2.0)
    assert out.timed_out and out.limit_s == 2.0 and out.phase == "correctness"
    assert time.monotonic() - start < 10


def test_build_phase_has_its_own_limit(tmp_path):
    # 3 s in "build" exceeds neither the 5 s build limit nor, since build time is not counted
    # against it, the 2 s limit for the other phases.
    out = run(tmp_path, "slow_build_then_run", limit_s=2.0, build_sleep=3, phase_limits={"build": 5.0})
    assert not out.timed_out and out.last("done") is not None
    out = run(tmp_path, "hang", limit_s=30.0, phase="build", phase_limits={"build": 1.0})
    assert out.timed_out and out.limit_s == 1.0 and out.phase == "build"


def test_nonzero_exit(tmp_path):
    out = run(tmp_path, "exit3")
    assert out.returncode == 3 and out.signal_name is None and out.last("done") is None
