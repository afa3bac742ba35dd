"""Timing: a timer (CUDA events or host clock), an L2 flush, and a stopping rule.

Measuring and stopping are separate: `sample(fn, timer, rule, warmup)` asks the rule after
each sample whether to stop. Printing lives elsewhere (leaderboard / runner).
"""
from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import dataclass
from typing import Callable

from ..core.results import TimingStats

# The C library's allocator in every lane and worker (both sides of a comparison alike): large
# blocks from the heap, kept after they are freed. With glibc's defaults the threshold for
# mmap'ing a block and for giving the heap's top back moves with what the process freed before,
# so whether a call's output lands on pages already mapped or on fresh ones (a page fault per
# 4 kB, inside the timed call) differs from one process to the next: on the CPU, the same add
# timed 0.77 ms in one worker and 1.35 ms in another (docs/harness-perf.md). A user's own
# GLIBC_TUNABLES is left as it is.
MALLOC_ENV = {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=1073741824:glibc.malloc.trim_threshold=1073741824"}


def malloc_env(environ) -> dict[str, str]:
    """MALLOC_ENV, unless `environ` sets GLIBC_TUNABLES already."""
    return {} if "GLIBC_TUNABLES" in environ else dict(MALLOC_ENV)


@dataclass(frozen=True)
class StoppingRule:
    """Stop once min_samples and min_time_s are both reached, or at max_samples / max_time_s."""
    min_samples: int = 10
    max_samples: int = 100
    min_time_s: float = 0.5
    max_time_s: float = 10.0

    def done(self, samples: int, measured_s: float, wall_s: float) -> bool:
        if samples >= self.max_samples:
            return True
        if samples >= 3 and wall_s >= self.max_time_s:
            return True
        return samples >= self.min_samples and measured_s >= self.min_time_s


def planned_samples(rule: StoppingRule, per_call_ms: float) -> int:
    """How many samples `rule` takes of calls of `per_call_ms` each: enough for min_time_s, within
    min_samples and max_samples, and what max_time_s allows (at least 3)."""
    per_call_ms = max(per_call_ms, 1e-6)
    wanted = max(rule.min_samples, math.ceil(rule.min_time_s * 1e3 / per_call_ms))
    allowed = max(3, int(rule.max_time_s * 1e3 / per_call_ms))
    return max(1, min(wanted, rule.max_samples, allowed))


def per_round(samples: int, rounds: int) -> tuple[int, int]:
    """(rounds, samples per round) that take about `samples` in at most `rounds` rounds."""
    rounds = max(1, min(rounds, samples))
    return rounds, math.ceil(samples / rounds)


def _resampled_ratio(rng: random.Random, pairs: list[tuple[list[float], list[float]]]) -> float:
    """median(reference) / median(solution) of one bootstrap resample of rounds, pairs kept together."""
    picked = [pairs[rng.randrange(len(pairs))] for _ in pairs]
    return statistics.median([x for r, _ in picked for x in r]) / statistics.median([x for _, s in picked for x in s])


def _interval(values: list[float], confidence: float) -> tuple[float, float]:
    values = sorted(values)
    tail = (1 - confidence) / 2
    return values[int(tail * (len(values) - 1))], values[int(math.ceil((1 - tail) * (len(values) - 1)))]


def _paired(reference: list[list[float]], solution: list[list[float]]) -> list[tuple[list[float], list[float]]]:
    return [(r, s) for r, s in zip(reference, solution) if r and s]


def ratio_interval(reference: list[list[float]], solution: list[list[float]], confidence: float, seed: int = 0,
                   resamples: int = 1000) -> tuple[float, float]:
    """Confidence interval of median(reference) / median(solution) by a bootstrap over rounds:
    rounds (a reference block and the solution block timed next to it) are drawn with replacement,
    pairs kept together, so what moved both in a round moves both in the resample."""
    pairs = _paired(reference, solution)
    if not pairs:
        return float("nan"), float("nan")
    rng = random.Random(seed)
    return _interval([_resampled_ratio(rng, pairs) for _ in range(resamples)], confidence)


def round_ratios(then: list[list[float]], now: list[list[float]]) -> list[float]:
    """Each shared round's then/now: the median of then's block over the median of now's."""
    medians = [(statistics.median(a), statistics.median(b)) for a, b in _paired(then, now)]
    return [a / b for a, b in medians if b > 0]


def same_rounds_ratio(then: list[list[float]], now: list[list[float]], confidence: float, widen: float = 1.0,
                      seed: int = 0, resamples: int = 1000) -> tuple[float, tuple[float, float]]:
    """The CI gate's now/then, (ratio, interval), from rounds both were timed in: the median over
    the rounds of each round's then/now (round_ratios), and its interval a bootstrap over those
    rounds (seed 0, 1000 resamples), widened at each end by `widen` (the process term, where the
    two were timed in two processes) and never excluding the ratio itself.

    Per round, not pooled: a launch-bound call's time moves with the host CPU's state, which can
    change within a round, so that one block of a round runs 1.5-2x slower than its partner
    (902 / fast on the H200: blocks of 0.08 and 0.14 ms). The ratio of the two pooled medians
    moves with how many such blocks each side drew (x0.884 for unchanged code, [0.803, 0.996]);
    the median of the rounds' ratios sets those rounds aside (x0.999, [0.990, 1.011]). Over 54
    recorded pairs of unchanged code the rounds' median gave intervals of median width 3.1%
    against 5.4%, 53 of 54 holding 1.0 against 51 (docs/harness-perf.md). The yardstick's
    settle() looks at this very interval, so its rounds stop only where the gate's call is made."""
    ratios = round_ratios(then, now)
    if not ratios:
        return float("nan"), (float("nan"), float("nan"))
    ratio = statistics.median(ratios)
    rng = random.Random(seed)
    low, high = _interval([statistics.median([ratios[rng.randrange(len(ratios))] for _ in ratios])
                           for _ in range(resamples)], confidence)
    return ratio, (min(low / widen, ratio), max(high * widen, ratio))


def change_called(interval: tuple[float, float], max_regression: float) -> str:
    """What the gate calls a now/then interval: "slower" where all of it lies below 1 -
    max_regression, "faster" where all of it lies above 1 + max_regression, else ""."""
    if interval[1] < 1 - max_regression:
        return "slower"
    if interval[0] > 1 + max_regression:
        return "faster"
    return ""


def regression_decided(interval: tuple[float, float], max_regression: float) -> bool:
    """Whether more rounds could no longer change whether the gate calls "slower" for the interval
    as it is: all of it below 1 - max_regression, or none of it."""
    return interval[1] < 1 - max_regression or interval[0] >= 1 - max_regression


def gate_can_stop(then: list[list[float]], now: list[list[float]], confidence: float, max_regression: float,
                  precision: float) -> tuple[bool, tuple[float, float]]:
    """(whether the yardstick's rounds may stop, the interval): the gate's interval of these rounds
    (as the result records them; same_rounds_ratio) decides the call (regression_decided), or lies
    within `precision` of its ratio at both ends."""
    ratio, (low, high) = same_rounds_ratio(then, now, confidence)
    narrow = low >= ratio * (1 - precision) and high <= ratio * (1 + precision)
    return regression_decided((low, high), max_regression) or narrow, (low, high)


def speedup_change_interval(new: tuple[list[list[float]], list[list[float]]],
                            old: tuple[list[list[float]], list[list[float]]], confidence: float, seed: int = 0,
                            resamples: int = 1000) -> tuple[float, float]:
    """Confidence interval of speedup(new) / speedup(old), each speedup a ratio of medians over its
    own (reference rounds, solution rounds), the two resampled independently."""
    a, b = _paired(*new), _paired(*old)
    if not a or not b:
        return float("nan"), float("nan")
    rng = random.Random(seed)
    return _interval([_resampled_ratio(rng, a) / _resampled_ratio(rng, b) for _ in range(resamples)], confidence)


class HostTimer:
    name = "host"

    def __call__(self, fn: Callable[[], object]) -> float:
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3


class CudaEventTimer:
    """CUDA events around one call, after flushing L2.

    The whole device is synchronized before the end event is recorded, so work a solution puts
    on other streams is counted. The host wall time of each call is kept for a cross-check.
    """
    name = "cuda_event"

    def __init__(self, device, flush_l2: bool = True):
        import torch
        self.torch = torch
        self.device = device
        self.flush_buffer = None
        if flush_l2:
            props = torch.cuda.get_device_properties(device)
            l2_bytes = int(getattr(props, "L2_cache_size", 0) or 64 * 2**20)
            self.flush_buffer = torch.empty(2 * l2_bytes // 4, dtype=torch.int32, device=device)
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        self.wall_ms: list[float] = []

    def __call__(self, fn: Callable[[], object]) -> float:
        torch = self.torch
        if self.flush_buffer is not None:
            self.flush_buffer.zero_()
        torch.cuda.synchronize(self.device)
        wall0 = time.perf_counter()
        self.start.record()
        fn()
        torch.cuda.synchronize(self.device)
        self.end.record()
        self.end.synchronize()
        self.wall_ms.append((time.perf_counter() - wall0) * 1e3)
        return self.start.elapsed_time(self.end)


def sample(fn: Callable[[], object], timer: Callable[[Callable[[], object]], float],
           rule: StoppingRule, warmup: int, before: Callable[[], None] | None = None,
           warmup_ms: list[float] | None = None) -> list[float]:
    """Warm up, then time `fn` until `rule` says stop. `before` runs (untimed) before each call;
    the warm-up calls' times are appended to `warmup_ms` when it is given."""
    before = before or (lambda: None)
    for _ in range(warmup):
        before()
        elapsed = timer(fn)
        if warmup_ms is not None:
            warmup_ms.append(elapsed)
    samples: list[float] = []
    wall0 = time.perf_counter()
    while True:
        before()
        samples.append(timer(fn))
        if rule.done(len(samples), sum(samples) / 1e3, time.perf_counter() - wall0):
            return samples


def moves_inputs(setting: str, device: str) -> bool:
    """Whether the timed inputs move to new memory before each block (timing.move_inputs: auto =
    on the CPU; on CUDA not before an A/A on the GPU has measured it)."""
    return setting == "on" or setting == "auto" and device != "cuda"


class LiveInputs:
    """What the timed calls get (`live`), and moving it. The memory a process was given can be
    faster or slower than another's for the whole run (on a 2-core VM, elementwise_add's inputs:
    one worker process 5-15% slower than another, the same code on the same CPU, round after
    round; moved to fresh memory before each round, the same pairs of processes agree within
    2%: docs/harness-perf.md "A/A on the CPU: the memory a process holds"). `move()` samples a
    new placement for each block, so the rounds' bootstrap sees what a process's memory does
    instead of one draw of it biasing every round. The memory left stays held (up to HOLD_BYTES,
    oldest let go first): freed, it comes back at the next allocation, the same pages again."""

    HOLD_BYTES = 256 << 20   # elementwise_add's 8 MiB: every round of 10 (more would press a CPU run's address space)
    live: list

    def move(self) -> None:
        """`live` into newly allocated memory, its values and strides kept."""
        import torch
        held = self.__dict__.setdefault("held", [])
        held.append(self.live)
        self.live = [x.clone() if isinstance(x, torch.Tensor) else x for x in self.live]
        each = sum(x.numel() * x.element_size() for x in self.live if isinstance(x, torch.Tensor))  # every set alike
        del held[:max(0, len(held) - max(1, self.HOLD_BYTES // max(1, each)))]


class InputPool(LiveInputs):
    """Inputs refreshed IN PLACE before every call (untimed) from a pool of fresh input sets, so a
    cache keyed on pointer or shape returns stale results. `live` is what the calls get."""

    def __init__(self, pool: list[list], seeds: list[int] | None = None):
        import torch
        self.pool, self.seeds = pool, seeds
        self.live = [x.clone() if isinstance(x, torch.Tensor) else x for x in pool[0]]
        self.index = 0

    def refresh(self) -> int:
        """Copy the next set into `live`; returns its seed (its index in the pool, without seeds)."""
        import torch
        self.index = (self.index + 1) % len(self.pool)
        for dst, src in zip(self.live, self.pool[self.index]):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)
        return self.seeds[self.index] if self.seeds else self.index


class FreshInputs(LiveInputs):
    """Inputs drawn anew before every timed call, from a seed of the call's own (`call_seed`), and
    copied IN PLACE into `live` (what the calls get), so that no two timed calls see the same
    input: an output cached by content, pointer or shape is wrong for the next call (a pool of
    two sets let a solution keep one output per set). `draw(seed)` makes a set (make_inputs);
    the lane draws a checked call's set again from its seed. CUDA runs only: on the GPU a set is
    drawn in well under a millisecond; on the CPU drawing the add's two 4 MB inputs took 20-40 ms
    and slowed the next calls, so CPU runs cycle a pool of two sets (InputPool)."""

    def __init__(self, draw: Callable[[int], list], base: int):
        self.draw, self.base, self.n = draw, base, 0
        self.seed = call_seed(base, 0)
        self.live = draw(self.seed)

    def refresh(self) -> int:
        """A new set into `live`; returns its seed."""
        import torch
        self.n += 1
        self.seed = call_seed(self.base, self.n)
        for dst, src in zip(self.live, self.draw(self.seed)):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)
        return self.seed


def call_seed(base: int, n: int) -> int:
    """The input seed of timed call `n` of a pair (base: its first timing seed, which mixes in the run's secret)."""
    import hashlib
    return int.from_bytes(hashlib.sha256(f"{base}:timed:{n}".encode()).digest()[:4], "little") & 0x7FFFFFFF


def make_timer(device: str, flush_l2: bool):
    return CudaEventTimer(device, flush_l2) if device == "cuda" else HostTimer()


# timing.max_samples and timing.rounds where the config says auto, by device. On CUDA 1000 calls
# in 30 rounds: on a quiet H200 the A/A of the family, elementwise_add, matmul and lstm (two runs
# each) came within 3% of 1.00x in 24 of 24 at af5af89 and 24 of 24 at 47a960f, against 22 of 24 at
# 100 in 10 (901's offset across ten rounds, the add's launch-bound calls), docs/harness-perf.md
# "A/A on the H200: samples and rounds". Its price: the family's main command about a third
# longer (each sub-ms call is handed to the lane). The CPU keeps 100 in 10: 1000 calls a side cost
# elementwise_add's pair 11 s more there.
AUTO_TIMING = {"cuda": {"max_samples": 1000, "rounds": 30}, "cpu": {"max_samples": 100, "rounds": 10}}
# timing.profile: screening, for volume: CUDA's default before bc1b531 (A/A: docs/usage.md), half the CPU's calls
SCREENING = {"cuda": {"max_samples": 100, "rounds": 10}, "cpu": {"max_samples": 50, "rounds": 10}}


def for_device(t: dict, device: str) -> dict:
    """A `timing` config section (as a dict) with its auto values made the device's numbers, the
    screening profile's where it is chosen (max_samples at least min_samples)."""
    auto = (SCREENING if t.get("profile") == "screening" else AUTO_TIMING)["cuda" if device == "cuda" else "cpu"]
    out = dict(t)
    if out.get("max_samples", "auto") == "auto":
        out["max_samples"] = max(auto["max_samples"], int(out.get("min_samples", 1)))
    if out.get("rounds", "auto") == "auto":
        out["rounds"] = auto["rounds"]
    return out


def wrong_rounds_skipped(t: dict) -> bool:
    """Whether a solution already wrong when its timed calls begin is timed without the reference's
    rounds (timing.wrong_rounds; auto = skip, on the CPU and CUDA alike)."""
    return t.get("wrong_rounds", "auto") in ("skip", "auto")


def rule_of(t: dict) -> StoppingRule:
    """The stopping rule of a `timing` config section (as a dict)."""
    return StoppingRule(t["min_samples"], t["max_samples"], t["min_time_s"], t["max_time_s"])


def summarize(samples: list[float], timer_name: str) -> TimingStats:
    ordered = sorted(samples)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    return TimingStats(
        median_ms=statistics.median(ordered), iqr_ms=q3 - q1, q1_ms=q1, q3_ms=q3,
        min_ms=ordered[0], max_ms=ordered[-1], mean_ms=statistics.fmean(ordered),
        samples=len(ordered), timer=timer_name,
    )


def stats_of(samples: list[float], timer, _summarize=summarize) -> dict:
    """summarize() as a dict, with the median host wall time of the calls for CUDA events.
    summarize is bound when this is defined: a solution that replaces timing.summarize in the
    worker's process does not change what the worker reports."""
    stats = _summarize(samples, timer.name).__dict__
    if isinstance(timer, CudaEventTimer) and timer.wall_ms:
        walls = sorted(timer.wall_ms)
        stats["wall_median_ms"] = walls[len(walls) // 2]
    return stats
