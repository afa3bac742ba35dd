"""What the lane can vouch for of a worker's times.

A worker's times are its own word: the solution runs in that process and can patch every clock
it reads (torch.cuda.Event.elapsed_time, time.perf_counter, the harness's own timer and event
writer, cudaEventElapsedTime in C). The lane, another process, keeps its own clock on each of the
worker's timed blocks (harness/run/clock.py): from the moment it lets the block start to the
moment the worker says it ended, less the lane's own work in between (taking outputs, while the
worker is stopped), plus any wait for the GPU to go idle after it (work the worker left running),
with the timed calls it saw announced. That wall holds the calls and the harness's own procedure
around each (the next inputs, the L2 flush, synchronizations, the handoff). The reference worker,
which runs no solution code, makes its calls by the same procedure in the same rounds, and its
times are trusted: its wall less its times is what the procedure costs per call.

So for each block the solution's worker's per-call overhead (its lane wall less the times it
reported, per call) should be the reference worker's, within noise. A worker that reports less
than its calls took leaves the difference in that overhead: `excess_ms`, the median over the
rounds of the two overheads' difference (for the whole block on the CPU, the lower quartile over
the rounds of each block's own estimate of a call's time less the reported median: a host's stall
lengthens some blocks, work moved out of the calls all of them). Where it exceeds `slack_ms +
slack_share x` the reported median, the times are not vouched for (`timing_untrusted`); as does a
block whose count of reported times is not the count of calls the lane saw, or that the worker
ended other than by the lane's closing exchange. The lane's figure is not put in the worker's place: it is a mean
over blocks that carries another process's overhead, so it would move honest results by that
noise; a worker that disagrees with the lane by more than the A/A noise was patched, and there
is nothing to correct (docs/evaluation.md, "The lane's clock")."""
from __future__ import annotations

import math
import statistics
from typing import Any

# checks.timing_bound_* where the config says auto, by device, the overhead share by interval. On
# the H200 (docs/harness-perf.md, "The lane's clock"), over the family's main command and A/A runs
# (38 honest pairs), a call's interval exceeded the reference worker's by at most 1.3% of the
# reported median, the whole block's by at most 0.47 ms on an 8.3 ms call, every call under 3 ms by
# nothing. A CPU lane's per-call procedure is milliseconds (outputs and inputs cross as bytes) and
# its block's wall, read by a lane that shares two cores with the worker and the builds, varies by
# as much; its calls' intervals, stamped by the kernel, agree within 0.01 ms. `block_quantile`: which
# of the rounds' differences judges the whole block. A stall of the host lengthens the blocks it falls
# in, work moved out of the calls every block: on the CPU, where a block's wall is read by a lane
# sharing two cores, an honest `cpp_add` of one call a block had two of its three blocks 100 ms
# longer than the reference's (a busy VM, tests/fixtures/configs/fast.yaml), so the CPU takes the
# lower quartile (the least of fewer than four) of each block's estimate of a call's time (vouch says
# why not of the differences); CUDA keeps the median of the differences its H200 figures were made with.
#
# `spread_z`: the procedure's cost is not the same in every round, and on a busy host (a cold batch
# building on every other core) it moves by whole phases: in an H100 host's corpus run (issue 76)
# the reference worker's blocks of `27_SELU_` cost 0.26 ms a call in six of ten rounds and 0.62-0.70
# in the others, while the solution's, in the same rounds, stayed near 0.62, so an honest kernel left
# 0.19 ms "unexplained" against 0.163 allowed. The bound therefore also allows this many standard
# errors of the difference of two rounds' medians, each as noisy as the reference worker's own
# rounds (their interquartile range: the trusted worker's, which no solution sets). Where the
# reference's rounds agree (a quiet host) it adds next to nothing.
AUTO_BOUND = {"cuda": {"ms": 0.005, "noise_ms": 0.02, "calls_overhead_share": 0.0, "block_overhead_share": 0.25,
                       "gap_overhead_share": 0.25, "noise_share": 1.0, "block_quantile": 0.5, "spread_z": 3.0},
              "cpu": {"ms": 0.02, "noise_ms": 0.1, "calls_overhead_share": 0.5, "block_overhead_share": 0.5,
                      "gap_overhead_share": 0.5, "noise_share": 3.0, "block_quantile": 0.25, "spread_z": 3.0}}


