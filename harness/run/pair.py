"""One pair inside a lane (harness/run/lane.py): the reference's timings, one worker run supervised
and judged as it goes, a diagnosis rerun after a CUDA error, and the verdict (harness/run/pipeline.py).
Where the pair's time went is recorded in its phases."""
from __future__ import annotations

import os
import time
import traceback
from pathlib import Path
from typing import Any

from ..isolate import sandbox
from ..core.blame import blame
from ..core.config import class_tolerances, noise_bound
from .env import gpu_now
from ..isolate.isolation import Outcome
from .pool import kill
from ..core.precision import baseline as baseline_of, casts, loosest
from ..compile.failures import failure, limit_hint
from .request import _limits, _request, every_timed_call
from .confirm import confirm
from .rounds import ReferenceRounds
from .pipeline import assemble, build_of, problem_flags, timing_of, verdict, vouched
from ..core.results import EvalResult, Status
from ..verdict.asked import on_for
from ..verdict.timing import wrong_rounds_skipped


def compared_role(job: dict[str, Any], judged: list[dict[str, Any]]) -> str:
    """The reference's timing role the pair will be compared with, from the outputs judged so far:
    its class's baseline (harness/core/precision.py); PyTorch's defaults for an A/A pair (the reference
    as its own solution) and for a pair already incorrect."""
    run = job["config"]["precision"]
    if job["solution"].get("kind") == "reference" or not judged or not all(r["ok"] for r in judged):
        return "reference"
    return baseline_of(run, loosest([r["precision"] for r in judged], run))


def sources_changed(job: dict[str, Any]) -> str | None:
    """The problem or solution file (or a helper of it) whose content here is not what the driver
    hashed when the run began: results are recorded under those hashes, so they must hold."""
    from ..core.problems import file_sha256
    from ..core.solutions import sources_sha256
    try:
        if file_sha256(Path(job["problem_path"])) != job["problem"]["sha256"]:
            return job["problem_path"]
        if sources_sha256(Path(job["solution_path"])) != job["solution"]["sources_sha256"]:
            return job["solution_path"]
    except OSError as exc:
        return f"{exc.filename or job['solution_path']} ({exc.strerror})"
    return None


def evaluate_pair(lane, job: dict[str, Any]) -> EvalResult:
    pair = PairEvaluation(lane, job)
    return pair.unchanged_sources() or pair.reference() or pair.run_worker() or pair.finish()


