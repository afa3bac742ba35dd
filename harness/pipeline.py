"""One (problem, solution) pair through the pipeline: build -> eval (worker) -> judge -> result.

Each step runs in its own process (harness/isolation.py). The verdict comes from the judge,
which never imports solution code; the worker only reports what happened and saves outputs.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .config import Config
from .guards import timing_consistent
from .isolation import Outcome, run_module
from .results import EvalResult, Status
from .solutions import Pair


def derive_seed(*parts: Any) -> int:
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def make_seeds(base: int, secret: int, extra_shapes: list[dict], trials: int, extra_trials: int) -> dict[str, Any]:
    """Construction uses one `init` seed (matched: the same before both constructors). Input seeds
    mix in the run's secret, so inputs cannot be predicted from the repository. Shape 0 is the
    benchmark shape; each extra shape overrides module-level constants of the problem."""
    shapes = []
    for index, overrides in enumerate([{}] + list(extra_shapes)):
        count = trials if index == 0 else extra_trials
        shapes.append({"overrides": dict(overrides),
                       "trials": [derive_seed(base, secret, "input", index, t) for t in range(count)]})
    return {"base": base, "secret": secret, "init": derive_seed(base, "init"), "shapes": shapes,
            "timing": [derive_seed(base, secret, "timing", j) for j in range(2)]}


@dataclass(frozen=True)
class RunContext:
    run_id: str
    cfg: Config
    device: str                     # "cuda" or "cpu"
    arch: str                       # "9.0" or "cpu": part of the build key
    cache_dir: Path
    work_root: Path
    secret: int = 0                 # this run's secret seed
    build_threads: int = 1          # MAX_JOBS for each build worker
    env: dict[str, Any] = field(default_factory=dict)
    extra_shapes: dict[str, list] = field(default_factory=dict)  # problem id -> overrides

    def seeds_for(self, pair: Pair) -> dict[str, Any]:
        c = self.cfg.correctness
        return make_seeds(self.cfg.seed, self.secret, self.extra_shapes.get(pair.problem.id, []),
                          c.trials, c.extra_shape_trials)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _worker_env(ctx: RunContext) -> dict[str, str]:
    env = {"MAX_JOBS": str(max(1, ctx.build_threads)), "TORCH_EXTENSIONS_DIR": str(ctx.cache_dir)}
    if ctx.device == "cuda":
        env["TORCH_CUDA_ARCH_LIST"] = ctx.arch
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU run must not touch a GPU
    return env


def _request(ctx: RunContext, pair: Pair, mode: str) -> dict[str, Any]:
    cfg = ctx.cfg.to_dict()
    return {"mode": mode, "problem_path": str(pair.problem.path), "solution_path": str(pair.solution.path),
            "device": ctx.device, "arch": ctx.arch, "cache_dir": str(ctx.cache_dir), "seeds": ctx.seeds_for(pair),
            "timing": cfg["timing"], "checks": cfg["checks"]}


# worker phase -> the phases key its time counts under (harness/results.py PHASES)
_PHASE_KEYS = {"setup": "startup_s", "start": "startup_s", "reference": "reference_s", "build": "build_s",
               "load": "load_s", "construct": "construct_s", "correctness": "correctness_s", "timing": "timing_s",
               "profile": "profile_s"}


def worker_phases(outcome: Outcome) -> dict[str, float]:
    """Seconds per phase of one worker run, from its phase events' timestamps: start-up (process
    start, imports, CUDA initialisation) until its first phase, then each phase until the next
    (the last until the process ended)."""
    phases: dict[str, float] = {}
    marks = [("start", outcome.started)] + [(e["phase"], e["t"]) for e in outcome.events
                                            if e.get("event") == "phase" and "t" in e]
    end = outcome.started + outcome.wall_s
    for (name, t0), (_, t1) in zip(marks, marks[1:] + [("end", end)]):
        key = _PHASE_KEYS.get(name, "startup_s")
        phases[key] = phases.get(key, 0.0) + max(0.0, t1 - t0)
    return phases


def _add(total: dict[str, float], more: dict[str, float]) -> None:
    for key, value in more.items():
        total[key] = total.get(key, 0.0) + value


def _build_info(outcome: Outcome) -> dict[str, Any]:
    builds = outcome.all("build")
    return {"extensions": [{k: b.get(k) for k in ("name", "key", "dir", "cached", "seconds", "ok")} for b in builds],
            "log": "\n".join(b.get("log", "") for b in builds)}


def _failure(outcome: Outcome, limit_hint: str = "") -> tuple[Status, str, str, str] | None:
    """(status, message, detail, phase) when the worker did not finish cleanly."""
    phase = outcome.phase
    if outcome.timed_out:
        return (Status.TIMEOUT, f"timed out in phase '{phase}': no result after {outcome.limit_s:g} s "
                f"{limit_hint}; the worker was killed", outcome.log_tail, phase)
    error = outcome.last("error")
    if error:
        return (Status(error["status"]), error["message"], error.get("detail", ""), error.get("phase", phase))
    if outcome.last("done") is None or outcome.returncode != 0:
        how = f"signal {outcome.signal_name}" if outcome.signal_name else f"exit code {outcome.returncode}"
        return (Status.CRASHED, f"worker died ({how}) in phase '{phase}' without reporting", outcome.log_tail, phase)
    return None


class PairRun:
    """Accumulates what is known about one pair and turns it into an EvalResult."""

    def __init__(self, ctx: RunContext, pair: Pair):
        self.ctx, self.pair = ctx, pair
        self.started = _now()
        self.build: dict[str, Any] = {"extensions": [], "log": ""}
        self.work_dir = ctx.work_root / f"{pair.problem.id}__{pair.solution.name}"
        self.seeds = ctx.seeds_for(pair)
        self.phases: dict[str, float] = {}   # seconds (harness/results.py PHASES)
        self.gpu_s = 0.0
        self.own_s = 0.0                     # wall time of this pair's own steps

    def result(self, status: Status, message: str, detail: str = "", phase: str = "", **fields: Any) -> EvalResult:
        shutil.rmtree(self.work_dir, ignore_errors=True)
        phases = {k: round(v, 4) for k, v in self.phases.items()}
        phases.update(wall_s=round(self.own_s, 4), gpu_s=round(self.gpu_s, 4),
                      overhead_s=round(self.own_s - self.gpu_s, 4))
        return EvalResult(
            problem=self.pair.problem.to_dict(), solution=self.pair.solution.to_dict(), status=status,
            message=message, run_id=self.ctx.run_id, detail=detail, phase=phase, build=self.build,
            seeds=self.seeds, config=self.ctx.cfg.to_dict(), env=fields.pop("env", self.ctx.env),
            started_at=self.started, finished_at=_now(), duration_s=round(self.own_s, 3), phases=phases, **fields)

    def run_build(self) -> EvalResult | None:
        """Build step; a result when the pair ends here (build/load error, skipped, timeout, crash)."""
        t = self.ctx.cfg.timeouts
        outcome = run_module("harness.worker", _request(self.ctx, self.pair, "build"), self.work_dir / "build",
                             limit_s=t.run_s, phase_limits={"build": t.build_s}, env=_worker_env(self.ctx))
        self.own_s += outcome.wall_s
        self.phases["build_s"] = outcome.wall_s
        self.build = _build_info(outcome)
        failure = _failure(outcome, "(timeouts.build_s)" if outcome.phase == "build" else "(timeouts.run_s)")
        return self.result(*failure) if failure else None

    def run_eval(self, on_phase: Callable[[str], None] | None = None) -> EvalResult:
        ctx, t = self.ctx, self.ctx.cfg.timeouts

        def relay(event: dict[str, Any]) -> None:
            if on_phase and event.get("event") == "phase":
                on_phase(event["phase"])

        outcome = run_module("harness.worker", _request(ctx, self.pair, "eval"), self.work_dir / "eval",
                             limit_s=t.run_s, phase_limits={"build": t.build_s}, env=_worker_env(ctx), on_event=relay)
        self.own_s += outcome.wall_s
        _add(self.phases, worker_phases(outcome))
        gpu = outcome.last("gpu_time") or {}
        self.gpu_s += sum(v for k, v in gpu.items() if k.endswith("_s"))
        if outcome.all("build") and not self.build["extensions"]:  # built lazily, after the build step
            self.build = _build_info(outcome)
        env = {**ctx.env, **((outcome.last("env") or {}).get("env", {}))}
        timing = self._timing(outcome)
        failure = _failure(outcome, "(timeouts.build_s)" if outcome.phase == "build" else "(timeouts.run_s)")
        if failure and (outcome.last("error") or {}).get("cuda_error"):
            if on_phase:
                on_phase("diagnose")
            failure = self._diagnose(failure)
        if failure:
            return self.result(*failure, env=env, timing=timing)
        if on_phase:
            on_phase("judge")
        report = self._judge(outcome)
        if "error" in report:
            return self.result(Status.HARNESS_ERROR, f"ground truth failed: {report['error']}", report.get("detail", ""),
                               "judge", env=env, timing=timing)
        profile = {k: v for k, v in (outcome.last("profile") or {}).items() if k != "event"}
        weights = report.get("weight_diagnostics") or []
        if not report["ok"]:
            failed = report["failed"] or {}
            where = (f"{failed.get('kind', 'trial')} {failed.get('trial')} (seed {failed.get('seed')}"
                     + (f", shape overrides {failed['overrides']}" if failed.get("overrides") else "") + ")")
            message = f"{where}: {report['message']}"
            if weights:
                message = f"weights differ from the reference ({'; '.join(weights)}); then {message}"
            return self.result(Status.INCORRECT, message, phase="judge", env=env, timing=timing,
                               correctness=report, profile=profile)
        precision = report["precision"]
        timing = self._speedup(timing, precision)
        flags, failures = self._flags(timing, profile)
        message = f"{precision} class; {report['message']}"
        if weights:
            message += f"; note: weights differ from the reference ({'; '.join(weights)})"
        if flags:
            message += "; flagged: " + ", ".join(flags)
        status = Status.REJECTED if failures else Status.OK
        if failures:
            message = f"rejected ({', '.join(failures)}): {message}"
        return self.result(status, message, phase="done", env=env, timing=timing, correctness=report,
                           profile=profile, flags=tuple(flags))

    def _diagnose(self, failure: tuple[Status, str, str, str]) -> tuple[Status, str, str, str]:
        """A CUDA error is reported asynchronously, so the line that raised it is rarely the
        launch that caused it. Re-run construction and one trial per shape with
        CUDA_LAUNCH_BLOCKING=1 and a sync after every extension call, and name the call."""
        status, message, detail, phase = failure
        outcome = run_module("harness.worker", _request(self.ctx, self.pair, "diagnose"), self.work_dir / "diagnose",
                             limit_s=self.ctx.cfg.timeouts.run_s, phase_limits={"build": self.ctx.cfg.timeouts.build_s},
                             env={**_worker_env(self.ctx), "CUDA_LAUNCH_BLOCKING": "1"})
        self.own_s += outcome.wall_s
        _add(self.phases, {"diagnose_s": outcome.wall_s})
        found = outcome.last("diagnosis")
        if found is None:
            note = "the diagnosis rerun (CUDA_LAUNCH_BLOCKING=1) did not finish"
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

    def _speedup(self, timing: dict[str, Any], precision: str) -> dict[str, Any]:
        """A tf32-class result is compared with PyTorch defaults, an fp32-class one with TF32 off."""
        baseline = "reference_fp32" if precision == "fp32" else "reference"
        timing = dict(timing)
        if baseline in timing and "solution" in timing and timing["solution"]["median_ms"] > 0:
            timing["baseline"] = baseline
            timing["speedup"] = timing[baseline]["median_ms"] / timing["solution"]["median_ms"]
        return timing

    def _flags(self, timing: dict[str, Any], profile: dict[str, Any]) -> tuple[list[str], list[str]]:
        checks = self.ctx.cfg.checks
        flags, failures = [], []
        if profile and profile.get("share", 0.0) > checks.library_share:
            flags.append("library_passthrough")
            if checks.library_passthrough == "fail":
                failures.append("library_passthrough")
        if "event_median_ms" in (timing.get("solution") or {}):
            flags.append("timing_inconsistent")
            if checks.timing_consistency == "fail":
                failures.append("timing_inconsistent")
        return flags, failures

    def _timing(self, outcome: Outcome) -> dict[str, Any]:
        timing: dict[str, Any] = {}
        for event in outcome.all("timing"):
            stats = dict(event["stats"])
            if "wall_median_ms" in stats and not timing_consistent(stats["median_ms"], stats["wall_median_ms"]):
                stats["event_median_ms"] = stats["median_ms"]  # not trusted: report the wall time
                stats["median_ms"] = stats["wall_median_ms"]
            timing[event["role"]] = stats
        return timing

    def _judge(self, outcome: Outcome) -> dict[str, Any]:
        import json
        ctx = self.ctx
        report_path = self.work_dir / "judge" / "report.json"
        correctness = ctx.cfg.to_dict()["correctness"]
        state = outcome.last("state")
        request = {"problem_path": str(self.pair.problem.path), "device": ctx.device, "seeds": self.seeds,
                   "outputs": outcome.all("output"), "report_path": str(report_path),
                   "state_path": state["path"] if state else None,
                   "tolerances": {"fp32": correctness["fp32"], "tf32": correctness["tf32"]}}
        judged = run_module("harness.judge", request, self.work_dir / "judge", limit_s=ctx.cfg.timeouts.judge_s,
                            env={} if ctx.device == "cuda" else {"CUDA_VISIBLE_DEVICES": ""})
        self.own_s += judged.wall_s
        self.phases["judge_s"] = judged.wall_s
        if judged.timed_out:
            return {"error": f"judge exceeded timeouts.judge_s={ctx.cfg.timeouts.judge_s:g} s"}
        if not report_path.exists():
            how = f"signal {judged.signal_name}" if judged.signal_name else f"exit code {judged.returncode}"
            return {"error": f"judge died ({how})", "detail": judged.log_tail}
        report = json.loads(report_path.read_text())
        if "truth_s" in report:
            self.phases["truth_s"] = report.pop("truth_s")
        return report
