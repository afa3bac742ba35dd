"""One (problem, solution) pair: its seeds, its build step, and the verdict that turns what a
lane saw into an EvalResult.

The build step (runner side) imports the solution in a fresh process with the GPU hidden, so it
compiles on the CPU while the lanes evaluate other pairs; a build recorded in the build cache's
manifest (harness/compile/build.py) is not repeated. The evaluation (lane side, harness/run/lane.py) hands
its worker outcome, the judgement and the reference timings to `verdict` and `assemble`, which
are pure. The verdict comes from the trusted side; the worker only reports what happened.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..isolate import sandbox
from ..compile.build import write_manifest
from ..core.config import Config, build_stagger, cu_header_level, step_start
from ..verdict.checks import below_floor
from ..verdict.guards import timing_consistent
from ..verdict.timing import for_device, ratio_interval, summarize
from ..verdict.vouch import bound_slack, compact, vouch
from ..compile.failures import failure, limit_hint
from ..isolate.isolation import Outcome, run_module
from ..core.precision import baseline as baseline_of
from ..compile.recipes import Compiled, Compiler, Compiles
from ..core.results import EvalResult, Status
from ..core.solutions import Pair, problem_names_used


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
    build_threads: int = 1          # MAX_JOBS for each build worker (placement.build_jobs)
    torch_version: str = ""         # part of the build manifest's key
    env: dict[str, Any] = field(default_factory=dict)
    extra_shapes: dict[str, list] = field(default_factory=dict)  # problem id -> overrides
    plan: dict[str, Any] = field(default_factory=lambda: {"mode": "off", "limits": {}, "identity": "same"})
    compiles: Compiles = field(default_factory=Compiles, compare=False)  # the run's compile steps (recipes.py)

    def seeds_for(self, pair: Pair) -> dict[str, Any]:
        c = self.cfg.correctness
        return make_seeds(self.cfg.seed, self.secret, self.extra_shapes.get(pair.problem.id, []),
                          c.trials, c.extra_shape_trials)

    def hidden(self) -> list[Path]:
        """What no sandboxed process of this run reads or writes: the results, the harness's work
        folders (other pairs', the lanes'), the build cache."""
        return [Path(self.cfg.results_dir), self.work_root.parent, self.cache_dir]

    @property
    def stagger(self) -> bool:
        """Whether this run's builds are staggered (build.stagger, config.build_stagger): the one
        place the run's compilers and its lanes' build threads read it."""
        return build_stagger(self.cfg.build.stagger, self.device, self.cfg.cluster)

    def compiler(self) -> Compiler:
        """What the run's compile steps need (harness/compile/recipes.py)."""
        # cu_header auto: lean on every device (corpus100's verdicts on an H100 against a44ea8e's, and
        # the GPU smoke: docs/harness-perf.md, "The lean header on a GPU host")
        return Compiler(self.cache_dir, self.torch_version, self.arch, self.plan, [str(h) for h in self.hidden()],
                        self.worker_env(), self.cfg.timeouts.build_s, self.cfg.build.pch != "off",
                        cu_header_level(self.cfg.build.cu_header), step_start(self.cfg.build.start),
                        self.stagger, self.cfg.build.main_header)

    def worker_env(self) -> dict[str, str]:
        """What a worker of this run needs besides the harness's usual environment."""
        env = {"MAX_JOBS": str(max(1, self.build_threads)), "TORCH_EXTENSIONS_DIR": str(self.cache_dir)}
        if self.device == "cuda":
            env["TORCH_CUDA_ARCH_LIST"] = self.arch
        return env


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def request(ctx: RunContext, pair: Pair, mode: str) -> dict[str, Any]:
    """A build step's request (no seeds: it runs nothing, and its scratch holds this file)."""
    cfg = ctx.cfg.to_dict()
    return {"mode": mode, "problem_path": str(pair.problem.path), "solution_path": str(pair.solution.path),
            "device": ctx.device, "arch": ctx.arch, "cache_dir": str(ctx.cache_dir),
            "timing": cfg["timing"], "checks": cfg["checks"]}