class PairEvaluation:
    """One pair in a lane, step by step (evaluate_pair): each step returns the pair's result where
    the pair ends there, else None; what the record gathers (phases, GPU seconds, the sandbox, the
    lane's checks of the problem) is kept here as it goes."""

    def __init__(self, lane, job: dict[str, Any]):
        self.lane, self.job, self.start = lane, job, time.monotonic()
        self.cfg = cfg = job["config"]
        self.run = cfg["precision"]
        self.phases: dict[str, float] = {"build_s": job["build_s"]} if job["build_s"] else {}
        self.gpu_s = 0.0
        self.gpu = gpu_now() if lane.device == "cuda" else {}
        self.env = {**job["env"], **lane.env, "git": job["env"]["git"]}  # the lane's facts; the driver's commit
        if self.gpu:
            self.env["gpu"] = {**self.env.get("gpu", {}), **self.gpu}
        lane.judge.cache.budget = lane.cache_bytes(cfg["correctness"]["truth_cache_fraction"])
        self.ran_in: dict[str, Any] = {}
        self.checks: dict[str, Any] = {}  # what the lane measured of the problem and the device (harness/verdict/checks.py)
        self.tolerances = class_tolerances(cfg["correctness"], self.run)  # strictest first
        self.every = every_timed_call(cfg["checks"], job["device"])
        self.screening = cfg["timing"].get("profile") == "screening"   # docs/usage.md: a wrong solution is not timed
        self.skip_wrong = wrong_rounds_skipped(cfg["timing"])

    def result(self, status: Status, message: str, detail: str = "", phase: str = "", **fields: Any) -> EvalResult:
        fields.setdefault("flags", problem_flags(self.checks))
        return assemble(self.job, status, message, detail, phase, phases=self.phases, gpu_s=self.gpu_s,
                        own_s=self.job["build_s"] + time.monotonic() - self.start, env=self.env, sandbox=self.ran_in,
                        problem_checks=dict(self.checks), **fields)

    def unchanged_sources(self) -> EvalResult | None:
        changed = sources_changed(self.job)
        if changed:
            return self.result(Status.HARNESS_ERROR, f"{changed} on {self.lane.env['lane']['node']} is not the file the "
                                                     f"run started with (changed since, or on a cluster a node whose "
                                                     f"checkout differs from the driver's); not evaluated", phase="judge")
        return None

    def reference(self) -> EvalResult | None:
        """The problem loaded and the reference's timings (the lane's, or measured now); on the CPU,
        a float64 ground truth past the lane's memory found first, in seconds."""
        lane, job, run = self.lane, self.job, self.run
        try:
            self.problem = problem = lane.judge.problem(Path(job["problem_path"]), job["problem"]["sha256"])
            if lane.device == "cpu":
                try:
                    first = job["seeds"]["shapes"][0]["trials"][0]
                    lane.judge.truths(problem, job["seeds"], run).truth(0, first, problem.inputs({}, first, casts(run)))
                except Exception as exc:  # noqa: BLE001 - whatever else fails here fails again below, blamed
                    if sandbox.allocation_failed(exc):
                        return self.result(Status.SKIPPED, does_not_fit("its float64 ground truth", exc), phase="reference")
            t0 = time.monotonic()
            self.refs, ref_gpu_s, self.entry, measured = lane.references.timings(problem, job, self.gpu)
            self.checks.update(self.entry.get("checks") or {})
            if measured:
                self.phases["reference_s"] = time.monotonic() - t0
                self.gpu_s += ref_gpu_s
        except Exception as exc:  # noqa: BLE001 - the reference's failure is not the solution's
            if lane.device == "cpu" and sandbox.allocation_failed(exc):
                return self.result(Status.SKIPPED, does_not_fit("the reference", exc), phase="reference")
            found = blame(exc, Path(job["problem_path"]))
            first = f"{type(exc).__name__}: {exc}".splitlines()[0]
            where = "" if run == "fp32" else f" in {run} (--precision {run}: both models and the inputs cast to it)"
            return self.result(Status.HARNESS_ERROR, f"the reference could not be run and timed{where} (not the "
                                                     f"solution's fault): {first} at {found.where or 'an unknown place'}",
                               "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), "reference")
        self.limits = _limits(self.cfg, self.refs["reference"]["median_ms"] if self.refs else 0.0)
        self.max_payload = 4 * self.entry.get("io_bytes", 0) + (256 << 20)
        return None

    def lane_failed(self, exc: BaseException) -> EvalResult:
        """The lane's own failure while judging (on the CPU, a ground truth past its memory: skipped)."""
        if self.lane.device == "cpu" and sandbox.allocation_failed(exc):
            return self.result(Status.SKIPPED, does_not_fit("judging its output (the float64 ground truth)", exc),
                               phase="judge")
        return self.result(Status.HARNESS_ERROR, f"the lane failed while judging: {type(exc).__name__}: {exc}",
                           "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), "judge")

    def run_worker(self) -> EvalResult | None:
        """The solution's worker, supervised and judged as it goes, the reference's rounds between its
        own; once more after an out-of-memory that the lane's cached ground truth may have caused.
        Sets the last attempt's judgement, watch, outcome and rounds, and `failed` (or None)."""
        lane, job, cfg = self.lane, self.job, self.cfg
        for attempt in (1, 2):
            self.judgement = judgement = lane.judge.begin(
                self.problem, job["seeds"], self.tolerances, self.run,
                cfg["checks"]["timed_output_checks"] if self.every else None, asked=on_for(cfg["checks"], lane.device),
                noise=noise_bound(cfg["correctness"]))
            spare = lane.pool.take()
            self.rounds = rounds = ReferenceRounds(
                lane, self.problem, job, self.entry, lambda j=judgement: compared_role(job, j.results), self.limits,
                self.tolerances) if self.refs else None
            started = time.monotonic()
            try:
                self.w = w = lane.watch(spare, _request(job, "eval", spare, self.entry.get("out_bytes", 0)), self.limits,
                                        judgement, self.max_payload, rounds, stop_wrong=self.screening,
                                        skip_wrong=self.skip_wrong)
            except Exception as exc:  # noqa: BLE001 - the lane's own failure while judging
                kill(spare)
                if rounds is not None:
                    rounds.release()
                return self.lane_failed(exc)
            self.outcome = outcome = lane.finish(spare, w, started)
            if rounds is not None:
                try:  # the solution's worker ended: the gate's rounds, where they cannot yet decide, go on
                    if not w.timeout and not w.broken and outcome.returncode == 0:
                        t0 = time.monotonic()
                        rounds.settle()
                        w.rounds_s += time.monotonic() - t0
                finally:
                    rounds.release()
            self.ran_in.update({k: v for k, v in (outcome.last("sandbox") or {}).items()
                                if k in ("mode", "active", "notes")})
            without = [*lane.sandbox_plan.get("lacks", []), *lane.info.get("sandbox", {}).get("left_out", [])]
            if self.ran_in and without:  # what the run's sandbox goes without on this host, and why
                self.ran_in["without"] = without
            self.failed = failed = None if w.wrong else failure(outcome, limit_hint(outcome))  # w.wrong: judged later
            if not failed and self.every and w.timed_calls != w.timed_outputs:  # only a patched worker skips one
                self.failed = failed = (
                    Status.INCORRECT, f"the worker handed over {w.timed_outputs} output(s) of its {w.timed_calls} "
                                      f"timed call(s): every timed call's output goes to the lane "
                                      f"(checks.secret_timed_checks)", "", "timing")
            if failed and failed[0] is Status.OOM and attempt == 1 and lane.judge.cache.used:
                lane.judge.cache.clear()  # the lane's cached ground truth may have taken the memory: once more without
                lane.judge.release(force=True)
                self.phases["oom_retry_s"] = time.monotonic() - started
                continue
            break
        return None

    def timing(self) -> dict[str, Any]:
        """The pair's timing block: the worker's reported calls with the reference's (its rounds,
        interleaved, where they ran), vouched for by the lane's clock (pipeline.vouched)."""
        lane, rounds = self.lane, self.rounds
        interleaved = rounds.timing() if rounds is not None else {}
        if rounds is not None:
            self.gpu_s += rounds.gpu_s
            lane.references.remember(self.entry, interleaved)
        timing = timing_of(self.outcome.events, {**self.refs, **interleaved,
                                                 **(rounds.yardstick_timing() if rounds is not None else {})})
        timing = vouched(timing, self.w.blocks, self.cfg["checks"], lane.device, self.entry.get("overhead"))
        if self.screening:   # its interval is the screening profile's
            timing["profile"] = "screening"
        if self.w.unrounded:   # harness/run/lane.py watch: wrong before its timed calls
            timing["rounds_skipped"] = "the solution was wrong before its timed calls"
        if lane.device == "cpu" and "solution" in timing:  # what else ran on the host's cores meanwhile (A/A: issue 78)
            timing["host_load"] = [round(os.getloadavg()[0], 2), len(os.sched_getaffinity(0))]
        if rounds is not None:
            timing.update(rounds.notes(timed="solution" in timing))
        return timing

    def finish(self) -> EvalResult:
        """The timed outputs the lane kept judged, the record's phases and timing, a diagnosis rerun
        after a CUDA error, the near-bound trials, and the verdict."""
        w, outcome, judgement, phases = self.w, self.outcome, self.judgement, self.phases
        for key, seconds in w.phase_s.items():
            phases[key] = phases.get(key, 0.0) + seconds
        sample_s = 0.0
        if not self.failed:
            t0 = time.monotonic()
            try:
                judgement.judge_sample()  # the timed outputs the lane kept, judged now that no call is left
            except Exception as exc:  # noqa: BLE001 - the lane's own failure while judging
                return self.lane_failed(exc)
            sample_s = time.monotonic() - t0
        phases["truth_s"] = judgement.truths.seconds
        phases["judge_s"] = max(0.0, w.handoff_s + sample_s - judgement.truths.seconds)
        if w.rounds_s:
            phases["reference_s"] = phases.get("reference_s", 0.0) + w.rounds_s
        self.gpu_s += sum(v for k, v in (outcome.last("gpu_time") or {}).items() if k.endswith("_s"))
        build = build_of(self.job["build"], outcome)
        timing = self.timing()
        failed = self.failed
        if failed and (outcome.last("error") or {}).get("cuda_error"):
            t0 = time.monotonic()
            failed = diagnose(self.lane, self.job, failed, self.limits)
            phases["diagnose_s"] = time.monotonic() - t0
        if not failed:
            failed = confirm(self.lane, self.job, self.problem, judgement, self.tolerances, self.limits,
                             self.max_payload, phases, self.entry.get("out_bytes", 0))
        if failed:
            return self.result(*failed, timing=timing, build=build)
        profile = {k: v for k, v in (outcome.last("profile") or {}).items() if k not in ("event", "t")}
        t0 = time.monotonic()
        status, message, phase, fields = verdict(self.job, judgement.report(), timing, profile, self.checks)
        phases["judge_s"] += time.monotonic() - t0
        if w.wrong:
            message += "; not timed (timing.profile: screening stops a wrong solution before its timed calls)"
        return self.result(status, message, phase=phase, build=build, **fields)


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
    CUDA_LAUNCH_BLOCKING=1 and a sync after every extension call, and name the call. The worker is
    a spare of the pool (torch imported, no CUDA context yet: CUDA reads the variable as it starts),
    which sets the variable from its request before anything of CUDA's runs."""
    status, message, detail, phase = failed
    spare = lane.pool.take()
    request = _request(job, "diagnose", spare)
    request["env"] = {**request["env"], "CUDA_LAUNCH_BLOCKING": "1"}
    started = time.monotonic()
    outcome: Outcome = lane.finish(spare, lane.watch(spare, request, limits), started)
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
        if found.get("launch_blocking") is False:
            note += " (its launches did not block: each extension call was followed by a sync instead)"
    return status, f"{message}; {note}", f"{detail}\n\n[diagnosis]\n{outcome.log_tail}", phase
