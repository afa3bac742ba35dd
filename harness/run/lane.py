"""An evaluation lane: one per device, trusted, alive for the whole run. It never imports solution
code.

    python -m harness.run.lane FD      started by the runner (harness/run/runner.py); its GPU is the one
                                   named by KB_LANE_GPU, the first one it sees

It keeps what the pairs of a problem share: the problem file and its reference models, the
reference's timings (measured here, on this device, in this run; again when older than
timing.reference_max_age_s, when the GPU's temperature moved more than
timing.reference_max_temp_delta_c or its application clock changed), and the float64 ground
truth of each (problem, shape, seed) while it fits (correctness.truth_cache_fraction of the
device's memory).

For each pair it takes a fresh worker from its pool of warm interpreters (harness/run/pool.py),
sends the pair, and supervises it: the phase limits, and a limit per call from the reference's
time (max(timeouts.call_s, timeouts.call_factor x the reference's median); the first call of a
model max of that and timeouts.first_call_s). Each output the worker hands over is taken while
the worker is stopped (SIGSTOP): copied device-to-device into the lane's memory, the inputs
compared bit for bit with the lane's own, then judged against the ground truth on the device.
The worker waits for that, so nothing of the lane runs on the GPU while the worker times. The
reference's rounds are timed by a reference worker of the same kind (harness/run/rounds.py
ReferenceRounds) while the solution's worker is stopped; the lane times the reference itself only
for its first estimate of a problem (harness/run/references.py).
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import placement
from .clock import BlockClock, in_block
from ..isolate import sandbox
from ..isolate.channel import Channel, ChannelClosed, ProtocolError
from .env import collect, probe
from ..isolate.isolation import Outcome, become_subreaper, die_with_parent, tail
from .pool import Spare, WorkerPool, kill, retire
from ..core.results import Status
from ..core.config import worker_start as start_method
from .references import References
from .sandbox_check import check_sandbox, wanted
from ..verdict.timing import malloc_env
from ..verdict.vouch import cycle_clock

FIRST_CALLS = ("construct", "profile")


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


@contextmanager
def stopped(pid: int, timeout_s: float = 10.0):
    """The worker's whole session stopped (SIGSTOP) while the block runs: nothing it does, on any
    thread, can change what is taken from it."""
    os.killpg(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + timeout_s
        while _state(pid) not in ("T", "t", "X", "Z"):
            if time.monotonic() > deadline:
                raise ChannelClosed("the worker did not stop")
            time.sleep(0.0005)
        if _state(pid) in ("X", "Z"):
            raise ChannelClosed("the worker died")
        yield
    finally:
        try:
            os.killpg(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


@dataclasses.dataclass
class Watch:
    """What one worker run did, seen from the lane."""
    events: list = dataclasses.field(default_factory=list)
    phase_s: dict = dataclasses.field(default_factory=dict)   # phases key -> seconds (lane's handoffs excluded)
    handoff_s: float = 0.0
    rounds_s: float = 0.0                                     # the lane timing the reference's rounds
    timeout: tuple[float, str] | None = None                  # (limit, message)
    broken: str = ""                                          # a protocol violation
    timed_calls: int = 0                                      # timed calls the worker announced
    timed_outputs: int = 0                                    # timed outputs it handed over
    blocks: list = dataclasses.field(default_factory=list)    # the lane's clock on its timed blocks (clock.py)
    wrong: bool = False                                       # stopped before its timed calls: an output was wrong
    unrounded: bool = False                                   # timed without the reference's rounds: an output was wrong


class Lane:
    def __init__(self, pool: WorkerPool, info: dict[str, Any], work_dir: Path):
        from ..verdict.judge import Judge
        self.pool, self.info, self.work_dir = pool, info, work_dir
        self.device = info["device"]
        self.env = collect(self.device)
        self.env["lane"] = {"gpu": os.environ.get("KB_LANE_GPU", ""), "index": int(os.environ.get("KB_LANE_INDEX", 0)),
                            "node": socket.gethostname()}
        if "gpu_name" in info:
            self.env["gpu_name"] = info["gpu_name"]  # the GPU that measured, whatever the run's first lane had
        self.judge = Judge(self.device, self.cache_bytes(0.3),
                           spill_dir=work_dir / "sample" if self.device == "cpu" else None)
        self.sandbox_plan = (pool.sandboxed or {}).get("plan", {})
        self.references = References(self)   # the reference's timings and worker, once per problem
        self.cpus = placement.allowed()   # the lane's CPUs: where a worker goes back to after timing

    def cache_bytes(self, fraction: float) -> int:
        """`fraction` of the device's memory (on the CPU, of what this lane may use: limit_memory)."""
        if self.device == "cuda":
            return int(fraction * self.info.get("memory_bytes", 0))
        import resource
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        return int(fraction * (limit if limit != resource.RLIM_INFINITY else sandbox.physical_memory_bytes()))

    def close(self) -> None:
        self.references.end_worker()
        self.pool.close()

    # -- supervising a worker -----------------------------------------------------------------------
    def watch(self, spare: Spare, request: dict[str, Any], limits: dict[str, float], judgement=None,
              max_payload: int = 1 << 30, rounds=None, stop_wrong: bool = False, skip_wrong: bool = False) -> Watch:
        """Send the request to the worker and follow it until it ends or is killed; the reference's
        rounds (`rounds`) are timed when the worker asks. A worker whose outputs so far include a wrong
        one when it begins its timed calls is stopped there with `stop_wrong` (timing.profile:
        screening), or with `skip_wrong` (timing.wrong_rounds) timed without the reference's rounds:
        its pair fails whatever they measure, and its timed calls still run, so a crash or hang in
        them is its status as before."""
        w = Watch()
        clock = BlockClock(cycle_clock(request.get("checks") or {}))
        spare.channel.send({"op": "run", "request": request})
        phase, phase_start, other_used = "start", time.monotonic(), 0.0
        call: tuple[float, float, dict] | None = None   # (started, limit, the call event)
        ended = False   # the worker process seen exited (EXIT_WATCH)
        while True:
            now = time.monotonic()
            in_phase = now - phase_start
            left = (limits["build_s"] - in_phase if phase == "build" else limits["run_s"] - other_used - in_phase)
            call_left = call[1] - (now - call[0]) if call else float("inf")
            if left <= 0:
                which = "timeouts.build_s" if phase == "build" else "timeouts.run_s"
                limit = limits["build_s"] if phase == "build" else limits["run_s"]
                w.timeout = (limit, f"timed out in phase '{phase}': no result after {limit:g} s ({which}); "
                                    f"the worker was killed")
                break
            if call_left <= 0:
                c = call[2]
                what = c.get("what")
                where = ", ".join(f"{k} {c[k]}" for k in ("shape", "trial") if k in c)
                w.timeout = (call[1], f"timed out: call {c.get('n')} ({what}{', ' + where if where else ''}) in phase "
                                      f"'{phase}' did not return within {call[1]:g} s ({limits['call_rule']}); "
                                      f"the worker was killed")
                break
            try:
                # poll every 0.5 s; a frame once begun has what is left of the limits to complete
                got = spare.channel.recv(timeout=max(0.0, min(left, call_left, 0.5)), max_payload=max_payload,
                                         frame_s=max(1.0, min(left, call_left)))
            except ChannelClosed:
                break
            except ProtocolError as exc:
                w.broken = f"the worker broke the channel's protocol ({exc})"
                break
            arrived = time.monotonic()
            if not self.pool.frozen:  # spares are stopped while a worker times: nothing to note, and the lane's
                self.pool.tick()      # clock on the calls (harness/run/clock.py) reads the next message at once
            if got is None:
                if self.device in EXIT_WATCH and spare.proc.poll() is not None:
                    if ended:   # the worker exited, and the poll after it read nothing more: its channel
                        break   # is held open by a process it left
                    ended = True   # one more poll: what it wrote just before it exited is read first
                continue
            message, payload = got
            event = message.get("event")
            if event == "ready":
                continue
            now = arrived
            if spare.marks is not None:   # the worker's timing marks sent before this message
                clock.marks(spare.marks.drain())
            call = None
            if clock.is_open and event not in ("round", "rounds_end") and not in_block(event, message):
                clock.close(now, unended=f"{event} {message.get('what') or message.get('phase') or ''}".strip())
            if event == "phase":
                if message.get("phase") == "timing" and (stop_wrong or skip_wrong) and judgement is not None \
                        and any(not r["ok"] for r in judgement.results):
                    if stop_wrong:
                        w.wrong = True
                        break
                    w.unrounded = True
                if message.get("phase") == "timing":
                    self.pool.freeze(away=self.priming_cpus(request, rounds))
                    if rounds is not None:
                        rounds.pause()  # it runs only for its blocks from now on
                        rounds.solution.place(spare.pid)  # its warm-up and blocks on the timing CPU
                elif phase == "timing":
                    self.pool.thaw()
                    if rounds is not None:
                        rounds.solution.unplace(spare.pid)
                key = _PHASE_KEYS.get(phase, "startup_s")
                w.phase_s[key] = w.phase_s.get(key, 0.0) + now - phase_start
                if phase != "build":
                    other_used += now - phase_start
                phase, phase_start = message.get("phase", phase), now
                w.events.append(message)
            elif event == "call":
                what = message.get("what")
                w.timed_calls += what in ("timed", "timed_check")
                clock.call(what)
                first = what in FIRST_CALLS or (what == "trial" and message.get("trial") == 0)
                call = (now, limits["first_call_s"] if first else limits["call_s"], message)
            elif event in ("output", "state") and judgement is not None:
                if event == "output" and message.get("kind") == "timed":
                    w.timed_outputs += 1
                    clock.output()
                try:
                    acked = self.take(spare, message, payload, judgement)
                except ChannelClosed:
                    break
                spent = time.monotonic() - now
                w.handoff_s += spent
                clock.lane_work(spent, acked - now)
                phase_start += spent  # the lane's time is not the worker's
            elif event in ("round", "rounds_end"):  # a timed block ends (on the lane's clock), the next begins
                try:
                    with stopped(spare.pid):
                        clock.close(now, rounds.wait_idle() if rounds is not None else 0.0)
                        if rounds is not None and event == "round" and not w.unrounded:
                            rounds.block(message)
                            rounds.solution.place(spare.pid)  # its next block on the timing CPU, as the reference's
                    opened = time.monotonic()
                    spare.channel.send({"op": "ack"})
                    if event == "round":
                        clock.open(opened)
                except ChannelClosed:
                    break
                spent = time.monotonic() - now
                w.rounds_s += spent
                phase_start += spent
            else:
                w.events.append(message)
        self.pool.thaw()
        clock.close(time.monotonic(), unended="the worker's end")
        w.blocks = clock.blocks
        key = _PHASE_KEYS.get(phase, "startup_s")
        w.phase_s[key] = w.phase_s.get(key, 0.0) + time.monotonic() - phase_start
        w.events.append({"event": "_phase", "phase": phase})
        return w

    def priming_cpus(self, request: dict[str, Any], rounds) -> frozenset[int] | None:
        """Where the spares still starting go on while a pair is timed (timing.priming_spares run):
        the lane's CPUs but its timing CPU and any another lane holds; None (every spare stopped)
        where it is stop, or the lane pins nothing (auto = run)."""
        if (request.get("timing") or {}).get("priming_spares", "auto") == "stop" or rounds is None or rounds.cpus is None:
            return None
        return frozenset(c for c in self.cpus if c not in rounds.cpus and not placement.claimed(c)) or None

    def take(self, spare: Spare, message: dict[str, Any], payload: bytes, judgement) -> float:
        """Take a worker's output (or state) while it waits, then let it go on: returns the lane's
        time.monotonic() just before the "ack" that does (the lane's clock takes out its work up to
        there, not the worker's time after it: on a busy host the lane may run late after its send)."""
        # a timed call the secret sample does not keep goes on at once
        if not (message["event"] == "output" and judgement.passes(message)):
            with stopped(spare.pid):
                if message["event"] == "output":
                    taken = judgement.take_output(message, payload, self.device)
                else:
                    judgement.take_state(message, payload, self.device)
                    taken = None
            if taken is not None and not judgement.deferred(taken):
                judgement.judge_taken(taken)
            del taken
            self.judge.release()
        done = time.monotonic()
        spare.channel.send({"op": "ack"})
        return done

    def finish(self, spare: Spare, w: Watch, started: float) -> Outcome:
        """End the worker (killed on a timeout, a broken protocol or a stop before its timed calls,
        else waited for)."""
        if w.timeout or w.broken or w.wrong:
            kill(spare)
        else:
            try:
                spare.proc.wait(timeout=30)
            except Exception:  # noqa: BLE001 - a worker that does not exit after reporting is killed
                kill(spare)
        spare.channel.close()
        retire(spare)  # what the worker left running killed, its scratch removed
        rc = spare.proc.returncode
        sig = signal.Signals(-rc).name if rc is not None and rc < 0 and not w.timeout else None
        phase = w.events[-1]["phase"] if w.events and w.events[-1].get("event") == "_phase" else "start"
        events = [e for e in w.events if e.get("event") != "_phase"]
        if w.broken:
            events.append({"event": "error", "status": Status.CRASHED.value, "message": w.broken, "phase": phase})
        return Outcome(returncode=rc, signal_name=sig, timed_out=w.timeout is not None, phase=phase, events=events,
                       log_tail=tail(spare.log_path), wall_s=time.monotonic() - started,
                       limit_s=w.timeout[0] if w.timeout else None, started=started,
                       timeout_message=w.timeout[1] if w.timeout else "")

    # -- one pair ----------------------------------------------------------------------------------
    def run_pair(self, job: dict[str, Any]) -> dict[str, Any]:
        from .pair import evaluate_pair
        self.pool.size = self.pool.base_size if job.get("more", True) else 0  # no spare for nothing
        try:
            return evaluate_pair(self, job).to_dict()
        finally:
            self.judge.release(force=True)


