"""One pair inside a lane (harness/lane.py): the reference's timings, one worker run supervised
and judged as it goes, a diagnosis rerun after a CUDA error, and the verdict (harness/pipeline.py).
Where the pair's time went is recorded in its phases."""
from __future__ import annotations

import shutil
import signal
import time
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from . import placement, sandbox
from .blame import blame
from .build import LOG_NAME
from .env import gpu_now
from .channel import ChannelClosed
from .isolation import Outcome, tail
from .pool import kill, signal_spare
from .precision import baseline as baseline_of, casts, classes, loosest, strict_role
from .failures import failure, limit_hint
from .judge import TimedSample
from .pipeline import assemble, build_of, problem_flags, timing_of, verdict
from .results import EvalResult, Status


def every_timed_call(checks: dict[str, Any], device: str) -> bool:
    """Whether every timed call is handed over alike, the lane judging a secret sample
    (checks.secret_timed_checks; on, or auto: on every device, the reference's calls in its
    reference worker made the same way, so both sides pay the same per-call cost; off: the last
    timed calls are checked, which a solution can tell apart)."""
    return checks.get("secret_timed_checks", "auto") in ("on", "auto")


def _request(job: dict[str, Any], mode: str, spare, hint_bytes: int = 0) -> dict[str, Any]:
    cfg = job["config"]
    checks = {**cfg["checks"], "every_timed_call": every_timed_call(cfg["checks"], job["device"])}
    return {"mode": mode, "problem_path": job["problem_path"], "solution_path": job["solution_path"],
            "device": job["device"], "arch": job["arch"], "cache_dir": job["cache_dir"], "seeds": job["seeds"],
            "timing": cfg["timing"], "checks": checks, "hint_bytes": hint_bytes, "env": job["worker_env"],
            "precision": cfg["precision"], "prebuilt": stage_libraries(job, spare.scratch)}


def stage_libraries(job: dict[str, Any], scratch: Path | None) -> dict[str, dict[str, str]]:
    """The libraries of the pair's build record (folders the runner published in the build cache:
    harness/recipes.py) for its worker: a sandboxed worker does not reach the cache, so they are
    copied into its scratch (regular files only), with their build logs; with the sandbox off the
    worker imports them where they are. Returns build folder name -> {"copy": the folder to
    import from, "from": the cache's} (harness/build.py install_hook)."""
    home = Path(job["cache_dir"]).resolve()
    staged = {}
    for ext in job.get("libraries") or []:
        folder = Path(ext.get("dir") or "")
        if not ext.get("ok") or not folder.is_dir() or not folder.resolve().is_relative_to(home):
            continue
        if scratch is None:
            staged[folder.name] = {"copy": str(folder), "from": str(folder)}
            continue
        copy = scratch / "lib" / folder.name
        copy.mkdir(parents=True, exist_ok=True)
        for library in [*folder.glob("*.so"), folder / LOG_NAME]:
            if library.is_file() and not library.is_symlink():
                shutil.copy2(library, copy / library.name)
        staged[folder.name] = {"copy": str(copy), "from": str(folder)}
    return staged


def _limits(cfg: dict[str, Any], reference_ms: float) -> dict[str, Any]:
    t = cfg["timeouts"]
    call_s = max(t["call_s"], t["call_factor"] * reference_ms / 1e3)
    return {"run_s": t["run_s"], "build_s": t["build_s"], "call_s": call_s,
            "first_call_s": max(call_s, t["first_call_s"]),
            "call_rule": f"max(timeouts.call_s={t['call_s']:g} s, timeouts.call_factor={t['call_factor']:g} x the "
                         f"reference's {reference_ms:.3g} ms; the first call of a model at least "
                         f"timeouts.first_call_s={t['first_call_s']:g} s)"}