def cycle_clock(checks: dict[str, Any]) -> bool:
    """checks.timing_cycle: whether the lane judges each cycle from a timed call to the next (and
    holds a block's outputs to their calls, reads its own work in a block up to its acknowledgement,
    and has the reference worker time two calls a block at least, planned by its own last block);
    auto = on (the CPU since 2026-12-06, where CI failed without it; CUDA since the GPU smoke ran with it)."""
    return checks.get("timing_cycle", "auto") in ("on", "auto")


def bound_slack(checks: dict[str, Any], device: str) -> dict[str, float]:
    """checks.timing_bound_* (the config's checks section as a dict) as vouch() takes them, auto as
    the device's (AUTO_BOUND)."""
    auto = AUTO_BOUND["cuda" if device == "cuda" else "cpu"]
    pick = lambda key, name: auto[name] if checks.get(key, "auto") == "auto" else float(checks[key])  # noqa: E731
    return {"ms": pick("timing_bound_ms", "ms"), "share": float(checks.get("timing_bound_share", 0.1)),
            "calls_overhead_share": pick("timing_bound_overhead_share", "calls_overhead_share"),
            "block_overhead_share": pick("timing_bound_overhead_share", "block_overhead_share"),
            "gap_overhead_share": pick("timing_bound_overhead_share", "gap_overhead_share"),
            "noise_share": pick("timing_bound_noise_share", "noise_share"),
            "noise_ms": pick("timing_bound_noise_ms", "noise_ms"), "block_quantile": auto["block_quantile"],
            "spread_z": pick("timing_bound_spread_z", "spread_z"), "cycle": cycle_clock(checks)}


def overheads(reported: list[list[float]], lane: list[dict[str, Any]], key: str = "ms") -> list[float]:
    """Per block, the harness's cost per call outside the reported time on one of the lane's
    intervals (ms): "ms", the whole block's wall less the reported times, per call; "inner", a
    call's own interval (harness/run/clock.py), the median over the block's calls of each one's
    interval less its reported time (one stray call moves one call, not the block), or, once
    compacted, that median as kept (`inner_ovh_ms`)."""
    out = []
    for times, block in zip(reported, lane):
        if not block.get("calls"):
            continue
        if key == "ms":
            out.append((block["ms"] - sum(times)) / block["calls"])
        elif f"{key}_ovh_ms" in block:
            out.append(block[f"{key}_ovh_ms"])
        elif block.get(key) and len(block[key]) == len(times) - (key == "gap"):
            out.append(statistics.median([a - b for a, b in zip(block[key], times)]))
    return out


