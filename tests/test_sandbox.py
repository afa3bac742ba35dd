"""The sandbox around solution code (harness/isolate/sandbox.py), on the CPU: each attack of the red team
runs through the real pipeline in a throwaway copy of the repository and ends as the solution's
failure or as harmless, with nothing lost and no process left; the checkout's digest catches an
edit when the sandbox is off; the modes and the policy's pieces on their own."""
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from harness import REPO_ROOT
from harness.isolate import sandbox
from harness.core.config import load_config, with_overrides
from harness.core.errors import BadInput
from conftest import strays

HOST = sandbox.probe()
PLAN = sandbox.prepare(load_config(None))
# as root, the sandbox runs each process as a uid of its own, which must be able to run this Python:
# where a folder on its way is closed to others (a pyenv or conda Python in root's home), it cannot
NO_IDENTITY = HOST.root and PLAN.identity == "same"
FULL = HOST.landlock >= 6 and HOST.netns and sandbox.process_limit_binds(PLAN) and not NO_IDENTITY
needs_full = pytest.mark.skipif(not FULL, reason=f"this host lacks part of the sandbox: {list(PLAN.lacks)}")

ATTACKS = ["sandbox_forger", "sandbox_edit_harness", "sandbox_wipe", "sandbox_peek", "sandbox_kill", "sandbox_connect",
           "sandbox_fork_bomb", "sandbox_big_file", "sandbox_proc_write"]
EXPECTED = {"sandbox_forger": "incorrect", "sandbox_edit_harness": "ok", "sandbox_wipe": "ok", "sandbox_peek": "ok",
            "sandbox_kill": "ok", "sandbox_connect": "ok", "sandbox_fork_bomb": "runtime_error",
            "sandbox_big_file": "runtime_error", "sandbox_proc_write": "ok"}
DRIVER = """
import json, sys
from harness.core.config import load_config, with_overrides
from harness.core.problems import problem_from_path
from harness.run.runner import evaluate
from harness.core.solutions import Pair, solution_from_path
config, results_dir, overrides, *paths = sys.argv[1:]
problem = problem_from_path("problems/examples/elementwise_add.py")
cfg = with_overrides(load_config(config), {"results_dir": results_dir, **json.loads(overrides)})
lines = []
results = evaluate([Pair(problem, solution_from_path(p)) for p in paths], cfg, run_id="attacks", out=lines.append)
print(json.dumps({"lines": lines, "results": {r.solution["name"]: {
    "status": r.status.value, "message": r.message, "sandbox": r.sandbox, "flags": list(r.flags),
    "vouch": (r.timing or {}).get("vouch"), "unpinned": (r.timing or {}).get("unpinned_blocks")} for r in results}}))
"""


def copy_repository(where: Path) -> Path:
    repo = where / "repo"
    for name in ("harness", "problems", "configs", "run_eval.py", "tests/fixtures", "solutions/examples"):
        source = REPO_ROOT / name
        (shutil.copytree if source.is_dir() else shutil.copyfile)(source, repo / name)
    return repo


def digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def attack(where: Path, device: str, processes: int, start: str = "auto") -> dict:
    """The red team through the real pipeline (the run's own driver) in a throwaway copy."""
    repo = copy_repository(where)
    results_dir = where / "results"
    before = digest(repo)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.5)
    accepted: list[bytes] = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
                accepted.append(conn.recv(100))
                conn.close()
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    token = f"kb-sandbox-test-{uuid.uuid4().hex}"
    env = {**os.environ, "PYTHONPATH": str(repo), "KB_TEST_RESULTS": str(results_dir), "KB_TEST_BIG_MB": "32",
           "KB_TEST_PORT": str(listener.getsockname()[1]), "KB_TEST_TOKEN": token}
    overrides = json.dumps({"limits.processes": processes, "limits.file_size_mb": 16, "device": device,
                            "build.start": start})
    paths = [str(repo / "tests" / "fixtures" / "solutions" / f"{name}.py") for name in ATTACKS]
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(repo / "tests/fixtures/configs/fast.yaml"), str(results_dir),
                           overrides, *paths], cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ran = json.loads(proc.stdout.strip().splitlines()[-1])
    time.sleep(3)  # a forger that outlived its pair would have rewritten its verdict by now
    stop.set()
    thread.join()
    listener.close()
    stored = {json.loads(p.read_text())["solution"]["name"]: json.loads(p.read_text())["status"]
              for p in (results_dir / "attacks").glob("*.json") if p.name != "run.json"}
    return {"ran": ran, "results": ran["results"], "stored": stored, "accepted": accepted, "repo": repo,
            "before": before, "after": digest(repo), "strays": strays(token), "processes": processes}


