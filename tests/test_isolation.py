import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import REPO_ROOT
from harness.isolate.isolation import child_env, run_module


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


def _alive(pid: int) -> bool:
    """Running (a zombie, killed but not yet reaped by whoever inherited it, counts as dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux only")
def test_child_dies_with_a_killed_harness(tmp_path):
    # the harness process (here a bare python running run_module) is SIGKILLed while its child
    # hangs; the child runs in its own session, so only die_with_parent() can take it down
    code = ("from harness.isolate.isolation import run_module; "
            f"run_module('tests.fixtures.child', {{'action': 'hang'}}, {str(tmp_path)!r}, limit_s=120)")
    harness_proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT, env=child_env())
    pid_file = tmp_path / "child.pid"
    pid = None
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        pid = int(pid_file.read_text())
        assert _alive(pid)
        harness_proc.kill()
        harness_proc.wait()
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid), "the child outlived the harness process that started it"
    finally:
        harness_proc.kill()
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGKILL)
