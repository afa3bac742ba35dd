"""The lane's clock against the workers' reported times, per pair of recorded runs: how much the
solution's worker's per-call overhead (the lane's wall of its timed blocks less the times it
reported, per call) exceeds the reference worker's in the same rounds, the whole block's and the
calls' own intervals (from a call's announcement to the worker's next message), and the margin
left to checks.timing_bound (harness/verdict/vouch.py). For calibrating the bound (A/A runs, the
main commands) and for the red team's table.

    python tools/lane_clock.py RUN_DIR [RUN_DIR ...] [--md]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def per_call(reported: list[list[float]], lane: list[dict], key: str) -> list[float]:
    return [(b[key] - sum(times)) / b["calls"] for times, b in zip(reported, lane) if b.get("calls") and key in b]


def paired_excess(mine: list[float], theirs: list[float]) -> float | None:
    if not mine or not theirs:
        return None
    if len(mine) == len(theirs):
        return statistics.median([m - t for m, t in zip(mine, theirs)])
    return statistics.median(mine) - statistics.median(theirs)


def row(result: dict) -> dict | None:
    timing = result.get("timing") or {}
    sol = timing.get("solution") or {}
    ref = next((s for s in timing.values() if isinstance(s, dict) and s.get("lane_blocks")
                and s.get("measured_in") == "reference worker" and not s.get("reused")), None)
    if not sol.get("lane_blocks") or ref is None:
        return None
    out = {"problem": result["problem"]["id"][:28], "solution": result["solution"]["name"][:22],
           "status": result["status"], "reported_ms": statistics.median([x for b in sol["rounds"] for x in b])}
    for key, name in (("ms", "block"), ("inner_ms", "call"), ("cycle_ms", "cycle")):
        mine, theirs = per_call(sol["rounds"], sol["lane_blocks"], key), per_call(ref["rounds"], ref["lane_blocks"], key)
        out[f"{name}_ovh_ms"] = statistics.median(theirs) if theirs else None
        out[f"{name}_excess_ms"] = paired_excess(mine, theirs)
    vouch = timing.get("vouch") or {}
    out["calls_bound_ms"] = (vouch.get("calls") or {}).get("bound_ms")
    out["block_bound_ms"] = (vouch.get("block") or {}).get("bound_ms")
    out["flags"] = ",".join(result.get("flags") or []) or "-"
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--md", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    for run in args.runs:
        for path in sorted(Path(run).glob("*.json")):
            if path.name == "run.json":
                continue
            r = row(json.loads(path.read_text()))
            if r is not None:
                rows.append(r)
    cols = ["problem", "solution", "status", "reported_ms", "call_ovh_ms", "call_excess_ms", "cycle_ovh_ms",
            "cycle_excess_ms", "calls_bound_ms", "block_ovh_ms", "block_excess_ms", "block_bound_ms", "flags"]

    def fmt(v):
        return f"{v:.4f}" if isinstance(v, float) else str(v)
    lines = [[c for c in cols]] + [[fmt(r.get(c)) for c in cols] for r in rows]
    if args.md:
        print("| " + " | ".join(lines[0]) + " |\n|" + "---|" * len(cols))
        for line in lines[1:]:
            print("| " + " | ".join(line) + " |")
    else:
        widths = [max(len(line[i]) for line in lines) for i in range(len(cols))]
        for line in lines:
            print("  ".join(x.ljust(w) for x, w in zip(line, widths)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
