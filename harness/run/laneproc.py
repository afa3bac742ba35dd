"""The runner's side of a lane (harness/run/lane.py): the lane process, its channel, and the set of a
run's lanes, one per GPU. Start a lane from the thread that will wait for it: the lane dies with
that thread (PR_SET_PDEATHSIG)."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from .. import REPO_ROOT
from ..isolate import sandbox
from . import placement
from ..compile.build import cache_dir_of
from ..isolate.channel import Channel, ChannelClosed, ProtocolError
from ..core.config import Config
from ..core.errors import BadInput
from ..isolate.isolation import child_env, popen, tail
from ..core.solutions import Pair
from ..verdict.timing import malloc_env


BUILD_NICE = 10   # a build's priority beside the lanes (build.yield_to_lanes): they preempt it


class LaneDied(Exception):
    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail


class LaneProc:
    """A lane process and the runner's end of its channel. Start it from the thread that will
    wait for it: the lane dies with that thread (PR_SET_PDEATHSIG)."""

    def __init__(self, index: int, gpu: str, device: str, work_dir: Path, hide_gpus: bool,
                 sandboxed: dict[str, Any] | None = None, worker_start: str = "auto"):
        self.index, self.gpu, self.device = index, gpu, device
        self.worker_start = worker_start  # timing.worker_start
        self.sandboxed = sandboxed  # its workers' sandbox (harness/isolate/sandbox.py template)
        self.work_dir = Path(work_dir) / f"lane{index}"
        self.hide_gpus = hide_gpus
        self.proc: subprocess.Popen | None = None
        self.channel: Channel | None = None
        self.info: dict[str, Any] = {}
        self.starts = 0

    def start(self, timeout_s: float = 600.0) -> dict[str, Any]:
        self.spawn()
        return self.hello(timeout_s)

    def spawn(self) -> None:
        self.starts += 1
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.work_dir / f"lane-{self.starts}.log"
        channel, theirs = Channel.pair()
        env = {"KB_LANE_DIR": str(self.work_dir / f"run{self.starts}"), "KB_LANE_DEVICE": self.device,
               "KB_LANE_GPU": self.gpu, "KB_LANE_INDEX": str(self.index), "KB_LANE_WORKER_START": self.worker_start}
        env.update(malloc_env(os.environ))  # the lane's and its workers' allocator (harness/verdict/timing.py)
        if self.sandboxed:
            env["KB_SANDBOX_LANE"] = json.dumps(self.sandboxed)
        if self.hide_gpus:
            env["CUDA_VISIBLE_DEVICES"] = ""
        elif self.index > 0:
            env["CUDA_VISIBLE_DEVICES"] = self.gpu
        with open(self.log_path, "wb") as log:
            self.proc = popen([sys.executable, "-m", "harness.run.lane", str(theirs.fileno())], cwd=REPO_ROOT,
                                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=child_env(env), start_new_session=True, pass_fds=(theirs.fileno(),))
        theirs.close()
        self.channel = channel

    def hello(self, timeout_s: float = 600.0) -> dict[str, Any]:
        got = self._receive(timeout_s)
        if got.get("op") != "hello":
            raise LaneDied(f"lane {self.index} did not start", tail(self.log_path))
        self.info = got
        return got

    def _receive(self, timeout_s: float) -> dict[str, Any]:
        try:
            got = self.channel.recv(timeout=timeout_s)
        except (ChannelClosed, ProtocolError) as exc:
            self.kill()
            raise LaneDied(f"lane {self.index} died ({exc})", tail(self.log_path)) from None
        if got is None:
            self.kill()
            raise LaneDied(f"lane {self.index} gave no answer within {timeout_s:g} s and was killed",
                           tail(self.log_path))
        return got[0]

    def validate(self, pairs: list[Pair], extra: dict[str, list], where: str) -> None:
        """The lane loads each problem file (the runner never imports torch); BadInput on a defect."""
        files = {str(p.problem.path): extra.get(p.problem.id, []) for p in pairs}
        self.channel.send({"op": "validate", "where": where,
                           "problems": [{"path": path, "extra": shapes} for path, shapes in files.items()]})
        got = self._receive(600.0)
        if got.get("error"):
            raise BadInput(*got["error"])

    def run(self, job: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        try:
            self.channel.send({"op": "pair", "job": job})
        except ChannelClosed as exc:
            self.kill()
            raise LaneDied(f"lane {self.index} died ({exc})", tail(self.log_path)) from None
        got = self._receive(timeout_s)
        if got.get("op") != "result":
            self.kill()
            raise LaneDied(f"lane {self.index} answered {got.get('op')!r}", tail(self.log_path))
        return got["result"]

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.channel.send({"op": "stop"})
            self.proc.wait(timeout=30)
        except (ChannelClosed, subprocess.TimeoutExpired):
            self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except ProcessLookupError:
                pass
            self.proc.wait()
        if self.channel is not None:
            self.channel.close()


def gpu_ids(count: int) -> list[str]:
    visible = [s.strip() for s in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if s.strip()]
    return visible[:count] if visible else [str(i) for i in range(count)]


class Lanes:
    """A run's lanes on this host, one per GPU. The first is started at once (it imports torch and
    starts its workers while the caller goes on); the others once it has said how many GPUs there
    are. A cluster's lanes (harness/run/cluster.py) answer the same calls."""

    where = "this machine"

    def __init__(self, cfg: Config, plan: sandbox.Plan):
        self.cfg = cfg
        self.work = sandbox.work_folder("kb-harness-")
        self.hide = cfg.device == "cpu"
        self.sandboxed = sandbox.template(plan, [cfg.results_dir, self.work, cache_dir_of(cfg)])
        self.first = LaneProc(0, "" if self.hide else gpu_ids(1)[0], cfg.device, self.work, self.hide, self.sandboxed,
                              cfg.timing.worker_start)
        self.first.spawn()
        self.all = [self.first]

    def capacity(self, info: dict[str, Any]) -> int:
        """How many lanes there can be: one per GPU; one on the CPU."""
        return info.get("gpu_count", 0) if info["device"] == "cuda" else 1

    def add(self, count: int, info: dict[str, Any]) -> None:
        ids = gpu_ids(count) if info["device"] == "cuda" else [""]
        self.all += [LaneProc(i, ids[i], self.cfg.device, self.work, self.hide, self.sandboxed,
                              self.cfg.timing.worker_start) for i in range(1, len(ids))]

    def build_slots(self) -> int:
        """Builds at once: the cores the lanes leave."""
        return max(1, (os.cpu_count() or 1) - len(self.all))

    def describe(self, lane: LaneProc) -> dict[str, Any]:
        """Where a lane ran, for run.json."""
        return {"index": lane.index, "gpu": lane.gpu, "gpu_name": lane.info.get("gpu_name", ""),
                "node": socket.gethostname()}

    def build(self, run, rank: int = 0, wave: int = 1) -> Any:
        """The pair's build step (an EvalResult when the pair ends there, else None). Where the
        lanes pin their timed workers (build.yield_to_lanes), the build thread, and with it what it
        starts (the build and compile steps, the compilers), keeps off the lanes' timing CPUs
        (placement.build_cpus) and runs at nice BUILD_NICE: both are a thread's, and inherited.
        With build.stagger on, its nice is its place's, `rank` of a run that builds `wave` at once
        (placement.build_nice; a thread's nice only rises, and the ranks a thread takes do too)."""
        cfg = run.ctx.cfg
        cpus = placement.build_cpus(cfg.build.yield_to_lanes, cfg.timing.pin_cpu, run.ctx.device, len(self.all))
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        nice = placement.build_nice(rank, wave) if run.ctx.stagger else BUILD_NICE if cpus else None
        if nice is not None:
            os.setpriority(os.PRIO_PROCESS, 0, max(nice, os.getpriority(os.PRIO_PROCESS, 0)))
        return run.run_build()

    def built(self, manifest: dict[str, Any]) -> bool:
        """Whether a build manifest's libraries are where the lanes will look for them."""
        return all(ext.get("ok") and ext.get("dir") and any(Path(ext["dir"]).glob(f"{ext.get('name')}*.so"))
                   for ext in manifest.get("extensions", []))

    def artifacts(self, run) -> dict[str, Any]:
        return {}  # the lanes share this host's build cache

    def close(self) -> None:
        for lane in self.all:
            lane.stop()
        if not os.environ.get("KB_KEEP_WORK"):  # set it to keep the lanes' and workers' logs
            shutil.rmtree(self.work, ignore_errors=True)
