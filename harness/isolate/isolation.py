"""Run one harness module in a fresh process with wall-clock limits; the parent is the backstop.

Every call ends in an Outcome: the events the child reported, its exit code or the signal that
killed it, and whether (and in which phase) it was killed for running too long. The child runs
in its own session, so a kill takes its compiler and ninja children with it; being out of the
harness's process group, it calls die_with_parent() first, so that a harness killed by a signal
does not leave it running.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from .. import REPO_ROOT
from . import forkserver, sandbox
from ..core.events import EventReader

# The processes this process started on purpose (its lanes, workers, build steps, nvidia-smi):
# any other child is an orphan of a sandboxed process (this process is a child subreaper) and is
# killed by reap_strays.
_LOCK = threading.Lock()
_OURS: dict[int, subprocess.Popen] = {}


def popen(args: list[str], **kwargs: Any) -> subprocess.Popen:
    """subprocess.Popen, the child recorded as this process's own."""
    with _LOCK:
        proc = subprocess.Popen(args, **kwargs)
        _OURS[proc.pid] = proc
    return proc


def run(args: list[str], timeout: float | None = None, **kwargs: Any) -> subprocess.CompletedProcess:
    """subprocess.run through popen (output captured as text)."""
    proc = popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


# Steps that run_module is following now, and whether the run is being stopped (Ctrl-C, SIGTERM,
# a batch's caller): stop_steps() kills every step in flight, and run_module starts none until
# allow_steps(), so that a stopped run ends in seconds rather than once its builds have finished.
_STEPS: set[subprocess.Popen] = set()
_STOPPING = threading.Event()


class Stopped(BaseException):
    """A step killed, or not started, because the run is being stopped: nothing of it is recorded.
    A BaseException, so that no `except Exception` records it as the pair's failure."""


def stop_steps() -> None:
    _STOPPING.set()
    with _LOCK:
        procs = list(_STEPS)
    for proc in procs:
        _kill(proc)


def allow_steps() -> None:
    _STOPPING.clear()


_REAPER = {"on": False}


def become_subreaper(on: bool = True) -> bool:
    """Make orphans of this process's descendants its children (PR_SET_CHILD_SUBREAPER), so that
    reap_strays finds them. Only in a process whose every other child it starts through popen (a
    lane; the runner of local lanes: a Ray driver's Ray processes are its children too)."""
    _REAPER["on"] = sandbox.become_subreaper(on) and on
    return _REAPER["on"]


@contextlib.contextmanager
def reaping(on: bool):
    """This process a child subreaper while the block runs (when `on`), strays reaped at its end."""
    if not on:
        yield
        return
    was = _REAPER["on"]
    become_subreaper(True)
    try:
        yield
    finally:
        reap_strays()
        if not was:
            become_subreaper(False)


def reap_strays(rounds: int = 100) -> int:
    """Kill every child of this process that it did not start (orphans of sandboxed processes: a
    double fork, setsid), and their children as they come back; returns how many."""
    killed = 0
    if not _REAPER["on"]:
        return 0
    for _ in range(rounds):
        with _LOCK:
            for pid in [pid for pid, proc in _OURS.items() if proc.returncode is not None]:
                del _OURS[pid]
            strays = [pid for pid in sandbox.children() if pid not in _OURS]
            for pid in strays:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for pid in strays:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        killed += len(strays)
        if not strays:
            break
    return killed


@dataclass(frozen=True)
class Outcome:
    returncode: int | None
    signal_name: str | None
    timed_out: bool
    phase: str                      # last phase the child reported
    events: list[dict[str, Any]] = field(default_factory=list)
    log_tail: str = ""
    wall_s: float = 0.0
    limit_s: float | None = None    # the limit that was exceeded
    started: float = 0.0            # time.monotonic() when the child was started
    timeout_message: str = ""       # what ran too long, where the caller knows better than "a phase"

    def last(self, event: str) -> dict[str, Any] | None:
        found = [e for e in self.events if e.get("event") == event]
        return found[-1] if found else None

    def all(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == event]


