"""Frozen configuration loaded from YAML; unknown keys are rejected with file and key named.

CLI overrides are applied in one place: `with_overrides(cfg, {"timing.min_samples": 5})`.
"""
from __future__ import annotations

import collections.abc
import dataclasses
import re
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from .errors import BadInput
from .precision import CLASSES, PRECISIONS, classes


@dataclass(frozen=True)
class Tolerance:
    """A precision class: elementwise |out - truth| <= atol + rtol*|truth| AND
    ||out - truth|| / ||truth|| <= rel_l2 (so small outputs cannot pass on atol alone).

    `between` (the tf32 class): the relative-L2 bound of each output is set between the errors the
    reference makes with its operands rounded to TF32 (e_tf32) and to bf16 (e_bf16),
    e_tf32^(1 - between) * e_bf16^between, never above rel_l2 nor below the fp32 class's bound
    (harness/verdict/numerics.py: rounding_errors). `atol_rms` (with `between`): each output's atol is
    at least atol_rms times the RMS error of that same TF32-rounded reference (e_tf32 times the
    truth's RMS), so that an output whose sums are large next to atol (a matmul's, K products of
    randn) is not held elementwise to less than TF32 arithmetic itself makes."""
    atol: float
    rtol: float
    rel_l2: float
    between: float | None = None
    atol_rms: float | None = None


@dataclass(frozen=True)
class CorrectnessConfig:
    trials: int = 5            # trials on the benchmark shape, each with fresh inputs from its own seed
    extra_shape_trials: int = 2  # trials on each extra shape
    # calibrated against float64 ground truth (tests/test_calibration.py): PyTorch strict fp32
    # passes fp32 with >= 10x margin; PyTorch's default TF32 passes tf32 with >= 5x, fails fp32
    fp32: Tolerance = field(default_factory=lambda: Tolerance(atol=5e-5, rtol=5e-5, rel_l2=1e-5))
    tf32: Tolerance = field(default_factory=lambda: Tolerance(atol=5e-3, rtol=5e-3, rel_l2=3e-3, between=0.75,
                                                                        atol_rms=16.0))
    # half-precision runs (harness/core/precision.py): fp32 math rounded once to the dtype passes with
    # >= 10x margin, PyTorch's cuDNN output with >= 5x; in fp16, bf16 arithmetic fails
    fp16: Tolerance = field(default_factory=lambda: Tolerance(atol=5e-3, rtol=5e-3, rel_l2=2.4e-3))
    bf16: Tolerance = field(default_factory=lambda: Tolerance(atol=4e-2, rtol=4e-2, rel_l2=2e-2))
    # extra correctness shapes: problem id, number or family -> list of overrides of the
    # problem's module-level constants, e.g. {"57": [{"batch_size": 1, "height": 17, "width": 33}]}
    extra_shapes: Mapping[str, Any] = field(default_factory=dict)
    # ground truth kept in a lane across the pairs of a run, at most this share of the device's
    # memory (the host's on the CPU); 0 keeps none
    truth_cache_fraction: float = 0.3
    # a pair that would pass with an output within near_bound x of its class's bound (its least
    # margin) is judged by the draw of its inputs: it runs near_bound_trials more trials of the
    # benchmark shape, on fresh inputs in a fresh worker, and passes only if they pass too
    # (harness/run/confirm.py). auto: 20
    near_bound: float = 1.5
    near_bound_trials: int | str = "auto"
    # the tf32 class's atol from TF32's own error on large sums (Tolerance.atol_rms): auto (= on, every
    # device) | on | off
    large_sums: str = "auto"
    # an output that fails only its rel L2 bound where the float32 reference's own error on it is above
    # that bound (rounding noise: KernelBench level 2's 41) judged at NOISE_FACTOR x that error, and such a
    # problem flagged degenerate (harness/verdict/against.py, checks.dependence): auto (= on, every
    # device; on CUDA since the GPU smoke ran with it) | on | off
    noise_bound: str = "auto"