def build_info(outcome: Outcome) -> dict[str, Any]:
    builds = outcome.all("build")
    return {"extensions": [{**{k: b.get(k) for k in ("name", "key", "dir", "cached", "seconds", "ok")},
                            **({"cpu_s": b["cpu_s"]} if "cpu_s" in b else {})} for b in builds],
            "log": "\n".join(b.get("log", "") for b in builds)}


def build_of(step: dict[str, Any], outcome: Outcome) -> dict[str, Any]:
    """A pair's build record: its build step's (`step`), with what its worker built besides (a
    pair whose build step ran earlier takes the worker's record of its cached libraries; a
    deferred build step, the worker's builds added to its own)."""
    worker = build_info(outcome)
    if not step["extensions"] and not step.get("log"):
        return worker if worker["extensions"] else step
    known = {e.get("dir") for e in step["extensions"]}
    extra = [e for e in worker["extensions"] if e.get("dir") not in known]
    if not extra:
        return step
    return {"extensions": list(step["extensions"]) + extra, "log": f"{step.get('log', '')}\n{worker['log']}"}


class PairRun:
    """A pair on the runner's side: its build step, and the job a lane evaluates."""

    def __init__(self, ctx: RunContext, pair: Pair):
        self.ctx, self.pair = ctx, pair
        self.started = now()
        self.build: dict[str, Any] = {"extensions": [], "log": ""}
        self.build_s = 0.0
        self.work_dir = ctx.work_root / f"{pair.problem.id}__{pair.solution.name}"
        self.seeds = ctx.seeds_for(pair)
        self.attempts = 0               # lanes that took it (one more after a lane died)
        self.extensions: list[dict[str, Any]] = []  # what its build step built (or an earlier one, per the manifest)
        self.solution = pair.solution.to_dict()   # with the problem's names it uses (KernelBench's namespace)
        # the CI gate's comparison with a revision (run_eval.py check --baseline-rev): the pair of
        # the solution as it was, timed in this pair's rounds (harness/run/rounds.py ReferenceRounds),
        # which is itself judged for correctness only (`timed` False)
        self.yardstick: PairRun | None = None
        self.unchanged_since = ""       # or the name of its solution at the revision, whose sources are its own
        self.timed = True
        self.build_ok = False           # its build step ended with libraries to run (or the manifest had them)
        used = problem_names_used(pair.solution.path, pair.problem.path)
        if used:
            self.solution["problem_names"] = used

    def run_build(self) -> EvalResult | None:
        """Build step, with the GPU hidden, then a compile step for each recipe it recorded that the
        build cache lacks (harness/compile/recipes.py); a result when the pair ends here (build error,
        skipped, timeout). A successful build is recorded in the cache's manifest.

        On a CUDA run an import that fails or crashes with the GPU hidden (a solution that uses
        CUDA at import: a stream, device properties, a CUDA tensor, as KernelBench allows) does not
        end the pair: it goes to its lane, whose worker imports it with its GPU visible, as does an
        import that used its extension before it was built (harness/compile/build.py Recorded); the
        worker builds there what no recipe covered (the lane evaluates one pair at a time, so no
        pair of that GPU is timed meanwhile). Its verdict, a load_error included, is the worker's."""
        t = self.ctx.cfg.timeouts
        where = self.work_dir / "build"
        policy = None
        if self.ctx.plan["mode"] != "off":  # its scratch inside its work folder; the harness's state hidden
            policy = sandbox.policy(self.ctx.plan, self.ctx.device, scratch=where / "scratch",
                                    hidden=self.ctx.hidden(), readable=[self.pair.solution.path, self.pair.problem.path])
        outcome = run_module("harness.run.worker", request(self.ctx, self.pair, "build"), where,
                             limit_s=t.run_s, phase_limits={"build": t.build_s},
                             env={**self.ctx.worker_env(), "CUDA_VISIBLE_DEVICES": ""}, policy=policy,
                             start=step_start(self.ctx.cfg.build.start))
        self.build_s = outcome.wall_s
        self.sandbox = {k: v for k, v in (outcome.last("sandbox") or {}).items() if k in ("mode", "active", "notes")}
        if self.sandbox and self.ctx.plan.get("lacks"):
            self.sandbox["without"] = list(self.ctx.plan["lacks"])
        failed = failure(outcome, limit_hint(outcome))
        notes = []
        if failed and self.ctx.device == "cuda" and failed[0] in (Status.LOAD_ERROR, Status.CRASHED):
            notes.append(f"[build step] with the GPU hidden the import failed ({failed[1]}); the solution is "
                         f"imported, and built where needed, by its worker with its GPU visible")
            failed = None
        deferred = outcome.last("deferred")
        if deferred:
            notes.append(f"[build step] {deferred['message']}; the solution is imported, with its libraries, by "
                         f"its worker")
        compiled: list[Compiled] = []
        if failed is None:
            compiler = self.ctx.compiler()
            for index, event in enumerate(outcome.all("recipe")):
                done = self.ctx.compiles.get(compiler, event["recipe"], lambda i=index: self.work_dir / f"compile{i}")
                compiled.append(done)
                self.build_s += float(done.ext.get("seconds") or 0.0)
                if done.failed:
                    failed = done.failed
                    break
        self.build = {"extensions": [c.ext for c in compiled],
                      "log": "\n".join([*(c.log for c in compiled), *notes]).strip("\n")}
        self.extensions = self.build["extensions"]
        if failed is None or failed[0] is Status.SKIPPED:
            write_manifest(self.ctx.cache_dir, self.pair.solution, self.ctx.torch_version, self.ctx.arch,
                           self.ctx.device, self.build, skipped=failed[1] if failed else None)
        if failed:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            return assemble(self.job(), *failed, phases={"build_s": self.build_s}, gpu_s=0.0, own_s=self.build_s,
                            sandbox=self.sandbox)
        return None

    def job(self) -> dict[str, Any]:
        """What a lane needs to evaluate the pair (plain data: it crosses to the lane's process)."""
        ctx = self.ctx
        config = ctx.cfg.to_dict()
        config["timing"] = for_device(config["timing"], ctx.device)  # auto: the device's numbers
        if not self.timed:
            config["timing"] = {**config["timing"], "enabled": False}
        job = {"run_id": ctx.run_id, "problem": self.pair.problem.to_dict(), "solution": self.solution,
               "problem_path": str(self.pair.problem.path), "solution_path": str(self.pair.solution.path),
               "seeds": self.seeds, "config": config, "env": ctx.env, "build": self.build,
               "build_s": self.build_s, "started_at": self.started, "device": ctx.device, "arch": ctx.arch,
               "cache_dir": str(ctx.cache_dir), "worker_env": ctx.worker_env(), "libraries": self.extensions}
        then, timed = self.yardstick, config["timing"].get("enabled", True)
        if timed and then is not None and then.build_ok:
            job["yardstick"] = {"name": then.pair.solution.name, "solution_path": str(then.pair.solution.path),
                                "libraries": then.extensions}
        elif timed and self.unchanged_since:
            job["yardstick"] = {"name": self.unchanged_since, "solution_path": str(self.pair.solution.path),
                                "libraries": [], "same_sources": True}
        return job