def tail(path: Path, limit: int = 6000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def die_with_parent() -> None:
    """In a child of run_module: ask the kernel to SIGKILL this process when the harness process
    (the thread that started it, which waits for it) dies (prctl PR_SET_PDEATHSIG, Linux only),
    and exit at once if it died before the request took effect."""
    if sys.platform != "linux":
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    parent = os.environ.get("KB_PARENT_PID")
    if parent and os.getppid() != int(parent):
        os._exit(1)


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["KB_PARENT_PID"] = str(os.getpid())
    env.update(extra or {})
    return env


def _launch(policy: dict[str, Any] | None,
            extra_env: Mapping[str, str] | None) -> tuple[sandbox.Launch | None, dict[str, str], Path]:
    """A child's start (None: no sandbox), environment and working directory."""
    env = child_env(extra_env)
    if not policy or policy["mode"] == "off":
        return None, env, REPO_ROOT
    start = sandbox.launch(policy)
    env.update(start.env)
    return start, env, Path(policy["scratch"])


def child_command(module: str, args: list[str], policy: dict[str, Any] | None,
              extra_env: Mapping[str, str] | None = None) -> tuple[list[str], dict[str, str], Path, dict[str, Any]]:
    """`python -m module args` as a child: its command, environment, working directory and
    Popen's extras; through the sandbox (harness/isolate/jail.py, started as sandbox.launch says) where
    `policy` asks for it, else from the repository."""
    start, env, cwd = _launch(policy, extra_env)
    if start is None:
        return [sys.executable, "-m", module, *args], env, cwd, {}
    return [*start.prefix, sys.executable, "-m", "harness.isolate.jail", module, *args], env, cwd, start.popen


# This process's fork servers (harness/isolate/forkserver.py) by name ("steps": the build and
# compile steps; "workers": a lane's), each started by its first forked process
_FORK: dict[str, forkserver.ForkServer] = {}


def fork_server(name: str = "steps", layout: Callable[[], Any] | None = None) -> forkserver.ForkServer:
    """This process's fork server `name`; `layout` (a context manager, placement.fixed_layout) is
    around its start, so that what it forks inherits the memory layout an exec'd start would have had."""
    with _LOCK:
        if name not in _FORK:
            log = sandbox.work_folder("kb-forkserver-") / f"forkserver-{name}.log"
            _FORK[name] = forkserver.ForkServer(popen, child_env(), log, layout, cuda_children=name == "workers")
        return _FORK[name]


def close_fork_server(name: str | None = None) -> None:
    """Stop this process's fork server `name` (None: every one); the next forked process starts another."""
    with _LOCK:
        servers = [_FORK.pop(n) for n in list(_FORK) if name in (None, n)]
    for server in servers:
        server.close()


def start_step(module: str, args: list[str], policy: dict[str, Any] | None, extra_env: Mapping[str, str] | None,
               log, pass_fds: tuple[int, ...], start: str = "exec", server: str = "steps",
               layout: Callable[[], Any] | None = None, dumpable: bool = False):
    """A process of the harness's, in its own session, its output on `log`: exec'd (a Popen) or, with
    `start` fork, forked by this process's fork server `server` (a forkserver.ForkedProc). `layout`:
    a context manager around an exec'd start, or around the start of the server that forks it.
    `dumpable`: a forked process made dumpable again after its identity change (forkserver._child)."""
    if start == "fork":
        launch, env, cwd = _launch(policy, extra_env)
        return fork_server(server, layout).start(module, args, env, cwd, launch, log.fileno(), pass_fds,
                                                 jail=launch is not None, dumpable=dumpable)
    argv, env, cwd, extra = child_command(module, args, policy, extra_env)
    with layout() if layout else contextlib.nullcontext():
        return popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                     start_new_session=True, pass_fds=pass_fds, **extra)


