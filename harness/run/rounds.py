"""The other halves of a pair's timing rounds, run by the lane: the reference worker's blocks
before each of the solution's rounds, and in the CI gate the yardstick worker's blocks of the
solution as it was and as it is (ReferenceRounds; the yardstick's turns: harness/run/yardstick.py),
each worker served one block at a time (BlockWorker)."""
from __future__ import annotations

import signal
import time
from statistics import median
from types import SimpleNamespace
from typing import Any

from . import placement
from .clock import BlockClock
from ..isolate.channel import ChannelClosed
from ..isolate.isolation import tail
from .pool import kill, signal_spare
from ..core.precision import strict_role
from ..verdict.sample import TimedSample
from ..verdict.vouch import cycle_clock
from .request import _request, every_timed_call
from .yardstick import Yardstick


def reference_calls(t: dict[str, Any], estimate: dict[str, Any], done: list[list[float]] | None,
                    message: dict[str, Any], cycle: bool) -> int:
    """The calls of the reference worker's block before the solution's round `message`: the stopping
    rule's (timing `t`) for its time per call over the solution's rounds. The time: the entry's
    (`estimate`), or with `cycle` (checks.timing_cycle) its own last block's median where it has
    one (`done`: the entry's may be the lane's own, measured outside the pinned worker, which on a
    busy CPU read a 1.8 ms call as 50 ms and more); with `cycle`, no more than the solution's round
    (blocks of one length: a block's first calls, after the other worker ran, are its slower ones, so
    the side timed in longer blocks reads faster: a CPU A/A read 0.93-0.976x with the reference's
    blocks 1.4-2.4x the solution's, 0.976-1.022x with them equal) and two at least where it has two
    (one cycle of the reference's to judge the solution's by: clock.py)."""
    from ..verdict.timing import per_round, planned_samples, rule_of
    per_call = median(done[-1]) if cycle and done else estimate["median_ms"]
    _, each = per_round(planned_samples(rule_of(t), per_call), int(message.get("of", 1)))
    if not cycle:
        return each
    calls = int(message.get("calls", 1))
    return max(min(each, calls), min(2, calls))


def block_sink(lane, problem, job: dict[str, Any], tolerances: dict[str, Any], name: str):
    """Where a block worker's handed-over outputs go: taken as the solution's, into a sample of
    their own (never judged; a CPU lane's files in a folder of its own)."""
    sink = lane.judge.begin(problem, job["seeds"], tolerances, job["config"]["precision"])
    if every_timed_call(job["config"]["checks"], job["device"]):
        spill = lane.judge.spill_dir / name if lane.judge.spill_dir is not None else None
        sink.sample = TimedSample(job["config"]["checks"]["timed_output_checks"], spill, keep=False)
    return sink