@pytest.fixture(scope="module", params=["fork", "exec"])
def attacked(tmp_path_factory, request):
    """The red team with its build steps forked by the fork server and exec'd (build.start)."""
    return attack(tmp_path_factory.mktemp("sandbox"), "cpu", 64, request.param)


@needs_full
def test_every_attack_ends_as_the_solutions_failure_or_harmless(attacked):
    check_verdicts(attacked)


def check_verdicts(attacked: dict) -> None:
    got = {name: r["status"] for name, r in attacked["results"].items()}
    # each difference in full (pytest folds a long dict): its message, flags and the lane's judgement of its times
    assert got == EXPECTED, "\n".join(
        f"{name}: {got.get(name)} (expected {want}): {r.get('message')}; flags {r.get('flags')}; "
        f"vouch {r.get('vouch')}; unpinned {r.get('unpinned')}"
        for name, want in EXPECTED.items() if got.get(name) != want for r in [attacked["results"].get(name) or {}])
    assert f"limits.processes = {attacked['processes']}" in attacked["results"]["sandbox_fork_bomb"]["message"]
    assert "limits.file_size_mb = 16" in attacked["results"]["sandbox_big_file"]["message"]
    for result in attacked["results"].values():
        active = " ".join(result["sandbox"]["active"])
        assert result["sandbox"]["mode"] == "auto" and "landlock-fs (ABI" in active, result["sandbox"]
        assert "network namespace" in active and (os.getuid() != 0 or "unprivileged uid" in active), result["sandbox"]


@needs_full
def test_the_verdict_stays_as_judged_and_nothing_outlives_its_pair(attacked):
    assert attacked["stored"]["sandbox_forger"] == "incorrect"   # the forger could not reach it
    assert attacked["stored"] == {k: v["status"] for k, v in attacked["results"].items()}
    assert attacked["strays"] == []                              # the forger, the fork bomb's sleepers: gone


@needs_full
def test_the_checkout_is_read_only_and_survives_a_wipe(attacked):
    assert attacked["after"] == attacked["before"]               # harness files, fixtures, problems: unchanged
    assert not (attacked["repo"] / "planted_by_solution.txt").exists()


@needs_full
def test_no_network_and_no_signal_to_the_lane_or_the_runner(attacked):
    assert attacked["accepted"] == []
    assert not any("died" in line for line in attacked["ran"]["lines"]), attacked["ran"]["lines"]


def test_an_edit_of_the_harness_is_a_harness_error_for_the_run_when_the_sandbox_is_off(tmp_path):
    repo = copy_repository(tmp_path)
    results = tmp_path / "results"
    proc = subprocess.run([sys.executable, "run_eval.py", "--problem", "elementwise_add", "--solution",
                           str(repo / "tests/fixtures/solutions/sandbox_edit_harness.py"), "--config",
                           str(repo / "tests/fixtures/configs/fast.yaml"), "--set", "sandbox=off", "--results-dir",
                           str(results), "--run-id", "edited"], cwd=repo, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(repo)})
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "the checkout changed during the run" in proc.stderr and "harness/verdict/numerics.py" in proc.stderr
    manifest = json.loads((results / "edited" / "run.json").read_text())
    assert manifest["checkout_changed"] == ["harness/verdict/judge.py", "harness/verdict/numerics.py"]
    assert (results / "edited" / "elementwise_add__sandbox_edit_harness.json").is_file()  # nothing lost