def run_module(module: str, request: dict[str, Any], work_dir: Path, *, limit_s: float,
               phase_limits: Mapping[str, float] | None = None, env: Mapping[str, str] | None = None,
               on_event: Callable[[dict[str, Any]], None] | None = None, poll_s: float = 0.05,
               policy: dict[str, Any] | None = None, start: str = "exec") -> Outcome:
    """Run `python -m module --request-fd R --events-fd E`, in the sandbox `policy` describes (harness/isolate/sandbox.py;
    None: none), started as `start` says (exec: a fresh interpreter; fork: by this process's fork
    server, harness/isolate/forkserver.py). `limit_s` bounds the time spent in phases without their own entry in
    `phase_limits` (e.g. {"build": 900}), each of which is bounded separately. What the child
    left running is killed when it ends."""
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    tag = module.rsplit(".", 1)[-1]
    events_path = work_dir / f"{tag}.events.jsonl"
    events_path.unlink(missing_ok=True)
    request = {**request, "events_path": str(events_path), "work_dir": str(work_dir)}
    req_path = work_dir / f"{tag}.request.json"
    req_path.write_text(json.dumps(request))
    log_path = work_dir / f"{tag}.log"
    phase_limits = dict(phase_limits or {})
    reader = EventReader(events_path)
    if _STOPPING.is_set():
        raise Stopped(f"not started: {module} (the run is being stopped)")
    started = time.monotonic()
    # the request and the events file reach the child as descriptors: in a sandbox neither is
    # within its reach by path (its scratch, its only writable folder, is work_dir/scratch)
    request_fd = os.open(req_path, os.O_RDONLY)
    events_fd = os.open(events_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        with open(log_path, "wb") as log:
            proc = start_step(module, ["--request-fd", str(request_fd), "--events-fd", str(events_fd)], policy, env,
                              log, (request_fd, events_fd), start)
    finally:
        os.close(request_fd)
        os.close(events_fd)
    with _LOCK:
        _STEPS.add(proc)
    try:
        return _follow(proc, reader, started, phase_limits, limit_s, on_event, poll_s, policy, log_path)
    finally:
        with _LOCK:
            _STEPS.discard(proc)


def _follow(proc: subprocess.Popen, reader: EventReader, start: float, phase_limits: dict[str, float],
            limit_s: float, on_event: Callable[[dict[str, Any]], None] | None, poll_s: float,
            policy: dict[str, Any] | None, log_path: Path) -> Outcome:
    """run_module's watch of its step until it ends, runs past its limits (killed) or the run is
    stopped (killed, Stopped)."""
    phase, phase_start, other_used = "start", start, 0.0
    timed_out, exceeded = False, None
    while True:
        if _STOPPING.is_set():
            _kill(proc)
            if policy and policy["mode"] != "off":
                sandbox.release_cgroup(proc.pid)
            raise Stopped("killed: the run is being stopped")
        rc = proc.poll()
        now = time.monotonic()
        for event in reader.poll():
            if on_event:
                on_event(event)
            if event.get("event") == "phase":
                if phase not in phase_limits:
                    other_used += now - phase_start
                phase, phase_start = event.get("phase", phase), now
        if rc is not None:
            break
        in_phase = now - phase_start
        if phase in phase_limits:
            over = in_phase > phase_limits[phase]
            limit = phase_limits[phase]
        else:
            over = other_used + in_phase > limit_s
            limit = limit_s
        if over:
            timed_out, exceeded = True, limit
            _kill(proc)
            rc = proc.returncode
            reader.poll()
            break
        time.sleep(poll_s)
    if policy and policy["mode"] != "off":
        reap_strays()
        sandbox.release_cgroup(proc.pid)
    sig = signal.Signals(-rc).name if rc is not None and rc < 0 and not timed_out else None
    return Outcome(returncode=rc, signal_name=sig, timed_out=timed_out, phase=phase,
                   events=list(reader.events), log_tail=tail(log_path),
                   wall_s=time.monotonic() - start, limit_s=exceeded, started=start)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