@dataclass(frozen=True)
class ChecksConfig:
    library_passthrough: str = "flag"   # flag | fail: GPU time dominated by library kernels
    library_share: float = 0.5          # share of the solution's GPU time that counts as dominated
    timing_consistency: str = "flag"    # flag | fail: CUDA-event time far below wall time
    # flag | fail: the worker's reported times below what the lane's own clock saw of its calls or of
    # its whole timed blocks, less the harness's own per-call cost there (the reference worker's), by
    # more than timing_bound_ms + timing_bound_share x its median + timing_bound_overhead_share x that
    # cost, + (timing_bound_noise_ms + timing_bound_noise_share x that cost) / sqrt(the calls timed)
    # + timing_bound_spread_z x the standard error the reference worker's own rounds put on the
    # difference (harness/verdict/vouch.py)
    timing_bound: str = "fail"
    timing_bound_ms: float | str = "auto"              # auto: the device's (vouch.AUTO_BOUND)
    timing_bound_share: float = 0.1
    timing_bound_overhead_share: float | str = "auto"  # auto: the device's (vouch.AUTO_BOUND)
    timing_bound_noise_share: float | str = "auto"     # ... + this / sqrt(calls timed) x that cost
    timing_bound_noise_ms: float | str = "auto"        # ... + this / sqrt(calls timed)
    timing_bound_spread_z: float | str = "auto"        # ... + this many standard errors of the rounds' own noise
    # on: the lane's clock also judges each cycle from a timed call to the next (harness/verdict/vouch.py
    # cycle_clock) | off | auto = on
    timing_cycle: str = "auto"
    below_floor: str = "fail"           # flag | fail: faster than its output can be written (harness/verdict/checks.py)
    placement: str = "fail"             # flag | fail: a timed worker's thread found off the timing CPU (harness/run/placement.py)
    timed_output_checks: int = 6        # timed calls whose outputs are checked, chosen in secret by the lane
    secret_timed_checks: str = "auto"   # on: every timed call handed over alike | off: the last ones | auto
    poison: bool = True                 # fill the allocator's free memory with NaN before checked calls
    # on: only outputs of the trials and timed calls the lane asked for are taken, and a trial never
    # handed over fails the pair (harness/verdict/asked.py) | off | auto: on
    trial_coverage: str = "auto"