def test_required_refuses_a_host_that_lacks_part_of_it(monkeypatch):
    monkeypatch.setattr(sandbox, "probe", lambda: sandbox.Host(landlock=3, unshare=None))
    cfg = load_config(None)
    with pytest.raises(sandbox.SandboxError, match="Landlock ABI 6 .*a network namespace"):
        sandbox.prepare(with_overrides(cfg, {"sandbox": "required"}))
    plan = sandbox.prepare(cfg)
    lines = []
    sandbox.check_mode(plan, [], lines.append)
    assert len(lines) == 1 and lines[0].startswith("warning: sandbox: auto; running without Landlock ABI 6")
    sandbox.check_mode(sandbox.prepare(with_overrides(cfg, {"sandbox": "off"})), [], lines.append)
    assert len(lines) == 1


def test_the_config_names_a_bad_mode_or_limit():
    with pytest.raises(BadInput, match="sandbox must be one of auto, required, off"):
        with_overrides(load_config(None), {"sandbox": "sometimes"})
    with pytest.raises(BadInput, match="limits.processes"):
        with_overrides(load_config(None), {"limits.processes": 0})


def test_everything_but_the_hidden_folders_is_read(tmp_path):
    (tmp_path / "results" / "run").mkdir(parents=True)
    (tmp_path / "checkout").mkdir()
    (tmp_path / "note.txt").write_text("x")
    (tmp_path / "current").symlink_to(tmp_path)              # a way around: pytest's own pytest-current is one
    (tmp_path / "elsewhere").symlink_to(tmp_path / "checkout")
    full, partial = sandbox.readable_cover([str(tmp_path / "results")])
    assert str(tmp_path / "current") not in full and str(tmp_path / "elsewhere") in full
    assert str(tmp_path / "checkout") in full and str(tmp_path / "note.txt") in full
    assert str(tmp_path) in partial and "/" in partial                     # listed on the way, not read
    assert not any(p == str(tmp_path / "results") or p.startswith(str(tmp_path / "results") + "/")
                   for p in full + partial)


def test_a_limit_is_named_by_its_config_key():
    limits = {"processes": 64, "open_files": 128, "file_size_mb": 16}
    assert "limits.file_size_mb = 16" in sandbox.limit_message(OSError(27, "File too large"), limits)
    assert "limits.open_files = 128" in sandbox.limit_message(OSError(24, "Too many open files"), limits)
    assert "limits.processes = 64" in sandbox.limit_message(BlockingIOError(11, "Resource temporarily unavailable"),
                                                            limits)
    assert sandbox.limit_message(OSError(2, "No such file"), limits) is None
    assert sandbox.limit_message(OSError(27, "File too large"), None) is None


@pytest.mark.gpu
def test_the_red_team_on_a_cuda_run(tmp_path_factory):
    """The same attacks on a CUDA run: the workers start CUDA inside the sandbox (an unprivileged
    uid where the tests run as root, a network namespace, Landlock with the task folder CUDA
    names its threads in) and every attack is refused or contained."""
    attacked = attack(tmp_path_factory.mktemp("sandbox_cuda"), "cuda", 128)
    check_verdicts(attacked)
    assert attacked["stored"] == {k: v["status"] for k, v in attacked["results"].items()}
    assert attacked["strays"] == []
    assert attacked["after"] == attacked["before"]
    assert attacked["accepted"] == []
    assert not any("died" in line for line in attacked["ran"]["lines"]), attacked["ran"]["lines"]


def messages(text: str, start: str) -> list[str]:
    """The messages of a command's output that begin with `start`, each joined from the lines it
    was wrapped into (continued two columns in)."""
    found, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(start):
            more = []
            for follow in lines[i + 1:]:
                if not follow.startswith("  "):
                    break
                more.append(follow.strip())
            found.append(" ".join([line, *more]))
    return found


def _run_add(tmp_path: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "run_eval.py", "--problem", "elementwise_add", "--solution", "cpp_add",
                           "--config", str(REPO_ROOT / "tests/fixtures/configs/fast.yaml"), "--results-dir",
                           str(tmp_path / "results"), "--run-id", "probe", *extra], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, **(env or {})})