class BlockWorker:
    """A worker of the lane's pool that times blocks of calls when the lane asks ({"op": "block",
    "role", "calls"}): the reference worker (worker.run_reference) or a yardstick worker
    (worker.run_yardstick). It runs only for its blocks (SIGCONT, then SIGSTOP), on the timing
    CPUs while it does; its handed-over outputs are taken into a sample of their own, never judged
    (`sink`: the same draws and the same work per kept call as the solution's). Its first block
    may wait for its set-up (import, CUDA context, construction) on top of the calls' limits."""

    def __init__(self, lane, spare, sink, limits: dict[str, Any], what: str, cycle: bool = True):
        self.lane, self.spare, self.sink, self.limits, self.what = lane, spare, sink, limits, what
        self.fresh = spare.state != "serving"   # its set-up is still to come
        self.blocks: list[list[float]] = []
        self.by_role: dict[str, list[list[float]]] = {}
        self.clock = BlockClock(cycle)   # the lane's clock on its blocks (harness/run/clock.py), by role in lane_by_role
        self.lane_by_role: dict[str, list[dict[str, Any]]] = {}
        self.gpu_s = 0.0
        self.failed = ""
        self.versions: dict[str, Any] = {}   # a yardstick worker's "versions" event (the roles it serves)
        self.wall_s = 0.0      # the lane's time in its blocks: asked to reported (the set-up a first block waits for too)
        self.handoff_s = 0.0   # ... of it taking the handed-over outputs

    def pause(self) -> None:
        if self.spare is not None:
            signal_spare(self.spare, signal.SIGSTOP)

    def serve(self, role: str, calls: int, cpus) -> bool:
        """One block of `calls` calls in `role`; False (and `failed` said) where the worker failed."""
        if self.failed or self.spare is None:
            return False
        try:
            if cpus is not None:
                placement.pin(self.spare.pid, cpus)
            signal_spare(self.spare, signal.SIGCONT)
            start = time.monotonic()
            try:
                block = self._serve(role, calls)
            finally:
                self.pause()
                self.wall_s += time.monotonic() - start
        except ChannelClosed as exc:
            self.failed = f"the {self.what} failed: {exc}"
            return False
        self.blocks.append(block)
        self.by_role.setdefault(role, []).append(block)
        self.lane_by_role.setdefault(role, []).append(self.clock.blocks[-1])
        self.gpu_s += sum(block) / 1e3
        return True

    def _serve(self, role: str, calls: int) -> list[float]:
        """Ask, then follow the worker (its calls bounded as the solution's, its outputs taken as
        the solution's) until it reports the block's times."""
        spare, clock = self.spare, self.clock
        clock.open(time.monotonic())
        spare.channel.send({"op": "block", "role": role, "calls": calls})
        setup_limit = self.limits["first_call_s"] + (self.limits["run_s"] if self.fresh else 0.0)
        deadline = time.monotonic() + setup_limit + calls * self.limits["call_s"]
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChannelClosed(f"no block of {calls} calls within {setup_limit + calls * self.limits['call_s']:g} s")
            got = spare.channel.recv(timeout=min(left, 0.5), frame_s=max(1.0, left))
            if got is None:
                if spare.proc.poll() is not None:
                    raise ChannelClosed(f"it exited ({spare.proc.returncode}): {tail(spare.log_path, 300)}")
                continue
            message, payload = got
            event = message.get("event")
            now = time.monotonic()
            if spare.marks is not None:   # its timing marks sent before this message
                clock.marks(spare.marks.drain())
            if event == "block":
                clock.close(now)
                self.fresh, spare.state = False, "serving"
                return [float(x) for x in message["ms"]]
            if event == "warmed":   # its warm-up (and a fresh worker's set-up) done: the block starts at the ack
                opened = time.monotonic()
                spare.channel.send({"op": "ack"})
                clock.open(opened)
            if event == "call":
                clock.call(message.get("what"))
            if event == "error":
                raise ChannelClosed(f"{message.get('status')}: {message.get('message')}")
            if event == "versions":
                self.versions = message
            if event == "output":
                clock.output()
                acked = self.lane.take(spare, message, payload, self.sink)
                spent = time.monotonic() - now
                self.handoff_s += spent
                clock.lane_work(spent, acked - now)

    def stats(self, timer_name: str, role: str | None = None) -> dict[str, Any]:
        """Its blocks' statistics, with the blocks as rounds: all of them, or those of `role`."""
        from .pipeline import now
        from ..verdict.timing import stats_of
        blocks = self.blocks if role is None else self.by_role.get(role, [])
        lane = self.clock.blocks if role is None else self.lane_by_role.get(role, [])
        stats = stats_of([x for block in blocks for x in block], SimpleNamespace(name=timer_name))
        return {**stats, "interleaved": True, "measured_at": now(), "rounds": [[round(x, 5) for x in b] for b in blocks],
                "lane_blocks": list(lane)}