@dataclass(frozen=True)
class TimingConfig:
    enabled: bool = True       # false: correctness only (the check command's default), no timing or profile
    # full: the verdict's timing (the device's calls and rounds); screening: for volume, fewer calls and
    # rounds where those are auto (timing.SCREENING), and a pair found wrong before its timed calls is
    # not timed (its worker stopped there); the result says which (timing.profile)
    profile: str = "full"
    warmup: int = 3            # untimed calls before sampling
    min_samples: int = 10
    # at most this many timed calls a side; auto = the device's (timing.AUTO_TIMING: 1000 on CUDA,
    # where the H200's A/A held 1.00x +-3% with 1000 in 30 rounds; 100 on the CPU)
    max_samples: int | str = "auto"
    min_time_s: float = 0.5    # keep sampling until this much timed work (after min_samples)
    max_time_s: float = 10.0   # stop sampling after this much wall time (once 3 samples exist)
    flush_l2: bool = True      # overwrite a buffer twice the L2 size before every timed call
    # the reference is timed once per problem and lane, and again once its timing is older than
    # this or the GPU's temperature moved by more than this since
    reference_max_age_s: float = 600.0
    reference_max_temp_delta_c: float = 10.0
    # the timed calls are taken in rounds that alternate the reference (timed by the lane, in the
    # role the pair's class is compared with) and the solution (timed by its worker), so both see
    # the same machine; the speedup's confidence interval is a bootstrap over the rounds
    rounds: int | str = "auto"    # auto = the device's (timing.AUTO_TIMING: 30 on CUDA, 10 on the CPU)
    confidence: float = 0.95
    # both workers of a pair (the reference's and the solution's) pinned to one CPU, the lane's,
    # while they are timed (harness/run/placement.py): auto = on CUDA lanes, on, off
    pin_cpu: str = "auto"
    # a solution already wrong when its timed calls begin (the full profile times its calls, so that a
    # crash or hang there is its status): skip = without the reference's rounds, which only a speedup
    # would use; time = with them; auto = skip
    wrong_rounds: str = "auto"
    # while a pair is timed on a lane that pins it (pin_cpu): run = the spares still starting (importing
    # torch: host work, no CUDA context before their pair) go on, on the lane's CPUs but the timing
    # CPUs, as the builds do; stop = every spare stopped; auto = run (the A/A on an H100,
    # docs/harness-perf.md; harness/run/pool.py)
    priming_spares: str = "auto"
    # how a lane's workers start: fork = forked by the lane's fork server, which imported torch and the
    # worker once (harness/isolate/forkserver.py); exec = a fresh interpreter each; auto = exec (forked
    # workers have not yet run on a GPU: docs/harness-perf.md)
    worker_start: str = "auto"
    # the offset between two worker processes that the rounds cannot see, as a share of the
    # speedup: the interval is widened by it at each end (A/A on the H200, pinned: 15 of 91
    # intervals of the rounds alone missed 1.0, by at most 1.1%, 13 of them by at most 0.4%; at
    # 1000 calls in 30 rounds 2 of 24 missed it, by 1.3% (35_LSTM) and 0.8% (elementwise_add))
    process_term: float = 0.015
    # check --baseline-rev: the solution as it was at the revision and as it is timed in the pair's
    # own rounds by one yardstick worker (harness/run/rounds.py ReferenceRounds); off: the revision as a
    # pair of its own, compared by the two speedups. auto = on, on every device
    gate_yardstick: str = "auto"
    # check --baseline-rev with the yardstick: where the now/then interval of the pair's rounds is
    # wider than gate_precision (a share of the ratio) at either end and holds the threshold of a
    # regression (1 - gate_max_regression), the yardstick times more rounds of then and now alone,
    # up to gate_max_rounds in all (<= rounds: none). A launch-bound solution's 10 rounds left
    # intervals 5-40% wide, so a 10% slowdown was caught in 5 of 10 runs (902 / fast on the H200,
    # docs/harness-perf.md); where 10 rounds decide, nothing is added
    gate_max_rounds: int = 50
    # ... the yardstick's blocks in this many of the pair's rounds (spread evenly: of 30, every
    # third, each as many calls as the three rounds), so that more rounds for the pair's own
    # timing (timing.rounds) do not make the gate dearer
    gate_rounds: int = 10
    gate_precision: float = 0.025
    # check: a regression is called where the whole interval of now / then lies this much below 1
    # (run_eval.py check --max-regression sets it); the yardstick adds no rounds (gate_max_rounds)
    # where its interval lies wholly on either side of 1 - this, since they could not change the call
    gate_max_regression: float = 0.05
    # check --baseline-rev with the yardstick: off, where now is beside then, the yardstick's calls
    # are not handed to the lane (then and now alike; their outputs were never judged), which a
    # launch-bound solution's block pays about 1 ms a call for. on keeps the solution's procedure.
    gate_handoff: str = "on"
    # the timed inputs moved to newly allocated memory before each block of the rounds, in every
    # worker alike (harness/verdict/timing.py LiveInputs): a process's memory can be slower or faster
    # than another's for the whole run, an offset no round sees. auto = on the CPU; on CUDA not
    # yet, until an A/A on the GPU has measured it; on | off
    move_inputs: str = "auto"


@dataclass(frozen=True)
class TimeoutConfig:
    build_s: float = 900.0     # wall-clock limit for building (compiling) one solution
    run_s: float = 600.0       # limit for everything after the build in one worker
    judge_s: float = 900.0     # bound on the lane's own work for one pair (ground truth, comparisons)
    # each call into the solution (a forward, its construction) must return within
    # max(call_s, call_factor x the reference's median time); the first call of a model (it may
    # compile or autotune) within max(that, first_call_s)
    call_s: float = 20.0
    call_factor: float = 100.0
    first_call_s: float = 40.0