@needs_full
def test_a_part_the_first_worker_cannot_start_with_is_left_out_once_with_one_line(tmp_path):
    """The lane's start-up probe (harness/run/sandbox_check.py; KB_SANDBOX_PROBE=1 makes a CPU lane
    probe; KB_SANDBOX_PROBE_FAULT=landlock stands in for a driver Landlock breaks): `auto` warns
    once, naming the part and why, and every pair runs without it and records so."""
    proc = _run_add(tmp_path, env={"KB_SANDBOX_PROBE": "1", "KB_SANDBOX_PROBE_FAULT": "landlock"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    warnings = messages(proc.stdout, "warning: sandbox")
    assert len(warnings) == 1 and "running without Landlock's file rules (the lane's first sandboxed worker " \
                                  "failed with it: RuntimeError: KB_SANDBOX_PROBE_FAULT" in warnings[0], proc.stdout
    result = json.loads((tmp_path / "results" / "probe" / "elementwise_add__cpp_add.json").read_text())
    assert result["status"] == "ok"
    assert not any("landlock-fs" in part for part in result["sandbox"]["active"]), result["sandbox"]
    assert any("Landlock's file rules" in part for part in result["sandbox"]["without"]), result["sandbox"]


@needs_full
def test_required_stops_at_the_probe_with_one_line(tmp_path):
    proc = _run_add(tmp_path, "--set", "sandbox=required",
                    env={"KB_SANDBOX_PROBE": "1", "KB_SANDBOX_PROBE_FAULT": "landlock"})
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "sandbox: required, and the lane's first sandboxed worker failed" in lines[0], lines
    assert not (tmp_path / "results" / "probe" / "elementwise_add__cpp_add.json").exists()


@needs_full
def test_the_probe_passes_where_nothing_is_wrong(tmp_path):
    proc = _run_add(tmp_path, env={"KB_SANDBOX_PROBE": "1"})
    assert proc.returncode == 0 and "warning: sandbox" not in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_a_python_closed_to_others_is_named_with_what_opens_it(tmp_path):
    """A folder on the way to the interpreter (or the checkout) that others may not pass: the plan's
    line names that folder, its mode and the chmod that lets the sandbox's uids through."""
    closed = tmp_path / "home"
    (closed / "python" / "bin").mkdir(parents=True)
    (closed / "python" / "bin" / "python3").write_text("")
    closed.chmod(0o700)
    why = sandbox.closed_folder(closed / "python" / "bin" / "python3")
    assert why.startswith(f"{closed} is closed to others (mode 700)") and f"chmod o+x {closed}" in why
    assert sandbox.closed_folder(tmp_path / "open" / "file") == ""
    if NO_IDENTITY:   # this host's own case: the run's warning names it
        assert any("is closed to others" in lack and "chmod o+x" in lack for lack in PLAN.lacks), PLAN.lacks


def test_an_identity_that_cannot_read_the_checkout_is_named(tmp_path):
    """Root runs sandboxed processes as unprivileged uids; where one cannot read what a pair needs
    (a folder closed to others on the way), the plan says which path, and `auto` goes without."""
    if os.geteuid() != 0:
        pytest.skip("only a harness running as root changes identity")
    if NO_IDENTITY:
        pytest.skip(f"no uid but root's can run this Python here: {list(PLAN.lacks)}")
    closed = tmp_path / "closed"
    (closed / "inside").mkdir(parents=True)
    closed.chmod(0o700)
    problem = sandbox.can_run_as(sandbox.next_uid(), sandbox.UID_BASE, [str(closed / "inside")])
    assert problem.startswith("uid ") and "cannot read " + str(closed / "inside") in problem
    plan = sandbox.prepare(load_config(None), [closed / "inside"])
    assert plan.identity == "same" and any(str(closed / "inside") in lack for lack in plan.lacks)
    with pytest.raises(sandbox.SandboxError, match="an unprivileged identity"):
        sandbox.prepare(with_overrides(load_config(None), {"sandbox": "required"}), [closed / "inside"])
    assert sandbox.prepare(load_config(None), [tmp_path]).identity == "per-process"
