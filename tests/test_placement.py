"""The timed workers' CPU (harness/run/placement.py): which CPU a lane takes, pinning every thread of
another process, finding a thread that left, the sandbox's refusal to move, and a solution that
tries to move off the timing CPU."""
import os
import subprocess
import sys
import textwrap

import pytest

from harness import REPO_ROOT
from harness.run import placement
from harness.core.config import load_config, with_overrides
from harness.core.problems import problem_from_path
from harness.core.results import Status
from harness.run.runner import evaluate
from harness.core.solutions import Pair, solution_from_path
from conftest import ADD_PROBLEM, FIXTURES, FIXTURE_SOLUTIONS

two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")


@pytest.fixture
def own_claims(tmp_path, monkeypatch):
    """placement's claims made in a folder of the test's own, none held yet."""
    monkeypatch.setattr(placement, "LOCK_DIR", str(tmp_path))
    monkeypatch.setattr(placement, "_held", {})
    return tmp_path


def test_a_lane_takes_one_cpu_from_the_top(own_claims):
    cpus = frozenset(range(16))
    assert placement.timing_cpus("auto", "cuda", 0, cpus) == {15}
    assert placement.timing_cpus("auto", "cuda", 2, cpus) == {13}   # lanes on one host: one CPU each
    assert placement.timing_cpus("on", "cpu", 0, cpus) == {15}      # the lane's claim, held
    assert placement.timing_cpus("auto", "cpu", 0, cpus) is None    # a CPU lane's torch uses several CPUs
    assert placement.timing_cpus("off", "cuda", 0, cpus) is None
    assert placement.timing_cpus("on", "cuda", 0, frozenset({3})) is None   # nothing to keep apart


def test_runs_side_by_side_on_one_host_take_different_timing_cpus(own_claims):
    """Another harness run on the host (here a process holding CPU 15's claim, as its lane 0 does)
    has the top CPU: this run's lane 0 takes the next one down, its lane 1 the one below; once the
    other run has ended, a new run's lane 0 takes the top again. Where every CPU is claimed, lane i
    shares the i-th from the top, as before the claims."""
    cpus = frozenset(range(16))
    code = ("import sys, time; sys.path.insert(0, %r); from harness.run import placement; "
            "placement.LOCK_DIR = %r; print(placement.claim(list(range(16)), 0), flush=True); time.sleep(60)"
            % (str(REPO_ROOT), str(own_claims)))
    other = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "15"
        assert placement.timing_cpus("auto", "cuda", 0, cpus) == {14}
        assert placement.timing_cpus("auto", "cuda", 1, cpus) == {13}
        assert placement.timing_cpus("auto", "cuda", 0, cpus) == {14}      # held: the same CPU again
    finally:
        other.kill()
        other.wait()
    for _, fd in placement._held.values():   # a new run: this run's claims let go, as its end would
        os.close(fd)
    placement._held.clear()
    assert placement.claim(list(range(16)), 0) == 15
    full = [placement.claim([0, 1], i) for i in range(3)]
    assert full == [1, 0, 1]                                            # all claimed: lane 2 shares the top


def test_builds_leave_the_lanes_timing_cpus_to_them(own_claims):
    """build.yield_to_lanes: where lanes pin, the builds keep off the top CPU of each lane and off
    any CPU another run's lane holds; looking does not take a claim (a lane claiming at that moment
    still gets its CPU). Nothing is kept off where no lane pins."""
    cpus = frozenset(range(16))
    assert placement.build_cpus("on", "auto", "cuda", 1, cpus) == frozenset(range(15))
    assert placement.build_cpus("on", "auto", "cuda", 2, cpus) == frozenset(range(14))
    assert placement.build_cpus("on", "on", "cpu", 1, cpus) == frozenset(range(15))
    assert placement.build_cpus("auto", "on", "cpu", 1, cpus) == frozenset(range(15))
    assert placement.build_cpus("auto", "auto", "cuda", 1, cpus) == frozenset(range(15))
    assert placement.build_cpus("on", "auto", "cpu", 1, cpus) is None         # a CPU lane does not pin
    assert placement.build_cpus("on", "off", "cuda", 1, cpus) is None
    assert placement.build_cpus("off", "on", "cuda", 1, cpus) is None
    assert placement.build_cpus("on", "on", "cuda", 2, frozenset({0, 1})) is None   # nothing would be left
    code = ("import sys, time; sys.path.insert(0, %r); from harness.run import placement; "
            "placement.LOCK_DIR = %r; print(placement.claim(list(range(16)), 3), flush=True); time.sleep(60)"
            % (str(REPO_ROOT), str(own_claims)))
    other = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "12"          # another run's lane 3
        assert placement.build_cpus("on", "on", "cuda", 1, cpus) == frozenset(range(15)) - {12}
        assert placement.claimed(12) and not placement.claimed(15) and not placement._held
        assert placement.timing_cpus("on", "cuda", 0, cpus) == {15}   # looked at, not taken
    finally:
        other.kill()
        other.wait()