# The devices whose lane ends its watch of a worker once the worker has exited and its channel has
# been silent for a poll, rather than at the channel's end only: a process the solution left behind
# (forked at import, in a session of its own) holds the worker's end of the channel open, so a
# correct pair waited for timeouts.run_s and was recorded `timeout` (tests/test_lanes_cpu.py,
# tests/test_gpu_lanes.py).
EXIT_WATCH = {"cpu", "cuda"}

_PHASE_KEYS = {"setup": "startup_s", "start": "startup_s", "build": "build_s", "load": "load_s",
               "construct": "construct_s", "correctness": "correctness_s", "timing": "timing_s",
               "profile": "profile_s"}


def validate(message: dict[str, Any]) -> list[str] | None:
    """[where, what] of the first defect of the run's problem files, or None."""
    from ..core.errors import BadInput
    from ..core.problems import problem_from_path, validate as check
    for item in message["problems"]:
        try:
            check(problem_from_path(Path(item["path"])), item["extra"], message["where"])
        except BadInput as exc:
            return [exc.where, exc.problem]
    return None


def limit_memory() -> int:
    """A CPU lane's address space: its share of the machine's memory (sandbox.LANE_MEMORY_SHARE),
    so that a reference or a float64 ground truth that does not fit fails in the lane, as that
    pair's own status, instead of the OOM killer taking the lane. Returns the limit in bytes."""
    import resource
    limit = int(sandbox.LANE_MEMORY_SHARE * sandbox.physical_memory_bytes())
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    return limit


