"""More trials for a pair near its class's bound (correctness.near_bound, near_bound_trials).

A kernel whose error sits near its class's bound passes or fails by the draw of the few inputs a run
checks: KernelBench's 6_Matmul_with_large_K by gpt-4o passes about one run in four (docs/harness-perf.md,
"Both levers"; about one output in nine over its bound). Where a pair would pass and its least margin
is under `near_bound`, the lane runs `near_bound_trials` more trials of the benchmark shape in a fresh
worker (correctness only, inputs from seeds of their own), judged like any other and recorded as kind
`confirm`; the pair passes only if they pass too. A kernel right on every input loses nothing (its
margins stay what they are); one wrong on a share q of its inputs now passes with chance about
(1-q)^(checked + near_bound_trials) rather than (1-q)^checked.
"""
from __future__ import annotations

import time
from typing import Any

from ..compile.failures import failure, limit_hint
from ..core.config import noise_bound
from ..verdict.asked import never_handed_over
from .pipeline import derive_seed
from .request import _request

AUTO_TRIALS = 20   # near_bound_trials: auto, on every device


def trials_for(correctness: dict[str, Any], device: str) -> int:
    n = correctness["near_bound_trials"]
    return AUTO_TRIALS if n == "auto" else int(n)


def near(report: dict[str, Any], correctness: dict[str, Any]) -> bool:
    """Whether a passing report's least margin is under correctness.near_bound."""
    margin = report.get("min_margin")
    return bool(report["ok"]) and margin is not None and margin < correctness["near_bound"]


def confirm(lane, job: dict[str, Any], problem, judgement, tolerances: dict[str, Any], limits: dict[str, Any],
            max_payload: int, phases: dict[str, float], hint_bytes: int = 0) -> tuple | None:
    """Where the pair (judged so far by `judgement`) would pass near its bound: the extra trials, their
    results added to `judgement`'s as kind `confirm`; returns the confirming worker's failure
    (status, message, detail, phase), if it did not finish cleanly, else None."""
    cfg = job["config"]
    n = trials_for(cfg["correctness"], job["device"])
    if n <= 0:
        return None
    report = judgement.report()
    if not near(report, cfg["correctness"]):
        return None
    started = time.monotonic()
    seeds = job["seeds"]
    extra = {**seeds, "shapes": [{"overrides": {}, "trials": [derive_seed(seeds["base"], seeds["secret"], "confirm", t)
                                                              for t in range(n)]}]}
    confirming = {**job, "seeds": extra, "config": {**cfg, "timing": {**cfg["timing"], "enabled": False}}}
    more = lane.judge.begin(problem, extra, tolerances, cfg["precision"],
                            noise=noise_bound(cfg["correctness"]))
    spare = lane.pool.take()
    w = lane.watch(spare, _request(confirming, "eval", spare, hint_bytes), limits, more, max_payload)
    outcome = lane.finish(spare, w, started)
    failed = failure(outcome, limit_hint(outcome))
    missing = None if failed else never_handed_over(extra, more.results)
    for result in [*more.results, *([missing] if missing else [])]:
        judgement.results.append({**result, "kind": "confirm"})
    judgement.near_bound = {"least_margin": report["min_margin"], "below": cfg["correctness"]["near_bound"],
                            "trials": n}
    phases["truth_s"] = phases.get("truth_s", 0.0) + more.truths.seconds
    phases["confirm_s"] = time.monotonic() - started
    if failed:
        status, message, detail, phase = failed
        return status, f"{message} (in the {n} more trials its least margin, {report['min_margin']:.3g}x, asked " \
                       f"for: correctness.near_bound)", detail, phase
    return None