def class_tolerances(correctness: dict, run: str) -> dict:
    """The run's classes' tolerances (as the config's dict has them), strictest first, with
    correctness.large_sums applied: off leaves every atol_rms out (auto is on, every device)."""
    keep = correctness.get("large_sums", "auto") != "off"
    return {name: {**correctness[name], **({} if keep else {"atol_rms": None})} for name in classes(run)}


def noise_bound(correctness: dict) -> bool:
    """Whether correctness.noise_bound applies: auto is on on every device (on CUDA since the GPU
    smoke ran with it, 2026-12-07)."""
    return correctness.get("noise_bound", "auto") in ("auto", "on")


def step_start(setting: str) -> str:
    """build.start's setting as a start method of harness/isolate/isolation.py run_module: auto is
    fork on Linux (a fresh interpreter's import of torch, 4-5 CPU-s on a GPU host, paid once per
    run instead of once per step: docs/harness-perf.md "The fork lever"), exec elsewhere."""
    if setting == "auto":
        return "fork" if sys.platform == "linux" else "exec"
    return setting


def build_stagger(setting: str, device: str, cluster: str = "local") -> bool:
    """Whether a run on `device` staggers its builds (build.stagger): auto is on for CUDA runs (half of
    corpus100 on an H100 and on an H200 host: the lane's first pair 8 and 11 s sooner, the same
    verdicts; docs/harness-perf.md), off on the CPU; never for Ray's build tasks (this host's build
    threads only)."""
    return cluster != "ray" and (setting == "on" or (setting == "auto" and device == "cuda"))


def worker_start(setting: str, device: str) -> str:
    """timing.worker_start's setting as a start method for a lane's workers on `device`: auto is fork
    for CUDA runs on Linux (a worker's start without torch's import: about 8 of its 11 CPU-s on a GPU
    host; an H100 host's A/A of fork against exec, 8 of 8 intervals holding 1.0, and the CUDA clock
    red team passing with it: docs/harness-perf.md), exec on the CPU, where a forked worker inherits
    the server's torch thread pool (two threads where a sandboxed exec'd worker has one: the CPU clock
    red team's "the patch took" check read 27.8 ms a call against 2.16)."""
    if sys.platform != "linux":
        return "exec"
    if setting == "auto":
        return "fork" if device == "cuda" else "exec"
    return setting


def cu_header_level(setting: str) -> str:
    """build.cu_header's setting as a level of harness/compile/compiler.py's HEADER_RUNGS: auto is
    lean (for compile-only and runs alike), on is small."""
    return {"auto": "lean", "on": "small"}.get(setting, setting)


@dataclass(frozen=True)
class BuildConfig:
    jobs: int = 0              # parallel build workers; 0 = number of CPU cores
    cache_dir: str = ""        # "" = $KB_BUILD_CACHE or ~/.cache/kb-harness/builds
    pch: str = "auto"          # torch/extension.h precompiled for main.cpp (harness/compile/pch.py): auto (= on,
                               # every device) | on | off
    cu_header: str = "auto"    # cuda.cu compiled first with a smaller torch header, else again with torch's
                               # (harness/compile/compiler.py HEADER_RUNGS): lean (the tensor and factories,
                               # then torch/types.h) | on (torch/types.h) | off | auto (= lean, compile-only
                               # and runs)
    yield_to_lanes: str = "auto"  # where lanes pin timed workers, builds run off their timing CPUs (harness/run/
                                  # placement.py build_cpus) at nice 10: auto (= on, every device) | on | off
    start: str = "auto"        # how build and compile steps (and pch's helper) start: fork (from a server that
                               # imported torch once, harness/isolate/forkserver.py) | exec (a fresh interpreter
                               # each) | auto (= fork on Linux)
    main_header: str = "lean"  # main.cpp's torch/extension.h (harness/compile/compiler.py): full (torch's) | lean
                               # (without torch's C++ frontend, precompiled where build.pch is on; again with
                               # torch's where main.cpp needs more): 2 of 7 CPU-s less a main.cpp with the
                               # header precompiled, 5 of 15 without (docs/harness-perf.md); lean by default
                               # since corpus100 ran with it on CUDA
    stagger: str = "auto"      # on: a run's builds at priorities by their place in the schedule (its first at nice
                               # 10, its first wave's last and every later one at 19: placement.build_nice), so
                               # the first pairs are built first and the lane starts sooner; off: every compiler at
                               # nice 19 beside the lanes (10 on a CPU run); auto (= off until measured on a GPU host)