class ReferenceRounds:
    """The reference's half of a pair's timing rounds (worker.time_model): before each round of the
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
    pair keeps the lane's earlier measurement and says why (`rounds_failed`)."""

    IDLE_MS = 1.0      # a tiny kernel and a sync take tens of microseconds on an idle GPU

    def __init__(self, lane, problem, job: dict[str, Any], entry: dict[str, Any], role_of, limits: dict[str, Any],
                 tolerances: dict[str, Any]):
        self.lane, self.problem, self.job, self.entry, self.role_of = lane, problem, job, entry, role_of
        self.limits = limits
        self.t, self.run = job["config"]["timing"], job["config"]["precision"]
        self.role: str | None = None
        self.blocks: list[list[float]] = []
        self.gpu_s = 0.0
        self.disturbed = 0.0         # the longest wait for the GPU to be idle that ran out, in ms
        self.failed = ""
        self.timer_name = "cuda_event" if lane.device == "cuda" else "host"
        self.every = every_timed_call(job["config"]["checks"], job["device"])
        # the reference's handed-over outputs are taken as the solution's are, into a sample of
        # its own (never judged; a CPU lane's files in a folder of its own)
        self.sink = lane.judge.begin(problem, job["seeds"], tolerances, self.run)
        if self.every:  # the same draws as the solution's sample, the same work per kept call, nothing kept
            spill = lane.judge.spill_dir / "reference" if lane.judge.spill_dir is not None else None
            self.sink.sample = TimedSample(job["config"]["checks"]["timed_output_checks"], spill, keep=False)
        # both workers on the lane's timing CPU while timed (harness/placement.py)
        self.cpus = placement.timing_cpus(self.t.get("pin_cpu", "auto"), lane.device, lane.env["lane"]["index"],
                                          lane.cpus)
        self.strays = 0              # blocks after which a thread of the solution's worker was off self.cpus
        self.placed = False          # the solution's worker pinned (from its timing phase on)
        self.spare = lane.reference_worker(job, lambda spare: _request(job, "reference", spare,
                                                                        entry.get("out_bytes", 0)))
        self.fresh = self.spare.state != "serving"   # its set-up is still to come
        self.worker_problems = self.spare.problems   # the problems the worker has been set up for, this one included

    def pause(self) -> None:
        """The reference worker stopped while the solution's worker times (it may still be setting up)."""
        if self.spare is not None:
            signal_spare(self.spare, signal.SIGSTOP)

    def place(self, pid: int) -> None:
        """Before a block of the solution's worker `pid`: what ran since its last block off the
        timing CPU is counted, then every thread of it pinned there (new threads too)."""
        if self.cpus is None:
            return
        if self.placed and placement.strays(pid, self.cpus):
            self.strays += 1
        placement.pin(pid, self.cpus)
        self.placed = True

    def unplace(self, pid: int) -> None:
        """The solution's timing done: its last block checked, the worker back on the lane's CPUs."""
        if not self.placed:
            return
        if placement.strays(pid, self.cpus):
            self.strays += 1
        placement.pin(pid, self.lane.cpus)
        self.placed = False

    def block(self, message: dict[str, Any]) -> None:
        if self.failed:
            return
        from .timing import per_round, planned_samples, rule_of
        try:
            self.role = self.role or self.role_of()
            per_call = (self.entry["stats"].get(self.role) or self.entry["stats"]["reference"])["median_ms"]
            _, each = per_round(planned_samples(rule_of(self.t), per_call), int(message.get("of", 1)))
            self._wait_idle()
            if self.cpus is not None:
                placement.pin(self.spare.pid, self.cpus)
            signal_spare(self.spare, signal.SIGCONT)
            try:
                block = self._serve(each)
            finally:
                self.pause()
            self.blocks.append(block)
            self.gpu_s += sum(block) / 1e3
        except ChannelClosed as exc:
            self.failed = f"the reference worker failed: {exc}"
            self.release()

    def _serve(self, calls: int) -> list[float]:
        """One block: ask, then follow the reference worker (its calls bounded as the solution's,
        its outputs taken as the solution's) until it reports the block's times."""
        spare = self.spare
        spare.channel.send({"op": "block", "role": self.role, "calls": calls})
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
            if event == "block":
                self.fresh, spare.state = False, "serving"
                return [float(x) for x in message["ms"]]
            if event == "error":
                raise ChannelClosed(f"{message.get('status')}: {message.get('message')}")
            if event == "output":
                self.lane.take(spare, message, payload, self.sink)

    def _wait_idle(self, limit_s: float = 2.0) -> None:
        if self.lane.device != "cuda":
            return
        import torch
        torch.cuda.synchronize()
        probe = torch.empty(1, device="cuda")
        start = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            probe.zero_()
            torch.cuda.synchronize()
            waited_ms = (time.perf_counter() - t0) * 1e3
            if waited_ms < self.IDLE_MS:
                return
            if time.perf_counter() - start > limit_s:
                self.disturbed = max(self.disturbed, waited_ms)
                return
            time.sleep(0.001)

    def release(self) -> None:
        """The pair's part done: the reference worker stays, stopped, for the problem's next pair
        (ended here if it failed), its outputs' buffers freed."""
        if self.spare is not None:
            spare, self.spare = self.spare, None
            if self.cpus is not None:
                placement.pin(spare.pid, self.lane.cpus)
            if self.failed:
                self.lane.end_reference_worker()
            else:
                signal_spare(spare, signal.SIGSTOP)
        if self.sink.sample is not None:
            self.sink.sample.release()
        self.lane.judge.release(force=True)

    def timing(self) -> dict[str, Any]:
        """The interleaved measurement for the pair's timing block: {role: stats with its rounds}
        ({} when no round was timed)."""
        from .pipeline import now
        from .timing import stats_of
        if not self.blocks or self.failed:
            return {}
        stats = stats_of([x for block in self.blocks for x in block], SimpleNamespace(name=self.timer_name))
        stats = {**stats, "interleaved": True, "measured_at": now(), "age_s": 0.0, "reused": False,
                 "measured_in": "reference worker", "worker_problems": self.worker_problems,
                 "rounds": [[round(x, 5) for x in block] for block in self.blocks]}
        if self.lane.device != "cuda":  # on the CPU there is no stricter setting: both roles are this
            return {"reference": stats, strict_role(self.run): stats}
        return {self.role: stats}


