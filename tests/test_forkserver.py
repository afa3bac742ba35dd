"""Steps started by fork from the fork server (harness/isolate/forkserver.py, build.start: fork)
against steps started by exec: the same process in every way a step can see (identity, network,
descriptors, environment, working directory, the sandbox's report), one thread, the calling
thread's CPUs and priority; killed at its limit with what it started; its orphans reaped; a step
whose server died ends, and the next starts a new server; nothing outlives a harness killed."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from harness import REPO_ROOT
from harness.core.config import load_config
from harness.isolate import isolation, sandbox
from conftest import strays

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the fork server is Linux's")
PLAN = sandbox.prepare(load_config(None)).to_dict()
STEPS = str(REPO_ROOT / "tests" / "fixtures" / "steps")


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def policy_for(where: Path, sandboxed, hidden: list) -> dict | None:
    """The sandbox's policy (None where `sandboxed` is false); "userns": with no identity of its own,
    as a harness that is not root (or limits.user same) starts it: a user namespace mapping the
    current user, with its network namespace."""
    if not sandboxed:
        return None
    policy = sandbox.policy(PLAN, "cpu", scratch=where / "scratch", hidden=hidden)
    if sandboxed == "userns":
        policy["uid"] = policy["gid"] = None
    return policy


def probe(where: Path, start: str, sandboxed, request: dict | None = None, limit_s: float = 60,
          extra: dict | None = None, hidden: list | None = None, on_event=None) -> isolation.Outcome:
    policy = policy_for(where, sandboxed, hidden or [])
    env = {"PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{STEPS}", "KB_TEST_MARKER": "m", **(extra or {})}
    return isolation.run_module("step_probe", request or {}, where, limit_s=limit_s, policy=policy, start=start,
                                env=env, on_event=on_event)


@pytest.fixture(autouse=True)
def own_server():
    yield
    isolation.close_fork_server()


def as_worker(where: Path, start: str, sandboxed, request: dict, extra: dict, hidden: list) -> isolation.Outcome:
    """step_probe started as the pool starts a worker (harness/run/pool.py): the workers' server, the
    fixed memory layout, made dumpable again after its identity change."""
    from harness.core.events import EventReader
    from harness.run import placement
    where.mkdir(parents=True)
    policy = policy_for(where, sandboxed, hidden)
    (where / "request.json").write_text(json.dumps(request))
    request_fd = os.open(where / "request.json", os.O_RDONLY)
    events_fd = os.open(where / "events.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    env = {"PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{STEPS}", "KB_TEST_MARKER": "m", **extra}
    try:
        with open(where / "log", "wb") as log:
            proc = isolation.start_step("step_probe", ["--request-fd", str(request_fd), "--events-fd", str(events_fd)],
                                        policy, env, log, (request_fd, events_fd), start, server="workers",
                                        layout=placement.fixed_layout, dumpable=True)
    finally:
        os.close(request_fd)
        os.close(events_fd)
    rc = proc.wait(60)
    reader = EventReader(where / "events.jsonl")
    reader.poll()
    return isolation.Outcome(rc, None, False, "", list(reader.events), isolation.tail(where / "log"))


@pytest.mark.parametrize("sandboxed", [True, "userns", False], ids=["sandboxed", "userns", "plain"])
@pytest.mark.parametrize("kind", ["step", "worker"])
def test_a_forked_process_is_what_an_exec_one_is(tmp_path, sandboxed, kind):
    if sandboxed and PLAN["mode"] == "off" or sandboxed == "userns" and not sandbox.probe().netns:
        pytest.skip("no sandbox here")
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "secret").write_text("s")
    seen = {}
    for start in ("exec", "fork"):
        run = probe if kind == "step" else as_worker
        out = run(tmp_path / start, start, sandboxed, {"exit": 3},
                  extra={"KB_TEST_HIDDEN": str(hidden / "secret"), "CUDA_VISIBLE_DEVICES": "0"}, hidden=[str(hidden)])
        assert out.returncode == 3, out.log_tail
        assert "step_probe: on stdout" in out.log_tail and "step_probe: on stderr" in out.log_tail
        facts = out.last("facts")
        assert facts, out.log_tail
        text = json.dumps(facts).replace(str(tmp_path / start), "WHERE")
        if facts["uid"] != os.getuid():   # a uid of its own each, as root
            text = text.replace(f"unprivileged uid {facts['uid']}", "unprivileged uid UID")
        seen[start] = {**json.loads(text), "uid": facts["uid"] == os.getuid(), "gid": facts["gid"] == os.getgid(),
                       "pid": None}
    if kind == "worker":
        assert seen["fork"]["personality"] == seen["exec"]["personality"] == "00040000"   # no ASLR, as exec'd
    elif sandboxed and seen["exec"]["uid"] is False:   # a step forked and its uid changed: not dumpable, so its
        assert seen["fork"].pop("personality") is None  # /proc files are root's (stricter than exec'd)
        seen["exec"].pop("personality")
    assert seen["fork"] == seen["exec"]
    # the workers' server sees no device and counts by NVML (forkserver.serve): none of it is a child's
    assert seen["fork"]["cuda_env"] == {"CUDA_VISIBLE_DEVICES": "0", "PYTORCH_NVML_BASED_CUDA_CHECK": None}
    events_fd = int(seen["fork"]["argv"][3])   # --request-fd R --events-fd E (R read and closed by then)
    assert seen["fork"]["threads"] == 1 and seen["fork"]["sid_is_pid"] and seen["fork"]["fds"] == [0, 1, 2, events_fd]
    if sandboxed:
        assert seen["fork"]["report"]["active"] and not seen["fork"]["hidden_readable"]
        assert seen["fork"]["net"] == ["lo"] or not sandbox.probe().netns
        assert seen["fork"]["cwd"] == "WHERE/scratch" and seen["fork"]["tmp"] == "WHERE/scratch"


def test_the_step_has_its_starting_threads_cpus_and_priority(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    got = {}

    def build_thread():
        os.sched_setaffinity(0, cpus[:1])
        os.setpriority(os.PRIO_PROCESS, 0, 10)
        got["out"] = probe(tmp_path, "fork", False)

    thread = threading.Thread(target=build_thread)
    thread.start()
    thread.join()
    facts = got["out"].last("facts")
    assert facts["cpus"] == cpus[:1] and facts["nice"] == 10
    assert os.getpriority(os.PRIO_PROCESS, 0) == 0   # the thread's own, not this one's


def test_a_step_past_its_limit_is_killed_with_what_it_started(tmp_path):
    token = f"kb-fork-test-{uuid.uuid4().hex}"
    assert probe(tmp_path / "first", "fork", False).returncode == 0   # the server started (its import of torch:
    started = time.monotonic()                                         # about 3 s on a GPU host) outside the limit
    out = probe(tmp_path, "fork", False, {"sleep": 60, "grandchild": True}, limit_s=3, extra={"KB_TEST_TOKEN": token})
    assert out.timed_out and out.returncode == -signal.SIGKILL and out.last("grandchild"), out.log_tail
    assert time.monotonic() - started < 20
    assert not alive(out.last("facts")["pid"])
    # its grandchild (a session of its own: out of the step's process group) comes back to a reaping
    # harness, as an exec'd step's does: the next test; here it is still ours to end
    for pid in strays(token):
        os.kill(pid, signal.SIGKILL)


def test_an_orphan_of_a_forked_step_comes_back_and_is_reaped(tmp_path):
    token = f"kb-fork-test-{uuid.uuid4().hex}"
    with isolation.reaping(True):
        out = probe(tmp_path, "fork", False, {"grandchild": True}, extra={"KB_TEST_TOKEN": token})
        assert out.returncode == 0 and out.last("grandchild")
    deadline = time.monotonic() + 10
    while strays(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert strays(token) == []


def test_a_step_whose_server_died_ends_and_the_next_starts_a_new_server(tmp_path):
    got, step = {}, threading.Event()
    thread = threading.Thread(target=lambda: got.update(out=probe(
        tmp_path / "a", "fork", False, {"sleep": 60}, on_event=lambda e: e["event"] == "facts" and step.set())))
    thread.start()
    assert step.wait(60)
    server = isolation.fork_server()._proc
    os.kill(server.pid, signal.SIGKILL)
    thread.join(30)
    assert not thread.is_alive() and got["out"].returncode == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while alive(got["out"].last("facts")["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(got["out"].last("facts")["pid"])   # its parent-death signal
    while os.path.exists(f"/proc/{server.pid}") and time.monotonic() < deadline:   # (not polled here: a poll reaps)
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{server.pid}") and server.returncode == -signal.SIGKILL  # reaped by its reader
    again = probe(tmp_path / "b", "fork", False, {"exit": 0})
    assert again.returncode == 0 and again.last("facts")
    assert isolation.fork_server()._proc.pid != server.pid


DRIVER = """
import sys, time
from pathlib import Path
from harness.isolate import isolation
where = Path(sys.argv[1])
threading = __import__("threading")
threading.Thread(target=lambda: isolation.run_module("step_probe", {"sleep": 120}, where, limit_s=300, start="fork"),
                 daemon=True).start()