def assemble(job: dict[str, Any], status: Status, message: str, detail: str = "", phase: str = "", *,
             phases: dict[str, float], gpu_s: float, own_s: float, **fields: Any) -> EvalResult:
    """The EvalResult of a pair; `own_s` is the wall time of the pair's own steps so far."""
    phases = {k: round(v, 4) for k, v in phases.items()}
    phases.update(wall_s=round(own_s, 4), gpu_s=round(gpu_s, 4), overhead_s=round(own_s - gpu_s, 4))
    return EvalResult(
        problem=job["problem"], solution=job["solution"], status=status, message=message, run_id=job["run_id"],
        detail=detail, phase=phase, build=fields.pop("build", job["build"]), seeds=job["seeds"],
        config=job["config"], env=fields.pop("env", job["env"]), started_at=job["started_at"], finished_at=now(),
        duration_s=round(own_s, 3), phases=phases, precision=job["config"]["precision"], **fields)


def timing_of(events: list[dict[str, Any]], references: dict[str, dict]) -> dict[str, Any]:
    """The timing block: the references' stats and the solution's (its statistics computed here
    from the times it reported, not taken from its worker), the event time replaced by the wall
    time where they disagree (guards.timing_consistent)."""
    timing: dict[str, Any] = dict(references)
    for event in events:
        if event.get("event") == "timing":
            timing[event["role"]] = recomputed(dict(event["stats"]))
    for role, stats in timing.items():
        if "wall_median_ms" in stats and not timing_consistent(stats["median_ms"], stats["wall_median_ms"]):
            stats = dict(stats)
            stats["event_median_ms"] = stats["median_ms"]  # not trusted: report the wall time
            stats["median_ms"] = stats["wall_median_ms"]
            timing[role] = stats
    return timing