def compared_role(job: dict[str, Any], judged: list[dict[str, Any]]) -> str:
    """The reference's timing role the pair will be compared with, from the outputs judged so far:
    its class's baseline (harness/precision.py); PyTorch's defaults for an A/A pair (the reference
    as its own solution) and for a pair already incorrect."""
    run = job["config"]["precision"]
    if job["solution"].get("kind") == "reference" or not judged or not all(r["ok"] for r in judged):
        return "reference"
    return baseline_of(run, loosest([r["precision"] for r in judged], run))


def sources_changed(job: dict[str, Any]) -> str | None:
    """The problem or solution file (or a helper of it) whose content here is not what the driver
    hashed when the run began: results are recorded under those hashes, so they must hold."""
    from .problems import file_sha256
    from .solutions import sources_sha256
    try:
        if file_sha256(Path(job["problem_path"])) != job["problem"]["sha256"]:
            return job["problem_path"]
        if sources_sha256(Path(job["solution_path"])) != job["solution"]["sources_sha256"]:
            return job["solution_path"]
    except OSError as exc:
        return f"{exc.filename or job['solution_path']} ({exc.strerror})"
    return None


def evaluate_pair(lane, job: dict[str, Any]) -> EvalResult:
    start = time.monotonic()
    cfg = job["config"]
    run = cfg["precision"]
    phases: dict[str, float] = {"build_s": job["build_s"]} if job["build_s"] else {}
    spent = {"gpu_s": 0.0}
    gpu = gpu_now() if lane.device == "cuda" else {}
    env = {**job["env"], **lane.env, "git": job["env"]["git"]}  # the lane's facts; the driver's commit
    if gpu:
        env["gpu"] = {**env.get("gpu", {}), **gpu}
    lane.judge.cache.budget = lane.cache_bytes(cfg["correctness"]["truth_cache_fraction"])

    ran_in: dict[str, Any] = {}

    checks: dict[str, Any] = {}   # what the lane measured of the problem and the device (harness/checks.py)

    def result(status: Status, message: str, detail: str = "", phase: str = "", **fields: Any) -> EvalResult:
        fields.setdefault("flags", problem_flags(checks))
        return assemble(job, status, message, detail, phase, phases=phases, gpu_s=spent["gpu_s"],
                        own_s=job["build_s"] + time.monotonic() - start, env=env, sandbox=ran_in,
                        problem_checks=dict(checks), **fields)

    changed = sources_changed(job)
    if changed:
        return result(Status.HARNESS_ERROR, f"{changed} on {lane.env['lane']['node']} is not the file the run "
                                            f"started with (changed since, or on a cluster a node whose checkout "
                                            f"differs from the driver's); not evaluated", phase="judge")
    tolerances = {name: cfg["correctness"][name] for name in classes(run)}  # strictest first
    try:
        problem = lane.judge.problem(Path(job["problem_path"]), job["problem"]["sha256"])
        if lane.device == "cpu":  # a float64 ground truth past the lane's memory is found first, in seconds
            try:
                first = job["seeds"]["shapes"][0]["trials"][0]
                lane.judge.begin(problem, job["seeds"], tolerances, run).truth(0, first, problem.inputs({}, first,
                                                                                                     casts(run)))
            except Exception as exc:  # noqa: BLE001 - whatever else fails here fails again below, blamed
                if sandbox.allocation_failed(exc):
                    return result(Status.SKIPPED, does_not_fit("its float64 ground truth", exc), phase="reference")
        t0 = time.monotonic()
        refs, ref_gpu_s, entry, measured = lane.references(problem, job, gpu)
        checks.update(entry.get("checks") or {})
        if measured:
            phases["reference_s"] = time.monotonic() - t0
            spent["gpu_s"] += ref_gpu_s
    except Exception as exc:  # noqa: BLE001 - the reference's failure is not the solution's
        if lane.device == "cpu" and sandbox.allocation_failed(exc):
            return result(Status.SKIPPED, does_not_fit("the reference", exc), phase="reference")
        found = blame(exc, Path(job["problem_path"]))
        first = f"{type(exc).__name__}: {exc}".splitlines()[0]
        where = "" if run == "fp32" else f" in {run} (--precision {run}: both models and the inputs cast to it)"
        return result(Status.HARNESS_ERROR, f"the reference could not be run and timed{where} (not the solution's "
                                            f"fault): {first} at {found.where or 'an unknown place'}",
                      "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), "reference")
    limits = _limits(cfg, refs["reference"]["median_ms"] if refs else 0.0)
    max_payload = 4 * entry.get("io_bytes", 0) + (256 << 20)

    every = every_timed_call(cfg["checks"], job["device"])
    for attempt in (1, 2):
        judgement = lane.judge.begin(problem, job["seeds"], tolerances, run,
                                     cfg["checks"]["timed_output_checks"] if every else None)
        spare = lane.pool.take()
        rounds = ReferenceRounds(lane, problem, job, entry, lambda j=judgement: compared_role(job, j.results),
                                 limits, tolerances) if refs else None
        started = time.monotonic()
        try:
            w = lane.watch(spare, _request(job, "eval", spare, entry.get("out_bytes", 0)), limits, judgement,
                           max_payload, rounds)
        except Exception as exc:  # noqa: BLE001 - the lane's own failure while judging
            kill(spare)
            if lane.device == "cpu" and sandbox.allocation_failed(exc):
                return result(Status.SKIPPED, does_not_fit("judging its output (the float64 ground truth)", exc),
                              phase="judge")
            return result(Status.HARNESS_ERROR, f"the lane failed while judging: {type(exc).__name__}: {exc}",
                          "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), "judge")
        finally:
            if rounds is not None:
                rounds.release()
        outcome = lane.finish(spare, w, started)
        ran_in.update({k: v for k, v in (outcome.last("sandbox") or {}).items() if k in ("mode", "active", "notes")})
        without = [*lane.sandbox_plan.get("lacks", []), *lane.info.get("sandbox", {}).get("left_out", [])]
        if ran_in and without:  # what the run's sandbox goes without on this host, and why
            ran_in["without"] = without
        failed = failure(outcome, limit_hint(outcome))
        if not failed and every and w.timed_calls != w.timed_outputs:  # only a patched worker skips one
            failed = (Status.INCORRECT, f"the worker handed over {w.timed_outputs} output(s) of its {w.timed_calls} "
                                        f"timed call(s): every timed call's output goes to the lane "
                                        f"(checks.secret_timed_checks)", "", "timing")
        if failed and failed[0] is Status.OOM and attempt == 1 and lane.judge.cache.used:
            lane.judge.cache.clear()  # the lane's cached ground truth may have taken the memory: once more without
            lane.judge.release(force=True)
            phases["oom_retry_s"] = time.monotonic() - started
            continue
        break
    for key, seconds in w.phase_s.items():
        phases[key] = phases.get(key, 0.0) + seconds
    sample_s = 0.0
    if not failed:
        t0 = time.monotonic()
        try:
            judgement.judge_sample()  # the timed outputs the lane kept, judged now that no call is left
        except Exception as exc:  # noqa: BLE001 - the lane's own failure while judging
            if lane.device == "cpu" and sandbox.allocation_failed(exc):
                return result(Status.SKIPPED, does_not_fit("judging its output (the float64 ground truth)", exc),
                              phase="judge")
            return result(Status.HARNESS_ERROR, f"the lane failed while judging: {type(exc).__name__}: {exc}",
                          "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), "judge")
        sample_s = time.monotonic() - t0
    phases["truth_s"] = judgement.truth_s
    phases["judge_s"] = max(0.0, w.handoff_s + sample_s - judgement.truth_s)
    if w.rounds_s:
        phases["reference_s"] = phases.get("reference_s", 0.0) + w.rounds_s
    spent["gpu_s"] += sum(v for k, v in (outcome.last("gpu_time") or {}).items() if k.endswith("_s"))
    build = build_of(job["build"], outcome)
    interleaved = rounds.timing() if rounds is not None else {}
    if rounds is not None:
        spent["gpu_s"] += rounds.gpu_s
        lane.remember(entry, interleaved)
    timing = timing_of(outcome.events, {**refs, **interleaved})
    if rounds is not None and rounds.disturbed:
        timing["reference_disturbed_ms"] = round(rounds.disturbed, 3)
    if rounds is not None and rounds.failed:
        timing["rounds_failed"] = rounds.failed
    if rounds is not None and rounds.cpus is not None and rounds.blocks:
        timing["pinned_cpus"] = sorted(rounds.cpus)
        if rounds.strays:
            timing["unpinned_blocks"] = rounds.strays
    if failed and (outcome.last("error") or {}).get("cuda_error"):
        t0 = time.monotonic()
        failed = diagnose(lane, job, failed, limits)
        phases["diagnose_s"] = time.monotonic() - t0
    if failed:
        return result(*failed, timing=timing, build=build)
    profile = {k: v for k, v in (outcome.last("profile") or {}).items() if k not in ("event", "t")}
    t0 = time.monotonic()
    status, message, phase, fields = verdict(job, judgement.report(), timing, profile, checks)
    phases["judge_s"] += time.monotonic() - t0
    return result(status, message, phase=phase, build=build, **fields)


def does_not_fit(what: str, exc: BaseException) -> str:
    """A CPU pair whose reference or ground truth does not fit the lane's share of the machine."""
    import resource
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    share = f"{limit / 2**30:.1f} GB, " if limit != resource.RLIM_INFINITY else ""
    first = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    return (f"not run here: {what} does not fit this machine's memory at the benchmark shape ({first}); a CPU "
            f"lane may use {share}{sandbox.LANE_MEMORY_SHARE:.0%} of the machine's "
            f"{sandbox.physical_memory_bytes() / 2**30:.1f} GB. Run it on a machine with more memory, or on a GPU")


def diagnose(lane, job: dict[str, Any], failed: tuple, limits: dict[str, Any]) -> tuple:
    """A CUDA error is reported asynchronously, so the line that raised it is rarely the launch
    that caused it. Re-run construction and one trial per shape in a fresh worker with
    CUDA_LAUNCH_BLOCKING=1 and a sync after every extension call, and name the call."""
    status, message, detail, phase = failed
    spare = lane.pool.fresh({"CUDA_LAUNCH_BLOCKING": "1"})
    started = time.monotonic()
    outcome: Outcome = lane.finish(spare, lane.watch(spare, _request(job, "diagnose", spare), limits), started)
    found = outcome.last("diagnosis")
    if found is None:
        if outcome.timed_out:
            why = f"it {outcome.timeout_message.split(': ', 1)[-1]}" if outcome.timeout_message else \
                f"it ran past {outcome.limit_s:g} s and was killed"
        elif outcome.signal_name or outcome.returncode:
            why = f"its worker died ({outcome.signal_name or f'exit code {outcome.returncode}'}) before it reported"
        else:
            why = f"it ended in phase '{outcome.phase}' without reaching the first trial"
        note = f"the diagnosis rerun (CUDA_LAUNCH_BLOCKING=1) did not finish: {why}"
    elif not found.get("reproduced"):
        note = "the error did not recur in a rerun with CUDA_LAUNCH_BLOCKING=1 (a race or uninitialized memory?)"
    else:
        call = found.get("call")
        if call:
            how = "raised by" if call.get("inside") else "raised after"
            note = f"rerun with CUDA_LAUNCH_BLOCKING=1: {how} the extension call {call['function']}(...) at {call['where']}"
            if call.get("notes"):
                note += "; " + "; ".join(call["notes"])
        else:
            note = f"rerun with CUDA_LAUNCH_BLOCKING=1: {found.get('error')} at {found.get('where')} (no extension call was made)"
    return status, f"{message}; {note}", f"{detail}\n\n[diagnosis]\n{outcome.log_tail}", phase
