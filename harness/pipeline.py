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
from .isolation import Outcome, run_module
from .results import EvalResult, Status
from .solutions import Pair


def derive_seed(*parts: Any) -> int:
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def make_seeds(base: int, trials: int) -> dict[str, Any]:
    return {"base": base, "init": derive_seed(base, "init"),
            "trials": [derive_seed(base, "trial", i) for i in range(trials)]}


@dataclass(frozen=True)
class RunContext:
    run_id: str
    cfg: Config
    device: str                     # "cuda" or "cpu"
    arch: str                       # "9.0" or "cpu": part of the build key
    cache_dir: Path
    work_root: Path
    build_threads: int = 1          # MAX_JOBS for each build worker
    env: dict[str, Any] = field(default_factory=dict)

    @property
    def seeds(self) -> dict[str, Any]:
        return make_seeds(self.cfg.seed, self.cfg.correctness.trials)


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
    return {"mode": mode, "problem_path": str(pair.problem.path), "solution_path": str(pair.solution.path),
            "device": ctx.device, "arch": ctx.arch, "cache_dir": str(ctx.cache_dir), "seeds": ctx.seeds,
            "timing": ctx.cfg.to_dict()["timing"]}


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

    def result(self, status: Status, message: str, detail: str = "", phase: str = "", **fields: Any) -> EvalResult:
        shutil.rmtree(self.work_dir, ignore_errors=True)
        start = dt.datetime.fromisoformat(self.started)
        finished = _now()
        return EvalResult(
            problem=self.pair.problem.to_dict(), solution=self.pair.solution.to_dict(), status=status,
            message=message, run_id=self.ctx.run_id, detail=detail, phase=phase, build=self.build,
            seeds=self.ctx.seeds, config=self.ctx.cfg.to_dict(), env=fields.pop("env", self.ctx.env),
            started_at=self.started, finished_at=finished,
            duration_s=round((dt.datetime.fromisoformat(finished) - start).total_seconds(), 3), **fields)

    def run_build(self) -> EvalResult | None:
        """Build step; a result when the pair ends here (build/load error, skipped, timeout, crash)."""
        t = self.ctx.cfg.timeouts
        outcome = run_module("harness.worker", _request(self.ctx, self.pair, "build"), self.work_dir / "build",
                             limit_s=t.run_s, phase_limits={"build": t.build_s}, env=_worker_env(self.ctx))
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
        if outcome.all("build"):
            self.build = _build_info(outcome) if not self.build["extensions"] else self.build
        env = {**ctx.env, **((outcome.last("env") or {}).get("env", {}))}
        timing = self._timing(outcome)
        failure = _failure(outcome, "(timeouts.build_s)" if outcome.phase == "build" else "(timeouts.run_s)")
        if failure:
            return self.result(*failure, env=env, timing=timing)
        if on_phase:
            on_phase("judge")
        report = self._judge(outcome)
        if "error" in report:
            return self.result(Status.HARNESS_ERROR, f"ground truth failed: {report['error']}", report.get("detail", ""),
                               "judge", env=env, timing=timing)
        correctness = {k: v for k, v in report.items()}
        if report["ok"]:
            return self.result(Status.OK, report["message"], phase="done", env=env, timing=timing,
                               correctness=correctness)
        trial = report["failed_trial"]
        seed = ctx.seeds["trials"][trial] if trial is not None else None
        return self.result(Status.INCORRECT, f"trial {trial} (seed {seed}): {report['message']}", phase="judge",
                           env=env, timing=timing, correctness=correctness)

    def _timing(self, outcome: Outcome) -> dict[str, Any]:
        timing: dict[str, Any] = {}
        for event in outcome.all("timing"):
            timing[event["role"]] = event["stats"]
        if "reference" in timing and "solution" in timing and timing["solution"]["median_ms"] > 0:
            timing["speedup"] = timing["reference"]["median_ms"] / timing["solution"]["median_ms"]
        return timing

    def _judge(self, outcome: Outcome) -> dict[str, Any]:
        import json
        ctx = self.ctx
        report_path = self.work_dir / "judge" / "report.json"
        request = {"problem_path": str(self.pair.problem.path), "device": ctx.device, "seeds": ctx.seeds,
                   "outputs": outcome.all("output"), "report_path": str(report_path),
                   "tolerance": {"atol": ctx.cfg.correctness.atol, "rtol": ctx.cfg.correctness.rtol}}
        judged = run_module("harness.judge", request, self.work_dir / "judge", limit_s=ctx.cfg.timeouts.judge_s,
                            env={} if ctx.device == "cuda" else {"CUDA_VISIBLE_DEVICES": ""})
        if judged.timed_out:
            return {"error": f"judge exceeded timeouts.judge_s={ctx.cfg.timeouts.judge_s:g} s"}
        if not report_path.exists():
            how = f"signal {judged.signal_name}" if judged.signal_name else f"exit code {judged.returncode}"
            return {"error": f"judge died ({how})", "detail": judged.log_tail}
        return json.loads(report_path.read_text())