@dataclass(frozen=True)
class LimitsConfig:
    """What a process running solution code may use (harness/isolate/sandbox.py)."""
    network: bool = False      # true: TCP and the host's network stay reachable
    processes: int = 512       # processes and threads at once (binds root only in a user namespace)
    open_files: int = 4096
    file_size_mb: int = 8192   # the largest file it may write
    memory_gb: float = 0.0     # CPU runs: its address space; 0 = 40% of the host's memory (its lane: 50%)
    user: str = "auto"         # who it runs as when the harness is root: auto (a uid of its own each), same, UID[:GID]


@dataclass(frozen=True)
class RayConfig:
    address: str = ""          # "" = start a local Ray instance; "auto" = the cluster this node is in; "ray://HOST:PORT"


@dataclass(frozen=True)
class Config:
    device: str = "auto"       # auto | cuda | cpu
    gpus: int = 1              # evaluation lanes, one per GPU; 0 = every GPU of the host (--gpus all)
    cluster: str = "local"     # local (this host's lanes) | ray (lanes and builds on a Ray cluster, harness/run/cluster.py)
    precision: str = "fp32"    # fp32 | fp16 | bf16: the dtype of both models and the inputs (harness/core/precision.py)
    seed: int = 0              # base seed; init and trial seeds derive from it
    secret_seed: int = -1      # mixed into input seeds; -1 = a fresh random secret per run (recorded)
    results_dir: str = "results"
    sandbox: str = "auto"      # auto | required | off: around every process that runs solution code
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    correctness: CorrectnessConfig = field(default_factory=CorrectnessConfig)
    timing: TimingConfig = field(default_factory=TimingConfig)
    timeouts: TimeoutConfig = field(default_factory=TimeoutConfig)
    build: BuildConfig = field(default_factory=BuildConfig)
    checks: ChecksConfig = field(default_factory=ChecksConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    source: str = "<defaults>"  # file the config came from (not a YAML key)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("source")
        return d


DEVICES = ("auto", "cuda", "cpu")
_NOT_KEYS = {"source"}


def _check_value(path: str, key: str, value: Any, typ: Any) -> Any:
    if typing.get_origin(typ) in (typing.Union, types.UnionType):  # X | None, or int | str ("auto")
        if value is None and type(None) in typing.get_args(typ):
            return None
        kinds = [t for t in typing.get_args(typ) if t is not type(None)]
        if kinds in ([int, str], [float, str]):
            if isinstance(value, int) and not isinstance(value, bool):
                return value if kinds[0] is int else float(value)
            if kinds[0] is float and isinstance(value, float):
                return value
            if value == "auto":
                return value
            what = "a whole number" if kinds[0] is int else "a number"
            raise BadInput(path, f"key '{key}' must be {what} or auto, got {type(value).__name__} {value!r}")
        typ = kinds[0]
    if typing.get_origin(typ) is collections.abc.Mapping:
        if not isinstance(value, Mapping):
            raise BadInput(path, f"key '{key}' must be a mapping, got {type(value).__name__}")
        return {str(k): v for k, v in value.items()}
    if typ is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if typ is bool and isinstance(value, bool):
        return value
    if key == "gpus" and value == "all":
        return 0
    if typ is str and isinstance(value, bool):  # YAML 1.1 reads a bare on/off (yes/no) as a boolean
        return "on" if value else "off"
    if key == "limits.user" and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if typ in (int, float, str) and isinstance(value, typ) and not isinstance(value, bool):
        return value
    raise BadInput(path, f"key '{key}' must be {typ.__name__}, got {type(value).__name__} {value!r}")


def _build(cls: type, data: Any, path: str, prefix: str, defaults: Any = None) -> Any:
    """Build dataclass `cls` from a mapping; keys not given come from `defaults` (an instance)."""
    if not isinstance(data, Mapping):
        where = f"key '{prefix.rstrip('.')}'" if prefix else "top level"
        raise BadInput(path, f"{where} must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)} - _NOT_KEYS
    kwargs: dict[str, Any] = {}
    if defaults is not None:
        kwargs = {name: getattr(defaults, name) for name in fields}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if key not in fields:
            raise BadInput(path, f"unknown key '{dotted}'{_near(key, fields, prefix)} (known here: "
                                 f"{', '.join(sorted(fields))}; every key: configs/default.yaml, docs/usage.md)")
        typ = hints[key]
        if dataclasses.is_dataclass(typ):
            kwargs[key] = _build(typ, value, path, dotted + ".", kwargs.get(key))
        else:
            kwargs[key] = _check_value(path, dotted, value, typ)
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise BadInput(path, f"key '{prefix.rstrip('.')}' is incomplete: {exc}") from None


def validate(cfg: Config, where: str | None = None) -> Config:
    """`cfg` checked; a bad value is named with `where` it came from (the file, or the command line)."""
    where = where or cfg.source
    if cfg.device not in DEVICES:
        raise BadInput(where, f"device must be one of {', '.join(DEVICES)}, got {cfg.device!r}")
    c, t, o, k = cfg.correctness, cfg.timing, cfg.timeouts, cfg.checks
    if c.trials < 1 or c.extra_shape_trials < 1:
        raise BadInput(where, "correctness.trials and correctness.extra_shape_trials must be >= 1")
    for name in CLASSES:
        tol = getattr(c, name)
        if min(tol.atol, tol.rtol, tol.rel_l2) < 0:
            raise BadInput(where, f"correctness.{name} tolerances must be >= 0")
        if tol.between is not None and not 0 <= tol.between <= 1:
            raise BadInput(where, f"correctness.{name}.between must be in [0, 1] (or null), got {tol.between}")
        if tol.atol_rms is not None and not (tol.atol_rms >= 0 and tol.between is not None):
            raise BadInput(where, f"correctness.{name}.atol_rms must be >= 0 and needs between (or null), "
                                  f"got {tol.atol_rms}")
    if c.noise_bound not in ("auto", "on", "off"):
        raise BadInput(where, f"correctness.noise_bound must be auto, on or off, got {c.noise_bound!r}")
    if c.large_sums not in ("auto", "on", "off"):
        raise BadInput(where, f"correctness.large_sums must be auto, on or off, got {c.large_sums!r}")
    for key, shapes in c.extra_shapes.items():
        if not isinstance(shapes, list) or not all(isinstance(s, Mapping) and s for s in shapes):
            raise BadInput(where, f"correctness.extra_shapes.{key} must be a list of non-empty mappings "
                                  "(module-level constant -> value)")
    for name in ("library_passthrough", "timing_consistency", "below_floor", "placement", "timing_bound"):
        if getattr(k, name) not in ("flag", "fail"):
            raise BadInput(where, f"checks.{name} must be 'flag' or 'fail', got {getattr(k, name)!r}")
    for name in ("timing_bound_ms", "timing_bound_share", "timing_bound_overhead_share", "timing_bound_noise_share",
                 "timing_bound_noise_ms", "timing_bound_spread_z"):
        value = getattr(k, name)
        if value != "auto" and (isinstance(value, str) or value < 0):
            raise BadInput(where, f"checks.{name} must be a number >= 0{' or auto' if name != 'timing_bound_share' else ''}, "
                                  f"got {value!r}")
    if not 0 < k.library_share <= 1 or k.timed_output_checks < 0:
        raise BadInput(where, "checks.library_share must be in (0, 1] and checks.timed_output_checks >= 0")
    if k.timing_cycle not in ("auto", "on", "off"):
        raise BadInput(where, f"checks.timing_cycle must be auto, on or off, got {k.timing_cycle!r}")
    if k.trial_coverage not in ("auto", "on", "off"):
        raise BadInput(where, f"checks.trial_coverage must be auto, on or off, got {k.trial_coverage!r}")
    if k.secret_timed_checks not in ("auto", "on", "off"):
        raise BadInput(where, f"checks.secret_timed_checks must be auto, on or off, got {k.secret_timed_checks!r}")
    if t.profile not in ("full", "screening"):
        raise BadInput(where, f"timing.profile must be full or screening, got {t.profile!r}")
    if t.warmup < 0 or t.min_samples < 1 or (t.max_samples != "auto" and t.max_samples < t.min_samples):
        raise BadInput(where, "timing needs warmup >= 0 and 1 <= min_samples <= max_samples")
    if min(o.build_s, o.run_s, o.judge_s, o.call_s, o.call_factor, o.first_call_s) <= 0:
        raise BadInput(where, "timeouts must be > 0 seconds (and timeouts.call_factor > 0)")
    if cfg.precision not in PRECISIONS:
        raise BadInput(where, f"precision must be one of {', '.join(PRECISIONS)}, got {cfg.precision!r}")
    if cfg.cluster not in ("local", "ray"):
        raise BadInput(where, f"cluster must be 'local' or 'ray', got {cfg.cluster!r}")
    if cfg.gpus < 0:
        raise BadInput(where, f"gpus must be a number of GPUs >= 1 or 'all', got {cfg.gpus}")
    if c.near_bound < 1 or (c.near_bound_trials != "auto" and c.near_bound_trials < 0):
        raise BadInput(where, f"correctness.near_bound must be >= 1 and correctness.near_bound_trials auto or >= 0, "
                              f"got {c.near_bound} and {c.near_bound_trials!r}")
    if not 0 <= c.truth_cache_fraction <= 0.9:
        raise BadInput(where, "correctness.truth_cache_fraction must be in [0, 0.9]")
    if not 0 <= t.process_term < 0.5:
        raise BadInput(where, f"timing.process_term must be in [0, 0.5), got {t.process_term}")
    if t.priming_spares not in ("auto", "stop", "run"):
        raise BadInput(where, f"timing.priming_spares must be auto, stop or run, got {t.priming_spares!r}")
    if t.worker_start not in ("auto", "fork", "exec"):
        raise BadInput(where, f"timing.worker_start must be auto, fork or exec, got {t.worker_start!r}")
    if t.wrong_rounds not in ("auto", "skip", "time"):
        raise BadInput(where, f"timing.wrong_rounds must be auto, skip or time, got {t.wrong_rounds!r}")
    if t.pin_cpu not in ("auto", "on", "off"):
        raise BadInput(where, f"timing.pin_cpu must be auto, on or off, got {t.pin_cpu!r}")
    if t.move_inputs not in ("auto", "on", "off"):
        raise BadInput(where, f"timing.move_inputs must be auto, on or off, got {t.move_inputs!r}")
    if t.gate_handoff not in ("on", "off"):
        raise BadInput(where, f"timing.gate_handoff must be on or off, got {t.gate_handoff!r}")
    if t.gate_yardstick not in ("auto", "on", "off"):
        raise BadInput(where, f"timing.gate_yardstick must be auto, on or off, got {t.gate_yardstick!r}")
    if t.gate_rounds < 2:
        raise BadInput(where, f"timing.gate_rounds must be >= 2, got {t.gate_rounds}")
    if not 0 <= t.gate_max_regression < 1:
        raise BadInput(where, f"timing.gate_max_regression must be in [0, 1), got {t.gate_max_regression}")
    if t.gate_max_rounds < 0 or not 0 < t.gate_precision < 0.5:
        raise BadInput(where, f"timing.gate_max_rounds must be >= 0 and timing.gate_precision in (0, 0.5), got "
                              f"{t.gate_max_rounds} and {t.gate_precision}")
    if (t.rounds != "auto" and t.rounds < 1) or not 0.5 <= t.confidence < 1:
        raise BadInput(where, "timing.rounds must be auto or >= 1 and timing.confidence in [0.5, 1)")
    if t.reference_max_age_s <= 0 or t.reference_max_temp_delta_c <= 0:
        raise BadInput(where, "timing.reference_max_age_s and timing.reference_max_temp_delta_c must be > 0")
    if cfg.build.jobs < 0:
        raise BadInput(where, "build.jobs must be >= 0")
    if cfg.build.pch not in ("auto", "on", "off"):
        raise BadInput(where, f"build.pch must be one of auto, on, off, got {cfg.build.pch!r}")
    if cfg.build.main_header not in ("full", "lean"):
        raise BadInput(where, f"build.main_header must be one of full, lean, got {cfg.build.main_header!r}")
    if cfg.build.cu_header not in ("auto", "on", "lean", "off"):
        raise BadInput(where, f"build.cu_header must be one of auto, on, lean, off, got {cfg.build.cu_header!r}")
    if cfg.build.yield_to_lanes not in ("auto", "on", "off"):
        raise BadInput(where, f"build.yield_to_lanes must be one of auto, on, off, got {cfg.build.yield_to_lanes!r}")
    if cfg.build.start not in ("auto", "fork", "exec"):
        raise BadInput(where, f"build.start must be one of auto, fork, exec, got {cfg.build.start!r}")
    if cfg.build.stagger not in ("auto", "on", "off"):
        raise BadInput(where, f"build.stagger must be one of auto, on, off, got {cfg.build.stagger!r}")
    if cfg.sandbox not in ("auto", "required", "off"):
        raise BadInput(where, f"sandbox must be one of auto, required, off, got {cfg.sandbox!r}")
    lim = cfg.limits
    if min(lim.processes, lim.open_files, lim.file_size_mb) < 1 or lim.memory_gb < 0:
        raise BadInput(where, "limits.processes, limits.open_files and limits.file_size_mb must be >= 1, "
                              "limits.memory_gb >= 0 (0: 40% of the host's memory)")
    if lim.user not in ("auto", "same") and not re.fullmatch(r"\d+(:\d+)?", lim.user):
        raise BadInput(where, f"limits.user must be auto, same, UID or 'UID:GID' (quoted), got {lim.user!r}")
    return cfg


def load_config(path: str | Path | None) -> Config:
    if path is None:
        return validate(Config())
    path = Path(path)
    if not path.is_file():
        raise BadInput(path, "config file not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise BadInput(path, f"not valid YAML:\n{exc}") from None  # the parser's lines: its caret points at the place
    if data is None:
        data = {}
    cfg = _build(Config, data, str(path), "", Config())
    return validate(dataclasses.replace(cfg, source=str(path)))


def with_overrides(cfg: Config, overrides: Mapping[str, Any], where: str = "command line") -> Config:
    """Apply dotted-key overrides (e.g. {"timing.min_samples": 5}); values are type-checked."""
    data = cfg.to_dict()
    for dotted, value in overrides.items():
        node = data
        parts = dotted.split(".")
        for i, part in enumerate(parts[:-1]):
            if not isinstance(node.get(part), dict):
                raise BadInput(where, f"unknown config key '{dotted}'{_near(part, node, '.'.join(parts[:i]) + '.' if i else '')}"
                                      f" (keys: docs/usage.md)")
            node = node[part]
        if parts[-1] not in node:
            prefix = ".".join(parts[:-1]) + "." if len(parts) > 1 else ""
            raise BadInput(where, f"unknown config key '{dotted}'{_near(parts[-1], node, prefix)} (keys: "
                                  f"docs/usage.md)")
        node[parts[-1]] = value
    new = _build(Config, data, where, "", Config())
    return validate(dataclasses.replace(new, source=cfg.source), where)


def _near(key: str, known, prefix: str = "") -> str:
    """'; did you mean ...?' for the closest known key, '' where none is close (one, so that the
    error's line fits a terminal)."""
    import difflib
    close = difflib.get_close_matches(key, sorted(k for k in known if k not in _NOT_KEYS), n=1, cutoff=0.6)
    return f"; did you mean {prefix + close[0]!r}?" if close else ""


def parse_override(text: str) -> tuple[str, Any]:
    """'timing.min_samples=5' -> ('timing.min_samples', 5) (value parsed as YAML scalar)."""
    if "=" not in text:
        raise BadInput("--set", f"expected KEY=VALUE, got {text!r}")
    key, raw = text.split("=", 1)
    return key.strip(), yaml.safe_load(raw)