def compact(reported: list[list[float]], lane: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lane's blocks as a result keeps them: each call's interval replaced by their median
    overhead per block (`inner_ovh_ms`) and their mean (`inner_ms`)."""
    kept = []
    for index, block in enumerate(lane):
        block = dict(block)
        times = reported[index] if index < len(reported) else []
        for key in ("inner", "gap"):
            calls = block.pop(key, None)
            if calls:
                block[f"{key}_ms"] = round(sum(calls) / len(calls), 5)
                if len(calls) == len(times) - (key == "gap"):
                    block[f"{key}_ovh_ms"] = round(statistics.median([a - b for a, b in zip(calls, times)]), 5)
        kept.append(block)
    return kept


def per_call(lane: list[dict[str, Any]], key: str) -> list[float]:
    """The lane's time per call of each block on interval `key` (ms)."""
    if key == "ms":
        return [b["ms"] / b["calls"] for b in lane if b.get("calls")]
    return [sum(b[key]) / len(b[key]) if isinstance(b.get(key), list) and b[key] else b[f"{key}_ms"]
            for b in lane if b.get("calls") and (b.get(key) or f"{key}_ms" in b)]


def disagreement(reported: list[list[float]], lane: list[dict[str, Any]]) -> str:
    """Why the reported blocks cannot be the blocks the lane saw ('' where they can)."""
    if len(reported) != len(lane):
        return f"the worker reported {len(reported)} timed block(s) where the lane saw {len(lane)}"
    for index, (times, block) in enumerate(zip(reported, lane)):
        if block.get("disorder"):
            return f"block {index}: {block['disorder']} (the harness's worker hands each over before its next call)"
        if block.get("unended"):
            return (f"block {index} ended by a '{block['unended']}' message, not by the closing exchange the "
                    f"harness's worker makes")
        if len(times) != block["calls"]:
            return f"block {index}: the worker reported {len(times)} time(s) where the lane saw {block['calls']} call(s)"
        marked = len(block["inner"]) if isinstance(block.get("inner"), list) else block["calls"]
        if block.get("returns", block["calls"]) != block["calls"] or marked != block["calls"]:
            return (f"block {index}: the worker marked {min(marked, block.get('returns', marked))} of its "
                    f"{block['calls']} timed call(s) as begun and returned (the harness's worker marks each)")
        if any(not 0 <= x < float("inf") for x in times):
            return f"block {index}: a reported time is negative or not a number"
    return ""


def quantile(values: list[float], q: float) -> float:
    """The median for q = 0.5; below it the value at rank floor(q x (n - 1)) of the sorted values
    (the least of fewer than four for the lower quartile)."""
    if q >= 0.5:
        return statistics.median(values)
    return sorted(values)[math.floor(q * (len(values) - 1))]


def spread(theirs: list[float]) -> float:
    """The standard error of the difference of two medians over len(theirs) rounds, each as noisy as
    `theirs` (the reference worker's overheads per round): sigma from the interquartile range
    (IQR / 1.349), a median's standard error 1.2533 sigma / sqrt(n), times sqrt(2) for a difference of
    two. 0 for fewer than four rounds (no quartiles to speak of)."""
    if len(theirs) < 4:
        return 0.0
    q1, _, q3 = statistics.quantiles(theirs, n=4)
    return math.sqrt(2) * 1.2533 * (q3 - q1) / 1.349 / math.sqrt(len(theirs))


def excess(mine: list[float], theirs: list[float], paired: bool, q: float = 0.5) -> float:
    """The q-quantile (the median by default) over rounds of mine - theirs (paired where both have a
    block in every round), else mine's q-quantile less theirs' median."""
    if paired and len(mine) == len(theirs):
        return quantile([m - t for m, t in zip(mine, theirs)], q)
    return quantile(mine, q) - statistics.median(theirs)


def vouch(reported: list[list[float]], lane: list[dict[str, Any]], reference_reported: list[list[float]],
          reference_lane: list[dict[str, Any]], slack: dict[str, float], paired: bool = True,
          fallback: dict[str, float] | None = None) -> dict[str, Any]:
    """The lane's judgement of a worker's reported blocks (`reported`: its times per block, ms;
    `lane`: the lane's blocks, {"ms", "calls", "inner", ...}) against the reference worker's
    (trusted), on two of the lane's intervals: each call's own (`calls`: from its mark as it began
    to its mark as it returned, as the kernel stamped them: harness/run/clock.py), where a patched
    clock shows at once; and the whole block (`block`),
    where work moved out of the calls' intervals shows too, against a larger and noisier
    overhead. `slack`: {"ms", "noise_ms", "share", "calls_overhead_share", "block_overhead_share",
    "noise_share", "block_quantile"}: the block's excess is judged at that quantile of the rounds
    (AUTO_BOUND and the comment below say how and why), the calls' at the median; each comparison
    allows an excess of ms + noise_ms / sqrt(n) + share x the reported median + (its overhead
    share + noise_share / sqrt(n)) x the procedure's own cost in that interval, n the calls timed
    (the lane's noise on a mean over few calls is larger).
    `paired`: block i of each was timed in the same round. `fallback`: the procedure's per-call
    costs by interval measured earlier (for a pair whose reference worker timed no block).
    Returns {"ok", "why", "reported_ms", "blocks",
    "calls": {...}, "block": {...}}, each part with the lane's time per call (`lane_ms`), the
    procedure's (`overhead_ms`), the `excess_ms` and the `bound_ms`; "ok" None where nothing
    could be vouched for (why says)."""
    why = disagreement(reported, lane)
    times = [x for block in reported for x in block]
    out: dict[str, Any] = {"blocks": len(lane), "reported_ms": round(statistics.median(times), 6) if times else None}
    if why:
        return {**out, "ok": False, "why": why}
    if not times:
        return {**out, "ok": None, "why": "no timed block"}
    root = math.sqrt(len(times))   # a mean over n calls: its noise as 1/sqrt(n)
    fixed = slack.get("ms", 0.0) + slack.get("noise_ms", 0.0) / root + slack.get("share", 0.0) * out["reported_ms"]
    noise = slack.get("noise_share", 0.0) / root
    out["ok"] = True
    for part, key in (("calls", "inner"), ("gap", "gap"), ("block", "ms")):
        mine, theirs = overheads(reported, lane, key), overheads(reference_reported, reference_lane, key)
        if not mine or (part == "gap" and not slack.get("cycle", True)):
            continue
        q = slack.get("block_quantile", 0.5) if part == "block" else 0.5
        means = [sum(t) / len(t) for t, b in zip(reported, lane) if b.get("calls") and t] if q < 0.5 else []
        if means and len(means) == len(mine):
            # At the median, the rounds' differences (each block's wall against its own reported
            # times) catch work moved out of the calls of more than half the blocks, which is what it
            # takes to move the reported median. Below it they would miss a move in between half and
            # 1 - q of them, so each block's own estimate of a call's time is judged instead, against
            # the reported median: such a move leaves every block's estimate at the true time, a stall
            # lengthens only its own block's. Noisier by the calls' own variation from block to block,
            # which the CPU's wider allowance covers.
            mine = [m + level - out["reported_ms"] for m, level in zip(mine, means)]
        if theirs:
            base, over = statistics.median(theirs), excess(mine, theirs, paired, q)
        elif fallback and key in fallback:
            base, over = fallback[key], quantile(mine, q) - fallback[key]
        elif part == "gap":   # the reference's blocks of one call each have no cycle: the block judges
            continue
        else:
            return {**out, "ok": None, "why": "the reference worker timed no block, and no earlier pair of the problem "
                                              "measured the harness's cost per call"}
        rounds_noise = slack.get("spread_z", 0.0) * spread(theirs)
        bound = fixed + (slack.get(f"{part}_overhead_share", 0.0) + noise) * max(base, 0.0) + rounds_noise
        lane_ms = statistics.median(per_call(lane, key))
        out[part] = {"interval": key, "lane_ms": round(lane_ms, 6), "overhead_ms": round(base, 6), "excess_ms": round(over, 6),
                     "bound_ms": round(bound, 6), "spread_ms": round(rounds_noise, 6)}
        if over > bound and out["ok"]:
            out["ok"] = False
            where = {"block": "of its timed blocks, whole", "gap": "from each timed call's start to the next's",
                     "calls": "of its calls, each to its return"}[part]
            out["why"] = (f"the lane measured {lane_ms:.4g} ms per call {where}, of which the harness's own "
                          f"procedure takes {base:.4g} ms (the reference worker's, in the same rounds): its calls "
                          f"took about {out['reported_ms'] + over:.4g} ms where the worker reported "
                          f"{out['reported_ms']:.4g} ms (at most {bound:.3g} ms more is allowed)")
    return out