class ReferenceRounds:
    """The other halves of a pair's timing rounds (worker.time_model): before each round of the
    solution's, a block of the reference, in the role the pair's class is compared with (decided
    at the first round from the outputs judged so far; PyTorch's defaults for an A/A pair), timed
    by a reference worker (worker.run_reference): a second worker of the lane's pool, a process
    of the same kind as the solution's, sandboxed alike, whose every call is made the way the
    solution's timed calls are (handed over and taken by the lane alike when every timed call is,
    checks.secret_timed_checks). So the two sides pay the same per-process cost of launching work
    and the same per-call procedure, which a reference timed in the lane did not (docs/evaluation.md).
    Each side is stopped (SIGSTOP) while the other is timed. Work the solution's worker left
    running on the GPU would slow the reference: the lane waits for the GPU to be idle first and
    records what it found (`disturbed`). Should the reference worker fail (out of memory, say), the
    pair keeps the lane's earlier measurement and says why (`rounds_failed`).

    In the CI gate (run_eval.py check --timing --baseline-rev; job["yardstick"]) some of the rounds
    have two more blocks, between the reference's and the solution's, of a yardstick worker: the
    solution as it was at the revision and as it is, in one process (harness/run/yardstick.py).
    Should that worker fail, the pair is judged as ever and says why (`yardstick_failed`)."""

    IDLE_MS = 1.0      # a tiny kernel and a sync take tens of microseconds on an idle GPU

    def __init__(self, lane, problem, job: dict[str, Any], entry: dict[str, Any], role_of, limits: dict[str, Any],
                 tolerances: dict[str, Any]):
        self.lane, self.problem, self.job, self.entry, self.role_of = lane, problem, job, entry, role_of
        self.t, self.run = job["config"]["timing"], job["config"]["precision"]
        self.cycle = cycle_clock(job["config"]["checks"])   # checks.timing_cycle
        self.role: str | None = None
        self.disturbed = 0.0         # the longest wait for the GPU to be idle that ran out, in ms
        self.timer_name = "cuda_event" if lane.device == "cuda" else "host"
        # both workers on the lane's timing CPU while timed (harness/run/placement.py): the solution's
        # worker by `solution` (place, unplace), the block workers for their blocks
        self.cpus = placement.timing_cpus(self.t.get("pin_cpu", "auto"), lane.device, lane.env["lane"]["index"],
                                          lane.cpus)
        self.solution = placement.TimedWorker(self.cpus, lane.cpus)
        hint = entry.get("out_bytes", 0)
        spare = lane.references.worker_for(job, lambda spare: _request(job, "reference", spare, hint))
        sink = block_sink(lane, problem, job, tolerances, "reference")
        self.reference = BlockWorker(lane, spare, sink, limits, "reference worker", self.cycle)
        self.worker_problems = spare.problems   # the problems the worker has been set up for, this one included
        self.yardstick: Yardstick | None = None
        if job.get("yardstick"):
            worker = self._yardstick_worker(limits, tolerances, hint)
            self.yardstick = Yardstick(worker, self.t, self.cpus, self.wait_idle, self._end)

    def _yardstick_worker(self, limits: dict[str, Any], tolerances: dict[str, Any], hint: int) -> BlockWorker:
        """A worker of the lane's pool asked to hold the solution as it was ("then") and as it is."""
        job, then = self.job, self.job["yardstick"]
        both = {**job, "libraries": [*(job.get("libraries") or []), *(then.get("libraries") or [])]}
        spare = self.lane.pool.take()
        spare.state = "starting"
        sink = block_sink(self.lane, self.problem, job, tolerances, "yardstick")
        worker = BlockWorker(self.lane, spare, sink, limits, "yardstick worker", self.cycle)
        try:
            spare.channel.send({"op": "run", "request": {
                **_request(both, "yardstick", spare, hint),
                "yardstick": {"then": then["solution_path"], "same_sources": bool(then.get("same_sources")),
                              "quiet": self.t.get("gate_handoff", "on") == "off"}}})
        except ChannelClosed as exc:
            worker.failed = f"the yardstick worker failed: {exc}"
        return worker

    @property
    def failed(self) -> str:
        return self.reference.failed

    @property
    def gpu_s(self) -> float:
        return self.reference.gpu_s + (self.yardstick.worker.gpu_s if self.yardstick is not None else 0.0)

    def pause(self) -> None:
        """The block workers stopped while the solution's worker times (they may still be setting up)."""
        self.reference.pause()
        if self.yardstick is not None:
            self.yardstick.worker.pause()

    def block(self, message: dict[str, Any]) -> None:
        """The blocks before the solution's round `message` (its "round" event): the reference's,
        then the yardstick's, "then" and "now" in turns (as many calls each as the solution's round;
        "then" first in round 0, by when the worker has said which versions it holds)."""
        if not self.reference.failed:
            try:
                self.role = self.role or self.role_of()
                each = reference_calls(self.t, (self.entry["stats"].get(self.role) or self.entry["stats"]["reference"]),
                                       self.reference.by_role.get(self.role), message, self.cycle)
            except ChannelClosed as exc:
                self.reference.failed = f"the reference worker failed: {exc}"
            else:
                self.wait_idle()
                self.reference.serve(self.role, each, self.cpus)
            if self.reference.failed:
                self._end(self.reference)
        if self.yardstick is not None:
            self.yardstick.in_round(message)

    def settle(self) -> int:
        """After the solution's rounds: the yardstick's rounds added where the gate's call is still
        open (Yardstick.settle); 0 without one."""
        return self.yardstick.settle() if self.yardstick is not None else 0

    def wait_idle(self, limit_s: float = 2.0) -> float:
        """Wait until a tiny kernel of the lane's runs at once (the GPU idle), at most `limit_s`
        (then `disturbed` says how long the last probe took); returns the seconds waited where the
        first probe found the GPU busy (after a block of the solution's worker: work it left
        running, which the lane's clock charges to that block), 0.0 where it was idle at once."""
        if self.lane.device != "cuda":
            return 0.0
        import torch
        torch.cuda.synchronize()
        probe = torch.empty(1, device="cuda")
        start, first = time.perf_counter(), True
        while True:
            t0 = time.perf_counter()
            probe.zero_()
            torch.cuda.synchronize()
            waited_ms = (time.perf_counter() - t0) * 1e3
            if waited_ms < self.IDLE_MS:
                return 0.0 if first else time.perf_counter() - start
            first = False
            if time.perf_counter() - start > limit_s:
                self.disturbed = max(self.disturbed, waited_ms)
                return time.perf_counter() - start
            time.sleep(0.001)

    def _end(self, worker: BlockWorker) -> None:
        """A block worker done with: the reference worker stays, stopped, for the problem's next
        pair (ended if it failed); a yardstick worker is ended. Its sample's buffers freed."""
        spare, worker.spare = worker.spare, None
        if spare is not None:
            if self.cpus is not None:
                placement.pin(spare.pid, self.lane.cpus)
            if worker is self.reference and not worker.failed:
                signal_spare(spare, signal.SIGSTOP)
            elif worker is self.reference:
                self.lane.references.end_worker()
            else:
                try:
                    signal_spare(spare, signal.SIGCONT)
                    spare.channel.send({"op": "end"})
                except ChannelClosed:
                    pass
                kill(spare)
        if worker.sink.sample is not None:
            worker.sink.sample.release()

    def release(self) -> None:
        """The pair's part done: the block workers' (harness/run/references.py worker_for)."""
        self._end(self.reference)
        if self.yardstick is not None:
            self._end(self.yardstick.worker)
        self.lane.judge.release(force=True)

    def timing(self) -> dict[str, Any]:
        """The interleaved measurement for the pair's timing block: {role: stats with its rounds}
        ({} when no round was timed)."""
        if not self.reference.blocks or self.reference.failed:
            return {}
        stats = {**self.reference.stats(self.timer_name), "age_s": 0.0, "reused": False,
                 "measured_in": "reference worker", "worker_problems": self.worker_problems}
        if self.lane.device != "cuda":  # on the CPU there is no stricter setting: both roles are this
            return {"reference": stats, strict_role(self.run): stats}
        return {self.role: stats}

    def notes(self, timed: bool) -> dict[str, Any]:
        """What the pair's timing block says of its rounds: the longest wait for an idle GPU that ran
        out (`reference_disturbed_ms`), a reference worker that failed (`rounds_failed`), a yardstick
        that failed where the solution was timed (`yardstick_failed`), and the CPUs both workers were
        pinned to (`pinned_cpus`) with the solution's blocks that ran elsewhere (`unpinned_blocks`)."""
        notes: dict[str, Any] = {}
        if self.disturbed:
            notes["reference_disturbed_ms"] = round(self.disturbed, 3)
        if self.failed:
            notes["rounds_failed"] = self.failed
        if self.yardstick_failed and timed:
            notes["yardstick_failed"] = self.yardstick_failed
        if self.cpus is not None and self.reference.blocks:
            notes["pinned_cpus"] = sorted(self.cpus)
            if self.solution.strays:
                notes["unpinned_blocks"] = self.solution.strays
        return notes

    @property
    def yardstick_failed(self) -> str:
        """Why a pair with a yardstick has no yardstick timing ('' where it has, or has none)."""
        return self.yardstick.failed if self.yardstick is not None else ""

    def yardstick_timing(self) -> dict[str, Any]:
        """The yardstick's part of the timing block (Yardstick.timing); {} without one or where it failed."""
        return self.yardstick.timing(self.timer_name, self.job) if self.yardstick is not None else {}
