"""The lane's clock against the workers' reported times, per pair of recorded runs: what the harness
held each pair's reported times to (`timing.vouch`, harness/verdict/vouch.py): for a call's own
interval and for the whole timed block, the reference worker's per-call procedure (`overhead_ms`),
how much the solution's worker's exceeded it (`excess_ms`, the median over the rounds) and the
bound it was held to, with the share of the bound used. For calibrating the bound (A/A runs, the
main commands) and for the red team's table.

    python tools/lane_clock.py RUN_DIR [RUN_DIR ...] [--md]

It reads the record rather than recomputing it: the calls' interval is two marks the kernel stamps
(channel.Marks), which a result keeps per block as a per-call figure, not as a block's total.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COLS = ["problem", "solution", "status", "reported_ms", "calls_ovh_ms", "calls_excess_ms", "calls_bound_ms",
        "calls_share", "block_ovh_ms", "block_excess_ms", "block_bound_ms", "block_share", "flags"]


def row(result: dict) -> dict | None:
    """One pair's line, or None where nothing was vouched for (not timed, or timed before the lane kept
    its clock)."""
    vouch = (result.get("timing") or {}).get("vouch") or {}
    if not vouch.get("calls") and not vouch.get("block"):
        return None
    out = {"problem": result["problem"]["id"][:28], "solution": result["solution"]["name"][:22],
           "status": result["status"], "reported_ms": vouch.get("reported_ms"),
           "flags": ",".join(result.get("flags") or []) or "-"}
    for part in ("calls", "block"):
        d = vouch.get(part) or {}
        out[f"{part}_ovh_ms"] = d.get("overhead_ms")
        out[f"{part}_excess_ms"] = d.get("excess_ms")
        out[f"{part}_bound_ms"] = d.get("bound_ms")
        out[f"{part}_share"] = (d["excess_ms"] / d["bound_ms"] if d.get("bound_ms") and d.get("excess_ms") is not None
                                else None)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--md", action="store_true")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from harness.core.errors import BadInput
    from harness.core.store import load_run   # every schema version the harness reads
    try:
        results = [r.to_dict() for run in args.runs for r in load_run(run)]
    except BadInput as exc:
        print(f"lane_clock: {exc}", file=sys.stderr)
        return 2
    rows = [r for r in map(row, results) if r is not None]

    def fmt(v):
        return f"{v:.4f}" if isinstance(v, float) else str(v)
    lines = [list(COLS)] + [[fmt(r.get(c)) for c in COLS] for r in rows]
    if args.md:
        print("| " + " | ".join(lines[0]) + " |\n|" + "---|" * len(COLS))
        for line in lines[1:]:
            print("| " + " | ".join(line) + " |")
    else:
        widths = [max(len(line[i]) for line in lines) for i in range(len(COLS))]
        for line in lines:
            print("  ".join(x.ljust(w) for x, w in zip(line, widths)))
    shares = [r[k] for r in rows for k in ("calls_share", "block_share") if r.get(k) is not None]
    if shares:
        print(f"{len(rows)} pair(s); the largest share of a bound used: {max(shares):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