def open_lane(work_dir: Path, requested: str, gpu: str, sandboxed: dict | None = None,
              worker_start: str = "auto") -> Lane:
    """A lane on this process's first visible device (`gpu`: its id for the spares). The spares
    start importing at once, while this process imports torch and probes the device. `sandboxed`:
    the workers' sandbox (harness/run/pool.py; from $KB_SANDBOX_LANE when not given), whose device is
    decided before the probe (a host with NVIDIA's device files is taken for a CUDA one). The
    lane is its workers' child subreaper: what they leave running comes back to it and is killed."""
    become_subreaper()
    spare_env = {"CUDA_VISIBLE_DEVICES": gpu} if requested != "cpu" else {"CUDA_VISIBLE_DEVICES": ""}
    spare_env.update(malloc_env(os.environ))  # both sides' allocator alike, on a cluster too (harness/verdict/timing.py)
    # spares kept ready: on a GPU enough to follow pairs of a few seconds each, one per three cores
    spares = max(2, min(6, (os.cpu_count() or 1) // 3)) if requested != "cpu" else 1
    if sandboxed is None and os.environ.get("KB_SANDBOX_LANE"):
        sandboxed = json.loads(os.environ["KB_SANDBOX_LANE"])
    device = "cpu" if requested == "cpu" or not os.path.exists("/dev/nvidiactl") else "cuda"
    if sandboxed:
        sandboxed = {**sandboxed, "device": device, "hidden": [*sandboxed["hidden"], str(work_dir)]}
    if device == "cpu":
        limit_memory()
    pool = WorkerPool(work_dir / "workers", spare_env, size=spares, sandboxed=sandboxed,
                      start=start_method(worker_start, device))
    try:
        info = probe(requested)
        pool.size = pool.base_size = spares if info["device"] == "cuda" else 1
        if info["device"] == "cuda":
            import torch
            torch.cuda.set_device(0)
        if sandboxed and wanted(info["device"]):  # one sandboxed worker starts CUDA before any pair does
            info["sandbox"] = check_sandbox(pool, info["device"])
        return Lane(pool, info, work_dir)
    except BaseException:
        pool.close()
        raise


def main(argv: list[str]) -> None:
    """The lane as a process of the runner's, driven over the channel FD."""
    die_with_parent()
    channel = Channel.from_fd(int(argv[1]))
    lane = None
    try:
        lane = open_lane(Path(os.environ["KB_LANE_DIR"]), os.environ.get("KB_LANE_DEVICE", "auto"),
                         os.environ.get("KB_LANE_GPU", ""), worker_start=os.environ.get("KB_LANE_WORKER_START", "auto"))
        channel.send({"op": "hello", **lane.info})
        while True:
            got = channel.recv(timeout=0.2, frame_s=60.0)
            lane.pool.tick()
            if got is None:
                continue
            message = got[0]
            if message.get("op") == "pair":
                channel.send({"op": "result", "result": lane.run_pair(message["job"])})
            elif message.get("op") == "validate":
                channel.send({"op": "validated", "error": validate(message)})
            elif message.get("op") == "stop":
                break
    except ChannelClosed:
        pass
    except BaseException:  # noqa: BLE001 - the runner learns of it from the lane's exit
        traceback.print_exc()
        sys.stderr.flush()
    finally:
        if lane is not None:
            lane.close()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
