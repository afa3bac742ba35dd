"""The lane's clock against the workers' reported times, per pair of recorded runs: what the harness
held each pair's reported times to (`timing.vouch`, harness/verdict/vouch.py): for a call's own
interval, for each cycle from a call's start to the next's (since 2026-12-06) and for the whole
timed block, the reference worker's per-call procedure (`overhead_ms`), how much the solution's
worker's exceeded it (`excess_ms`, the median over the rounds) and the bound it was held to, with the
share of the bound used. For calibrating the bound (A/A runs, the main commands) and for the red
team's table.

    python tools/lane_clock.py RUN_DIR [RUN_DIR ...] [--md] [--set checks.KEY=VALUE ...]

Without `--set` it reads the judgement as recorded. With it, each pair's judgement is recomputed
from its record (the solution's and the interleaved reference worker's lane blocks as a result keeps
them: per block, each interval's median overhead per call) under the record's own `checks` with the
values given, e.g. `--set checks.timing_cycle=on` over a CUDA run made with it off (its blocks hold
each cycle either way): the `was` column says what was recorded, and the last line which pairs it
would judge otherwise. A pair whose reference worker timed no block is left out there (the earlier
pair's measurement that stood in is not recorded).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PARTS = ("calls", "gap", "block")
COLS = ["problem", "solution", "status", "reported_ms",
        *[f"{part}_{x}" for part in PARTS for x in ("ovh_ms", "excess_ms", "bound_ms", "share")], "ok", "was", "flags"]


def recomputed(result: dict, overrides: dict) -> dict | None:
    """The lane's judgement of a recorded pair under its own checks with `overrides` ({"checks.KEY":
    value}; None where the record cannot give it: not timed, or its reference worker timed no block).
    The checks as the harness reads them: the record's over the default config's, then the overrides."""
    import dataclasses

    from harness.core.config import ChecksConfig, load_config, with_overrides
    from harness.verdict.vouch import bound_slack, vouch
    timing = result.get("timing") or {}
    solution = timing.get("solution") or {}
    reference = next((s for s in timing.values() if isinstance(s, dict) and s.get("lane_blocks")
                      and s.get("measured_in") == "reference worker" and not s.get("reused")), {})
    if not (solution.get("rounds") and solution.get("lane_blocks") and reference):
        return None
    device = (result.get("env") or {}).get("device") or result["config"]["device"]
    known = {f.name for f in dataclasses.fields(ChecksConfig)}
    kept = {f"checks.{k}": v for k, v in ((result.get("config") or {}).get("checks") or {}).items() if k in known}
    checks = with_overrides(load_config(None), {**kept, **overrides}, "--set").to_dict()["checks"]
    return vouch(solution["rounds"], solution["lane_blocks"], reference["rounds"], reference["lane_blocks"],
                 bound_slack(checks, device))


def row(result: dict, overrides: dict | None = None) -> dict | None:
    """One pair's line, or None where nothing was vouched for (not timed, or timed before the lane kept
    its clock); with `overrides` (checks keys), the judgement recomputed under them."""
    recorded = (result.get("timing") or {}).get("vouch") or {}
    vouch = recomputed(result, overrides) if overrides else recorded
    if not vouch or (not vouch.get("calls") and not vouch.get("block")):
        return None
    out = {"problem": result["problem"]["id"][:28], "solution": result["solution"]["name"][:22],
           "status": result["status"], "reported_ms": vouch.get("reported_ms"), "ok": vouch.get("ok"),
           "was": recorded.get("ok") if overrides else "-", "flags": ",".join(result.get("flags") or []) or "-"}
    for part in PARTS:
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
    ap.add_argument("--set", action="append", default=[], metavar="checks.KEY=VALUE",
                    help="recompute each judgement with this checks value (repeatable)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from harness.core.config import load_config, parse_override, with_overrides
    from harness.core.errors import BadInput
    from harness.core.store import load_run   # every schema version the harness reads
    try:
        overrides = dict(parse_override(item) for item in args.set)
        if any(not key.startswith("checks.") for key in overrides):
            raise BadInput("--set", f"only checks.KEY=VALUE is judged here, got {', '.join(args.set)}")
        with_overrides(load_config(None), overrides, "--set")   # a bad key or value: one line
        results = [r.to_dict() for run in args.runs for r in load_run(run)]
    except BadInput as exc:
        print(f"lane_clock: {exc}", file=sys.stderr)
        return 2
    rows = [r for r in (row(result, overrides) for result in results) if r is not None]

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
    shares = [r[f"{part}_share"] for r in rows for part in PARTS if r.get(f"{part}_share") is not None]
    if shares:
        print(f"{len(rows)} pair(s); the largest share of a bound used: {max(shares):.2f}")
    if overrides:
        changed = [f"{r['problem']}/{r['solution']} ({r['was']} -> {r['ok']})" for r in rows if r["was"] != r["ok"]]
        print(f"with {', '.join(args.set)}: {len(changed)} of {len(rows)} pair(s) judged otherwise"
              + (": " + "; ".join(changed) if changed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