@two_cpus
def test_a_build_thread_and_what_it_starts_keep_off_the_timing_cpu(own_claims):
    """Lanes.build sets its thread's CPUs and priority (nice 10) before the build step: the processes
    the step starts (the build step, the compile step, the compilers) inherit them; the caller's other
    threads keep theirs."""
    import threading
    from types import SimpleNamespace
    from harness.run.laneproc import Lanes
    cfg = with_overrides(load_config(None), {"timing": {"pin_cpu": "on"}, "build": {"yield_to_lanes": "on"}})
    child = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)), os.getpriority(os.PRIO_PROCESS, 0))"]
    run = SimpleNamespace(ctx=SimpleNamespace(cfg=cfg, device="cpu", stagger=False),  # build.stagger auto: off on the CPU
                          run_build=lambda: subprocess.run(child, capture_output=True, text=True).stdout.strip())
    seen = []
    thread = threading.Thread(target=lambda: seen.append(Lanes.build(SimpleNamespace(all=[object()]), run)))
    thread.start()
    thread.join()
    mine, nice = sorted(os.sched_getaffinity(0)), os.getpriority(os.PRIO_PROCESS, 0)
    assert seen == [f"{mine[:-1]} {max(nice, 10)}"] and len(mine) >= 2
    off = with_overrides(cfg, {"build": {"yield_to_lanes": "off"}})
    run.ctx.cfg = off
    thread = threading.Thread(target=lambda: seen.append(Lanes.build(SimpleNamespace(all=[object()]), run)))
    thread.start()
    thread.join()
    assert seen[1] == f"{mine} {nice}"


@two_cpus
def test_every_thread_of_a_process_is_pinned_and_a_stray_is_found():
    code = "import threading, time; [threading.Thread(target=time.sleep, args=(5,)).start() for _ in range(3)]; time.sleep(5)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        import time
        time.sleep(0.5)
        cpus = frozenset({max(os.sched_getaffinity(0))})
        assert placement.pin(proc.pid, cpus) == 4
        assert placement.strays(proc.pid, cpus) == []
        tid = int(os.listdir(f"/proc/{proc.pid}/task")[-1])
        os.sched_setaffinity(tid, os.sched_getaffinity(0))
        assert placement.strays(proc.pid, cpus) == [tid]
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(sys.platform != "linux" or os.uname().machine not in ("x86_64", "aarch64"), reason="Linux seccomp")
def test_the_sandbox_refuses_a_worker_to_move_itself_and_the_lane_still_can():
    code = textwrap.dedent("""
        import os, sys, time
        sys.path.insert(0, sys.argv[1])
        from harness.isolate import jail
        print(jail._refuse_affinity(), flush=True)
        try:
            os.sched_setaffinity(0, os.sched_getaffinity(0))
            print("moved", flush=True)
        except PermissionError:
            print("refused", flush=True)
        sys.stdin.readline()
        print(sorted(os.sched_getaffinity(0)), flush=True)
        """)
    proc = subprocess.Popen([sys.executable, "-c", code, str(REPO_ROOT)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "seccomp (sched_setaffinity refused)"
        assert proc.stdout.readline().strip() == "refused"
        mine = max(os.sched_getaffinity(0))
        placement.pin(proc.pid, frozenset({mine}))   # from outside the filter
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == str([mine])
    finally:
        proc.kill()
        proc.wait()


@two_cpus
@pytest.mark.parametrize("sandbox", ["auto", "off"])
def test_a_solution_that_moves_off_the_timing_cpu_is_caught(tmp_path, sandbox):
    """With the sandbox the move is refused (seccomp) and the pair is timed where it should be;
    without it the lane finds the thread elsewhere after a block and rejects the pair."""
    cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"),
                         {"results_dir": str(tmp_path), "sandbox": sandbox, "timing.pin_cpu": "on"})
    pair = Pair(problem_from_path(ADD_PROBLEM), solution_from_path(FIXTURE_SOLUTIONS / "cheat_unpin.py"))
    r = evaluate([pair], cfg, run_id="unpin", out=lambda line: None)[0]
    assert len(r.timing["pinned_cpus"]) == 1 and set(r.timing["pinned_cpus"]) <= os.sched_getaffinity(0)
    refused = "seccomp (sched_setaffinity refused)" in (r.sandbox or {}).get("active", [])
    if refused:
        assert r.status is Status.OK and "timing_unpinned" not in r.flags, r.message
    else:
        assert sandbox == "off" or not (r.sandbox or {}).get("active"), r.sandbox
        assert r.status is Status.REJECTED and "timing_unpinned" in r.flags and r.timing["unpinned_blocks"] >= 1, r.message


@two_cpus
def test_an_a_a_pair_on_the_cpu_with_pinning_is_timed_on_one_cpu(tmp_path):
    from harness.compile.build import cache_dir_of
    from harness.core.solutions import reference_solution
    from run_eval import reference_dir
    # with the spares still starting left to go on off the timing CPU while it times (auto since
    # the A/A on an H100; the other runs here pin nothing, so their spares stop)
    cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"),
                         {"results_dir": str(tmp_path), "timing.pin_cpu": "on", "timing.priming_spares": "run"})
    problem = problem_from_path(ADD_PROBLEM)
    r = evaluate([Pair(problem, reference_solution(problem, reference_dir(cache_dir_of(cfg))))], cfg, run_id="aa",
                 out=lambda line: None)[0]
    # one CPU: the top one, unless another harness run on this host holds it (placement.claim)
    pinned = r.timing["pinned_cpus"]
    assert r.status is Status.OK and len(pinned) == 1 and set(pinned) <= os.sched_getaffinity(0), r.message
    assert "unpinned_blocks" not in r.timing