def recomputed(stats: dict[str, Any]) -> dict[str, Any]:
    """A worker's timing stats with every statistic computed from its reported rounds (its
    median, quartiles and count are its word only as far as its times are)."""
    samples = [float(x) for block in stats.get("rounds") or [] for x in block]
    if not samples:
        return stats
    return {**stats, **summarize(samples, str(stats.get("timer", ""))).__dict__}


def vouched(timing: dict[str, Any], blocks: list[dict[str, Any]], checks: dict[str, Any], device: str,
            fallback: dict[str, float] | None = None) -> dict[str, Any]:
    """The timing block with the lane's clock on the solution's timed blocks (`solution.lane_blocks`)
    and its judgement of the times the worker reported (`vouch`: harness/verdict/vouch.py), against
    the reference worker's blocks of the same rounds (the interleaved reference's `lane_blocks`);
    every role's lane blocks compacted as a result keeps them (vouch.compact)."""
    timing = dict(timing)
    solution = timing.get("solution")
    if solution and solution.get("rounds"):
        reference = next((s for s in timing.values() if isinstance(s, dict) and s.get("lane_blocks")
                          and s.get("measured_in") == "reference worker" and not s.get("reused")), {})
        timing["vouch"] = vouch(solution["rounds"], blocks, reference.get("rounds") or [],
                                reference.get("lane_blocks") or [], bound_slack(checks, device), fallback=fallback)
        timing["solution"] = {**solution, "lane_blocks": blocks}
        untrusted = _yardstick_untrusted(timing.get("yardstick"), reference, checks, device)
        if untrusted:   # the gate calls no change on times the lane cannot vouch for (record/gate.py)
            timing.pop("yardstick")
            timing["yardstick_failed"] = untrusted
    for role, stats in list(timing.items()):
        if isinstance(stats, dict):
            timing[role] = _compacted(stats)
    return timing


def _yardstick_untrusted(then: dict[str, Any] | None, reference: dict[str, Any], checks: dict[str, Any],
                         device: str) -> str:
    """Why a gate's yardstick worker's times are not vouched for ('' where they are, or it has
    none): it imports the solution, so its reported blocks, then's and now's, are held to the
    lane's clock on them as the solution's are, against the reference worker's blocks (not of the
    same rounds: compared with their median)."""
    if not then or checks.get("timing_bound", "fail") != "fail" or not reference.get("lane_blocks"):
        return ""
    for role, stats in (("then", then), ("now", then.get("now") or {})):
        if stats.get("rounds") and stats.get("lane_blocks"):
            judged = vouch(stats["rounds"], stats["lane_blocks"], reference["rounds"], reference["lane_blocks"],
                           bound_slack(checks, device), paired=False)
            if judged.get("ok") is False:
                return (f"the yardstick worker's times for '{role}' are not vouched for by the lane's clock: "
                        f"{judged['why']}")
    return ""


