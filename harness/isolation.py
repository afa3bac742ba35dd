"""Run one harness module in a fresh process with wall-clock limits; the parent is the backstop.

Every call ends in an Outcome: the events the child reported, its exit code or the signal that
killed it, and whether (and in which phase) it was killed for running too long. The child runs
in its own session, so a kill takes its compiler and ninja children with it; being out of the
harness's process group, it calls die_with_parent() first, so that a harness killed by a signal
does not leave it running.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from . import REPO_ROOT
from .events import EventReader


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


def run_module(module: str, request: dict[str, Any], work_dir: Path, *, limit_s: float,
               phase_limits: Mapping[str, float] | None = None, env: Mapping[str, str] | None = None,
               on_event: Callable[[dict[str, Any]], None] | None = None, poll_s: float = 0.05) -> Outcome:
    """Run `python -m module request.json`. `limit_s` bounds the time spent in phases without
    their own entry in `phase_limits` (e.g. {"build": 900}), each of which is bounded separately."""
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
    start = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", module, str(req_path)], cwd=REPO_ROOT,
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=child_env(env), start_new_session=True)
    phase, phase_start, other_used = "start", start, 0.0
    timed_out, exceeded = False, None
    while True:
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
