"""Result values: the Status enum and the immutable EvalResult record.

Schema history (bump SCHEMA_VERSION on any incompatible change):
  1  first version: one JSON per (problem, solution) pair.
  2  precision classes (correctness.precision), per-class baselines (timing.reference_fp32,
     timing.baseline), flags (library passthrough, timing inconsistency), profile, status rejected.
"""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, Mapping

SCHEMA_VERSION = 2


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
    started_at: str = ""
    finished_at: str = ""
    duration_s: float = 0.0
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
        if version != SCHEMA_VERSION:
            raise ValueError(f"unsupported results schema_version {version!r} (this harness reads {SCHEMA_VERSION})")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown result fields: {sorted(unknown)}")
        kwargs = dict(d)
        kwargs["status"] = Status(d["status"])
        kwargs["flags"] = tuple(d.get("flags", ()))
        return cls(**kwargs)


def pair_key(problem_id: str, solution_name: str) -> str:
    return f"{problem_id}__{solution_name}"