@pytest.mark.skipif(sys.platform != "linux", reason="Linux personality")
def test_workers_start_without_address_space_randomization(tmp_path):
    """A pool's workers (sandboxed as configured) start with ADDR_NO_RANDOMIZE; the lane keeps its
    own persona."""
    from harness.run.pool import WorkerPool, kill
    before = placement._personality(placement._QUERY)
    pool = WorkerPool(tmp_path / "workers", {"CUDA_VISIBLE_DEVICES": ""}, size=1)
    try:
        spare = pool.spares[0]
        persona = int(open(f"/proc/{spare.pid}/personality").read(), 16)
        assert persona & placement.ADDR_NO_RANDOMIZE, hex(persona)
        assert placement._personality(placement._QUERY) == before
    finally:
        for spare in pool.spares:
            kill(spare)
        pool.size = 0
    with placement.fixed_layout():
        inside = subprocess.run(["cat", "/proc/self/personality"], capture_output=True, text=True).stdout
    assert int(inside, 16) & placement.ADDR_NO_RANDOMIZE



def _state(pid: int) -> str:
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]


def _threads_seen(spare) -> str:
    """What a failed check of a spare's CPUs saw: its state, each thread's CPUs and name (one run in CI
    found the main thread still on the away CPUs after the thaw had pinned it home; not reproduced)."""
    seen = []
    for tid in os.listdir(f"/proc/{spare.pid}/task"):
        try:
            seen.append(f"{tid} {sorted(os.sched_getaffinity(int(tid)))} {open(f'/proc/{spare.pid}/task/{tid}/comm').read().strip()}")
        except OSError as exc:
            seen.append(f"{tid} {exc}")
    return f"state {_state(spare.pid)}, returncode {spare.proc.poll()}, threads: {'; '.join(seen)}"


def test_priming_spares_auto_runs_them_off_the_timing_cpu_where_the_lane_pins():
    """Lane.priming_cpus: where the spares still starting go while a pair is timed: auto and run, the
    lane's CPUs but the timing one; stop, or a lane that pins nothing, none (every spare stopped)."""
    from types import SimpleNamespace
    from harness.run.lane import Lane
    lane = SimpleNamespace(cpus=frozenset({0, 1, 2, 3}))
    pinned, unpinned = SimpleNamespace(cpus=frozenset({3})), SimpleNamespace(cpus=None)
    where = lambda setting, rounds: Lane.priming_cpus(lane, {"timing": {"priming_spares": setting}}, rounds)  # noqa: E731
    assert where("auto", pinned) == where("run", pinned) == frozenset({0, 1, 2})
    assert where("stop", pinned) is None and where("auto", unpinned) is None and where("auto", None) is None


@pytest.mark.skipif(sys.platform != "linux" or len(os.sched_getaffinity(0)) < 2, reason="Linux, two CPUs")
def test_frozen_spares_stop_or_go_on_off_the_timing_cpu(tmp_path):
    """pool.freeze(): every spare stopped; freeze(away=CPUs) (timing.priming_spares run): a spare
    still starting goes on, on those CPUs only, and back on the lane's at thaw; a ready one stops."""
    import time
    from harness.core.errors import BadInput
    from harness.run.pool import WorkerPool, kill
    assert load_config(None).timing.priming_spares == "auto"
    with pytest.raises(BadInput, match="timing.priming_spares must be auto, stop or run"):
        with_overrides(load_config(None), {"timing.priming_spares": "sometimes"})
    home = os.sched_getaffinity(0)
    away = frozenset({min(home)})
    pool = WorkerPool(tmp_path / "workers", {"CUDA_VISIBLE_DEVICES": ""}, size=2)
    try:
        starting, ready = pool.spares
        ready.state = "ready"                  # as tick() would note it
        pool.freeze(away=away)
        time.sleep(0.2)
        assert starting.away and _state(starting.pid) != "T" and os.sched_getaffinity(starting.pid) == away
        assert not ready.away and _state(ready.pid) == "T"
        pool.thaw()
        time.sleep(0.2)
        assert not starting.away and os.sched_getaffinity(starting.pid) == pool.home, _threads_seen(starting)
        assert _state(starting.pid) != "T" and _state(ready.pid) != "T"
        pool.freeze()
        time.sleep(0.2)
        assert _state(starting.pid) == "T" and not starting.away
        pool.thaw()
    finally:
        pool.size = 0
        for spare in pool.spares:
            kill(spare)
