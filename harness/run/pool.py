"""A lane's pool of warm interpreters: worker processes started ahead of need.

Importing torch takes seconds (about 5 CPU-s on the GPU machines measured). A spare
(`python -m harness.run.worker --serve FD`, exec'd; or with timing.worker_start fork, forked by the
lane's fork server, which imported torch and the worker once: harness/isolate/forkserver.py) pays
what is left of that, and the rest of its host-side start-up (worker.prime), as soon as it is
started; its CUDA context is made when its pair arrives. Each
pair still gets a fresh process: a spare serves one pair and exits, and is replaced at once.
A spare runs in its own session (a kill takes its compiler children with it) and dies with the
lane (PR_SET_PDEATHSIG). Spares are stopped (SIGSTOP) while the lane times anything, or, with
timing.priming_spares run where the lane pins its timed workers, those still starting go on
off the timing CPU (`freeze`). Workers
start without address-space randomization (harness/run/placement.py `fixed_layout`).

In a sandbox (harness/isolate/sandbox.py) each spare has a scratch folder of its own, made when it is
started (its working directory and TMPDIR, the only place it writes); it is removed with
everything the worker left running once its pair is over (`retire`).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from . import placement
from ..isolate import sandbox
from ..isolate.channel import Channel, ChannelClosed, Marks, ProtocolError
from ..isolate.forkserver import ForkedProc
from ..isolate.isolation import child_command, popen, reap_strays, start_step


@dataclass
class Spare:
    proc: subprocess.Popen | ForkedProc
    channel: Channel
    log_path: Path
    started: float
    state: str = "starting"        # starting -> ready (imported and primed); or dead
    events: list = field(default_factory=list)
    scratch: Path | None = None    # its sandbox's scratch folder (None: no sandbox)
    problems: int = 0              # a reference worker: the problems it has been set up for (references.References.worker_for)
    marks: Marks | None = None     # its timing marks, kernel-stamped (harness/isolate/channel.py Marks)
    away: bool = False             # starting on the lane's CPUs but the timing CPU while a pair is timed (freeze)

    @property
    def pid(self) -> int:
        return self.proc.pid


class WorkerPool:
    def __init__(self, work_dir: Path, env: Mapping[str, str], size: int, sandboxed: dict | None = None,
                 start: str = "exec"):
        """`sandboxed`: the sandbox of every worker (sandbox.template with the lane's device:
        {"plan", "device", "hidden"}); None: no sandbox. `leave_out`: the parts of it the lane's
        probe found CUDA cannot work with (sandbox.policy). `start`: exec (a fresh interpreter each)
        or fork (by the lane's fork server, harness/isolate/forkserver.py; timing.worker_start)."""
        self.start = start
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.env = dict(env)
        self.sandboxed = sandboxed if sandboxed and sandboxed["plan"]["mode"] != "off" else None
        self.leave_out: tuple[str, ...] = ()
        self.size = self.base_size = size   # spares kept ready (0 once no more pairs are expected)
        self.spares: list[Spare] = []
        self.count = 0
        self.frozen = False
        self.away: frozenset[int] | None = None   # where a starting spare goes on while frozen (freeze)
        self.home = placement.allowed()            # ... and the CPUs it goes back to
        self.fill()

    def spawn(self) -> Spare:
        self.count += 1
        channel, theirs = Channel.pair()
        marks, their_marks = Marks.pair()
        log_path = self.work_dir / f"worker-{self.count}.log"
        policy = None
        if self.sandboxed and "sandbox" not in self.leave_out:
            s = self.sandboxed
            policy = sandbox.policy(s["plan"], s["device"], scratch=self.work_dir / "scratch" / f"worker-{self.count}",
                                    hidden=[*s["hidden"], self.work_dir], leave_out=self.leave_out)
        fds = (theirs.fileno(), their_marks.fileno())
        args = ["--serve", *(str(fd) for fd in fds)]
        if self.start == "fork":   # the lane's fork server, started with the fixed layout its children inherit
            with open(log_path, "wb") as log:
                proc = start_step("harness.run.worker", args, policy, self.env, log, fds, "fork", server="workers",
                                  layout=placement.fixed_layout, dumpable=True)
        else:  # as the GPU smoke last ran it (9aebb82)
            argv, env, cwd, extra = child_command("harness.run.worker", args, policy, self.env)
            with open(log_path, "wb") as log, placement.fixed_layout():   # the same memory layout in every worker
                proc = popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                             start_new_session=True, pass_fds=fds, **extra)
        theirs.close()
        their_marks.close()
        spare = Spare(proc, channel, log_path, time.monotonic(), scratch=Path(policy["scratch"]) if policy else None,
                      marks=marks)
        if self.frozen:
            self._hold(spare)
        return spare

    def fill(self) -> None:
        self.spares = [s for s in self.spares if s.proc.poll() is None]
        while len(self.spares) < self.size:
            self.spares.append(self.spawn())

    def tick(self) -> None:
        """Note which spares said they are ready; replace those that died."""
        for spare in self.spares:
            try:
                while spare.channel.readable(0):
                    got = spare.channel.recv(timeout=5)
                    if got is not None and got[0].get("event") == "ready":
                        spare.state = "ready"
            except (ChannelClosed, ProtocolError):
                spare.state = "dead"
        for spare in [s for s in self.spares if s.state == "dead"]:
            kill(spare)
            self.spares.remove(spare)
        self.fill()

    def take(self) -> Spare:
        """The oldest spare (it may still be importing: its "run" then waits in the channel)."""
        self.tick()
        spare = self.spares.pop(0) if self.spares else self.spawn()
        self._home(spare)
        signal_spare(spare, signal.SIGCONT)
        self.fill()
        return spare

    def freeze(self, away: frozenset[int] | None = None) -> None:
        """Stop every spare (SIGSTOP) while something is timed: their imports and start-up take CPU
        time that would show in the measurement. With `away` (the lane's CPUs but its timing CPU,
        timing.priming_spares run), a spare still starting goes on there instead, as the builds do:
        it imports torch and primes host-side only (its CUDA context comes with its pair), and a pair
        that takes it before it is ready waits for what is left (1.7-3.9 s for 12 of 95 pairs on an
        H100 host with every spare stopped: docs/harness-perf.md)."""
        self.frozen, self.away = True, away or None
        for spare in self.spares:
            self._hold(spare)

    def thaw(self) -> None:
        self.frozen = False
        for spare in self.spares:
            self._home(spare)
            signal_spare(spare, signal.SIGCONT)

    def _hold(self, spare: Spare) -> None:
        """A spare while frozen: on the away CPUs if it is still starting and there are some, else stopped."""
        if self.away is not None and spare.state == "starting" and placement.pin(spare.pid, self.away):
            spare.away = True
        else:
            signal_spare(spare, signal.SIGSTOP)

    def _home(self, spare: Spare) -> None:
        if spare.away:
            placement.pin(spare.pid, self.home)
            spare.away = False

    def close(self) -> None:
        for spare in self.spares:
            kill(spare)
        self.spares = []

    def restart(self, leave_out: tuple[str, ...]) -> None:
        """Every spare replaced by one whose sandbox leaves out these parts (sandbox.policy; "sandbox": all of it)."""
        self.close()
        self.leave_out = tuple(leave_out)
        self.fill()


def retire(spare: Spare) -> int:
    """After a worker's pair: every process it left (orphans come back to the lane, a child
    subreaper) killed, its scratch removed. Returns how many were killed."""
    killed = reap_strays()
    if spare.marks is not None:
        spare.marks.close()
    sandbox.release_cgroup(spare.pid)
    if spare.scratch is not None:
        shutil.rmtree(spare.scratch, ignore_errors=True)
    return killed


def signal_spare(spare: Spare, sig: int) -> None:
    try:
        os.killpg(spare.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill(spare: Spare) -> None:
    try:
        os.killpg(spare.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        spare.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        spare.proc.kill()
        spare.proc.wait()
    spare.channel.close()
    retire(spare)