def _compacted(stats: dict[str, Any]) -> dict[str, Any]:
    if stats.get("lane_blocks"):
        stats = {**stats, "lane_blocks": compact(stats.get("rounds") or [], stats["lane_blocks"])}
    if isinstance(stats.get("now"), dict):
        stats = {**stats, "now": _compacted(stats["now"])}
    return stats


def speedup(timing: dict[str, Any], cls: str, run: str = "fp32", *, aa: bool = False, confidence: float = 0.95,
            seed: int = 0, process_term: float = 0.0) -> dict[str, Any]:
    """A result is compared with its class's baseline (harness/core/precision.py): in an fp32 run a
    tf32-class result with PyTorch's defaults, an fp32-class one with TF32 off; in a half run the
    run's own class with PyTorch's default in that dtype, fp32 with its strictest setting. An A/A
    pair (`aa`: the reference as its own solution) is compared with the same code as it is, PyTorch's
    defaults. Where the baseline was timed in rounds alternating with the solution's, the speedup
    has a confidence interval (timing.ratio_interval): `speedup_ci`, the bootstrap's over the
    rounds widened at each end by `process_term` (timing.process_term: the offset between the two
    workers' processes, which no round sees)."""
    baseline = "reference" if aa else baseline_of(run, cls)
    timing = dict(timing)
    if baseline in timing and "solution" in timing and timing["solution"]["median_ms"] > 0:
        timing["baseline"] = baseline
        timing["speedup"] = timing[baseline]["median_ms"] / timing["solution"]["median_ms"]
        ref, sol = timing[baseline].get("rounds"), timing["solution"].get("rounds")
        trusted = "event_median_ms" not in timing["solution"] and "event_median_ms" not in timing[baseline]
        if ref and sol and trusted:
            low, high = ratio_interval(ref, sol, confidence, seed)
            low, high = low / (1 + process_term), high * (1 + process_term)
            # the figure shown lies inside its own interval: a bootstrap's ends can miss the
            # whole-sample ratio where a few rounds dominate (seen on a busy 2-core CPU)
            timing["speedup_ci"] = [round(min(low, timing["speedup"]), 5), round(max(high, timing["speedup"]), 5)]
            timing["confidence"] = confidence
            timing["process_term"] = process_term
    return timing


def flags_of(checks: dict[str, Any], timing: dict[str, Any], profile: dict[str, Any],
             problem_checks: dict[str, Any] | None = None) -> tuple[list[str], list[str]]:
    flags, failures = [], []
    if below_floor(timing, (problem_checks or {}).get("floor")):
        flags.append("below_floor")
        if checks.get("below_floor", "fail") == "fail":
            failures.append("below_floor")
    flags.extend(problem_flags(problem_checks))  # the problem's, on every result of it: it fails no solution
    if profile and profile.get("share", 0.0) > checks["library_share"]:
        flags.append("library_passthrough")
        if checks["library_passthrough"] == "fail":
            failures.append("library_passthrough")
    judged = timing.get("vouch") or {}
    if judged.get("ok") is False or (judged and judged.get("ok") is None and judged.get("why") != "no timed block"):
        flag = "timing_untrusted" if judged.get("ok") is False else "timing_unvouched"
        flags.append(flag)
        if checks.get("timing_bound", "fail") == "fail":
            failures.append(flag)
    if "event_median_ms" in (timing.get("solution") or {}):
        flags.append("timing_inconsistent")
        if checks["timing_consistency"] == "fail":
            failures.append("timing_inconsistent")
    if timing.get("unpinned_blocks"):  # a thread of the solution's worker ran off the timing CPU (harness/run/placement.py)
        flags.append("timing_unpinned")
        if checks.get("placement", "fail") == "fail":
            failures.append("timing_unpinned")
    if timing.get("reference_disturbed_ms"):  # the worker left work running on the GPU while the lane timed
        flags.append("reference_disturbed")
        if checks["timing_consistency"] == "fail":
            failures.append("reference_disturbed")
    return flags, failures


