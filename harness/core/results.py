"""Result values: the Status enum and the immutable EvalResult record.

Schema history (bump SCHEMA_VERSION on any incompatible change):
  1  first version: one JSON per (problem, solution) pair.
  2  precision classes (correctness.precision), per-class baselines (timing.reference_fp32,
     timing.baseline), flags (library passthrough, timing inconsistency), profile, status rejected.
  3  `phases`: the pair's own wall time per phase, its GPU time and overhead (PHASES below);
     `duration_s` is the pair's own time (was: since the run started). Version 2 files are read
     as version 3 with empty phases.
  4  `precision`: the run's precision (fp32, fp16, bf16; harness/core/precision.py); classes fp16 and
     bf16; a half run's strict baseline is timing.reference_strict. Versions 2 and 3 are read as
     fp32 runs.
  5  timing in rounds: timing.solution.rounds and the compared baseline's rounds (interleaved:
     true), timing.speedup_ci and timing.confidence; solution.kind ("reference" for an A/A pair);
     per output correctness.outputs[].rel_l2_bounds and rounding (the tf32 class's bound from the
     reference's own rounding errors); the flag reference_disturbed. Versions 2-4 are read as they
     are (no rounds, no interval).
  6  `sandbox`: the sandbox the pair's solution code ran in (harness/isolate/sandbox.py): its mode and
     the mechanisms active ({} where none was reported: a pair that never started a worker).
     Versions 2-5 are read with an empty sandbox.
  7  `problem_checks`: what the lane measured of the problem and the device (harness/verdict/checks.py):
     the reference's dependence on its inputs (`dependence`) and the physical floor of a call
     (`floor`); the flags degenerate_problem and below_floor; correctness.checked.timed_calls
     and timed_rule (the secret sample of timed calls). Versions 2-6 are read with none.
"""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, Mapping

SCHEMA_VERSION = 7
READABLE_VERSIONS = (2, 3, 4, 5, 6, 7)

# The keys of EvalResult.phases, in seconds: where the pair's own wall time went. `wall_s` is the
# pair's time (its build step, its evaluation, its store); `gpu_s` the time the device spent in
# its timed, warm-up and checked calls (the solution's and, where this pair measured it, the
# reference's); `overhead_s` = wall_s - gpu_s. Phases a pair did not go through are absent.
PHASES = ("build_s", "startup_s", "reference_s", "load_s", "construct_s", "correctness_s", "timing_s",
          "profile_s", "diagnose_s", "oom_retry_s", "truth_s", "judge_s", "store_s", "wall_s", "gpu_s",
          "overhead_s")


class Status(str, enum.Enum):
    OK = "ok"                      # built, ran, and matched ground truth
    INCORRECT = "incorrect"        # ran, but output differs (values, shape, dtype, type)
    BUILD_ERROR = "build_error"    # load_inline failed to compile or link
    LOAD_ERROR = "load_error"      # the solution module failed to import, or lacks ModelNew
    RUNTIME_ERROR = "runtime_error"  # exception while constructing or running ModelNew
    OOM = "out_of_memory"          # the device (or host) ran out of memory
    TIMEOUT = "timeout"            # a phase ran past its wall-clock limit; the worker was killed
    CRASHED = "crashed"            # the worker died (signal, abort) without reporting
    REJECTED = "rejected"          # correct, but a check set to "fail" tripped (e.g. library passthrough)
    SKIPPED = "skipped"            # not evaluated, with the reason in the message
    HARNESS_ERROR = "harness_error"  # the harness itself failed (e.g. reference could not run)

    @property
    def passed(self) -> bool:
        return self is Status.OK

    @property
    def evaluated(self) -> bool:
        """Skipped pairs are not evaluated and do not decide the exit code."""
        return self is not Status.SKIPPED


@dataclass(frozen=True)
class TimingStats:
    """Summary of one timed function: all in milliseconds."""
    median_ms: float
    iqr_ms: float
    q1_ms: float
    q3_ms: float
    min_ms: float
    max_ms: float
    mean_ms: float
    samples: int
    timer: str  # "cuda_event" or "host"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TimingStats":
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class EvalResult:
    problem: Mapping[str, Any]       # id, family, path, sha256
    solution: Mapping[str, Any]      # name, path, sha256
    status: Status
    message: str                     # one actionable line
    run_id: str = ""
    detail: str = ""                 # full traceback / compiler log / worker log tail
    phase: str = ""                  # phase in which the pair ended (build, load, construct, correctness, timing, judge)
    correctness: Mapping[str, Any] = field(default_factory=dict)
    flags: tuple[str, ...] = ()      # e.g. ("library_passthrough",): shown in the table
    profile: Mapping[str, Any] = field(default_factory=dict)  # library share and top kernels
    timing: Mapping[str, Any] = field(default_factory=dict)   # solution/reference TimingStats dicts, speedup
    build: Mapping[str, Any] = field(default_factory=dict)
    seeds: Mapping[str, Any] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, Any] = field(default_factory=dict)
    phases: Mapping[str, Any] = field(default_factory=dict)  # seconds per phase (PHASES)
    started_at: str = ""
    finished_at: str = ""
    duration_s: float = 0.0          # the pair's own time (phases["wall_s"])
    precision: str = "fp32"          # the run's precision: the dtype of both models and the inputs
    sandbox: Mapping[str, Any] = field(default_factory=dict)  # mode, active mechanisms, notes (harness/isolate/sandbox.py)
    problem_checks: Mapping[str, Any] = field(default_factory=dict)  # dependence, floor (harness/verdict/checks.py)
    schema_version: int = SCHEMA_VERSION

    @property
    def key(self) -> str:
        return pair_key(self.problem["id"], self.solution["name"])

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "EvalResult":
        version = d.get("schema_version")
        if version not in READABLE_VERSIONS:
            raise ValueError(f"unsupported results schema_version {version!r} (this harness reads "
                             f"{', '.join(map(str, READABLE_VERSIONS))})")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown result fields: {sorted(unknown)}")
        kwargs = {**d, "schema_version": SCHEMA_VERSION}
        kwargs["status"] = Status(d["status"])
        kwargs["flags"] = tuple(d.get("flags", ()))
        return cls(**kwargs)


def with_store_time(result: EvalResult, store_s: float) -> EvalResult:
    """The result with the time its storing takes added to its phases (wall, overhead, duration)."""
    phases = dict(result.phases)
    phases["store_s"] = round(store_s, 4)
    for key in ("wall_s", "overhead_s"):
        phases[key] = round(phases.get(key, 0.0) + store_s, 4)
    return dataclasses.replace(result, phases=phases, duration_s=round(result.duration_s + store_s, 3))


def pair_key(problem_id: str, solution_name: str) -> str:
    return f"{problem_id}__{solution_name}"