time.sleep(300)
"""


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "plain"])
def test_a_forked_worker_runs_torch_on_the_threads_an_exec_one_does(tmp_path, sandboxed):
    """The jail's seccomp filter makes an exec'd import of torch find one core (MKL counts them by
    sched_setaffinity, refused): a forked worker, whose torch the server imported before any
    sandbox, takes the count the server's probe found under the filter (forkserver._match_threads)."""
    if sandboxed and PLAN["mode"] == "off":
        pytest.skip("no sandbox here")
    seen = {}
    for start in ("exec", "fork"):
        out = as_worker(tmp_path / start, start, sandboxed, {"torch": True}, {}, [])
        assert out.returncode == 0, out.log_tail
        seen[start] = out.last("torch")["threads"]
    assert seen["fork"] == seen["exec"], seen
    assert any(line.startswith("at::get_num_threads()") for line in seen["exec"]), seen


def test_nothing_outlives_a_harness_killed(tmp_path):
    token = f"kb-fork-test-{uuid.uuid4().hex}"
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{STEPS}", "KB_TEST_TOKEN": token}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path)], env=env)
    deadline = time.monotonic() + 60
    # the driver, its server and the step (forked: the server's environment, which has the token)
    while len(strays(token)) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(strays(token)) >= 3
    driver.kill()
    driver.wait()
    deadline = time.monotonic() + 15
    while strays(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert strays(token) == []


def test_build_start_is_checked():
    from harness.core.config import step_start, validate, with_overrides
    from harness.core.errors import BadInput
    assert step_start("auto") == "fork" and step_start("exec") == "exec"
    with pytest.raises(BadInput, match="build.start must be one of auto, fork, exec"):
        validate(with_overrides(load_config(None), {"build.start": "spawn"}))


@pytest.mark.parametrize("state", ["untouched", "started", "guard"])
def test_the_server_refuses_to_fork_once_cuda_was_touched(monkeypatch, state):
    """A device count in the server (torch.cuda.is_available) starts CUDA's driver and arms torch's
    fork guard, so a forked worker's first CUDA call would refuse: the workers' server says so
    instead (forkserver._cuda_touched, read in a forked child where the guard acts); a step, which
    never uses CUDA, is refused only where CUDA started."""
    import types
    from harness.isolate import forkserver
    cuda = types.SimpleNamespace(_is_compiled=lambda: True, is_initialized=lambda: state == "started",
                                 _is_in_bad_fork=lambda: state == "guard")
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    assert forkserver._cuda_touched() == {"untouched": "", "started": "CUDA started",
                                          "guard": "torch's fork guard armed"}[state]
    assert forkserver._cuda_touched(cuda_children=False) == ("CUDA started" if state == "started" else "")