def problem_flags(problem_checks: dict[str, Any] | None) -> tuple[str, ...]:
    """The flags a result carries for its problem alone (whatever its status)."""
    return ("degenerate_problem",) if ((problem_checks or {}).get("dependence") or {}).get("degenerate") else ()


def verdict(job: dict[str, Any], report: dict[str, Any], timing: dict[str, Any],
            profile: dict[str, Any], problem_checks: dict[str, Any] | None = None) -> tuple[Status, str, str, dict[str, Any]]:
    """(status, message, phase, result fields) of a pair whose worker finished and was judged;
    `problem_checks`: what the lane measured of the problem and the device (harness/verdict/checks.py)."""
    weights = report.get("weight_diagnostics") or []
    if not report["ok"]:
        failed = report["failed"] or {}
        kind = failed.get("kind", "trial")
        named = {"profile": "the profiled call", "confirm": f"near-bound trial {failed.get('trial')}"}
        where = (named.get(kind, f"{kind} {failed.get('trial')}") + f" (seed {failed.get('seed')}"
                 + (f", shape overrides {failed['overrides']}" if failed.get("overrides") else "") + ")")
        message = f"{where}: {report['message']}"
        if weights:
            message = f"weights differ from the reference ({'; '.join(weights)}); then {message}"
        return Status.INCORRECT, message, "judge", {"timing": timing, "correctness": report, "profile": profile,
                                                    "flags": problem_flags(problem_checks)}
    cls = report["precision"]
    timing = speedup(timing, cls, job["config"]["precision"], aa=job["solution"].get("kind") == "reference",
                     confidence=job["config"]["timing"].get("confidence", 0.95), seed=job["seeds"]["base"],
                     process_term=job["config"]["timing"].get("process_term", 0.0))
    flags, failures = flags_of(job["config"]["checks"], timing, profile, problem_checks)
    median = (timing.get("solution") or {}).get("median_ms")
    if profile and profile.get("total_us") and median:
        # the profiled call's time over the timed calls' median: a dispatch mode times its
        # operators, which a solution can see, and which slows launch-bound calls by itself
        profile = {**profile, "timed_ratio": round(profile["total_us"] / 1e3 / median, 4)}
    message = f"{cls} class; {report['message']}"
    if report.get("near_bound"):
        message += f"; {report['near_bound']['trials']} more trials passed, as near its bound (correctness.near_bound)"
    if weights:
        message += f"; note: weights differ from the reference ({'; '.join(weights)})"
    if job["solution"].get("problem_names"):
        message += f"; note: uses the problem's names: {', '.join(job['solution']['problem_names'])}"
    if flags:
        message += "; flagged: " + ", ".join(flags)
    status = Status.REJECTED if failures else Status.OK
    if failures:
        message = f"rejected ({', '.join(failures)}): {message}"
    floor_line = below_floor(timing, (problem_checks or {}).get("floor"))
    if floor_line:
        message += f"; {floor_line}"
    if {"timing_untrusted", "timing_unvouched"} & set(flags):
        message += f"; the lane's clock: {timing['vouch']['why']}"
    load, cores = timing.get("host_load") or (0.0, 0)
    if cores and load > cores:   # a CPU lane: its timing shares the cores with whatever else runs
        message += (f"; note: the host was busy (load {load:g} on {cores} core(s)), which the interval may not "
                    f"cover: time it again on a quiet host")
    return status, message, "done", {"timing": timing, "correctness": report, "profile": profile,
                                     "flags": tuple(flags)}
