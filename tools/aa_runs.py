#!/usr/bin/env python3
"""A/A runs: each problem's own Model timed as the solution against itself as the reference
(`run_eval.py --solution reference`), so the truth is 1.00x. Runs the README's main command
--runs times for each variant (a set of `--set` overrides), the variants in turns (so a machine
that drifts moves them alike), and prints per problem and variant every run's speedup and
interval, how many intervals hold 1.0 and how many points lie within --within of it. The table
issue 46 asks for ("1.00x +-3% with each interval containing 1.0").

    python tools/aa_runs.py --problem conv_transpose2d --problem elementwise_add --runs 2 \\
        --variant on=timing.move_inputs=on --variant off=timing.move_inputs=off [--json FILE]

--problem takes what run_eval.py's --problem takes (a family runs all its problems in one run).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_variant(text: str) -> tuple[str, list[str]]:
    """'NAME=key=value,key=value' (or 'NAME' for the default config) -> (NAME, [key=value, ...])."""
    name, _, sets = text.partition("=")
    if not name:
        raise argparse.ArgumentTypeError(f"--variant {text!r}: expected NAME or NAME=key=value[,key=value]")
    return name, [s for s in sets.split(",") if s]


def one_run(problem: str, sets: list[str], device: str, results: Path, run_id: str) -> tuple[list[dict], float, str]:
    """The results of one A/A run (its pairs' JSON), its wall time, and its output's tail on failure."""
    cmd = [sys.executable, str(ROOT / "run_eval.py"), "--problem", problem, "--solution", "reference",
           "--results-dir", str(results), "--run-id", run_id]
    if device:
        cmd += ["--device", device]
    for s in sets:
        cmd += ["--set", s]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - start
    found = [json.loads(p.read_text()) for p in sorted((results / run_id).glob("*.json")) if p.name != "run.json"]
    tail = "" if found else (proc.stdout + proc.stderr)[-600:]
    return found, wall, tail


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problem", action="append", required=True)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--variant", action="append", type=parse_variant, default=None,
                    help="NAME=key=value[,key=value]: overrides for one variant (default: one, the default config)")
    ap.add_argument("--device", default="", help="passed to run_eval.py --device")
    ap.add_argument("--within", type=float, default=0.03, help="the share a point may lie from 1.0 (0.03)")
    ap.add_argument("--json", default="", help="write every run's numbers here")
    args = ap.parse_args()
    variants = args.variant or [("default", [])]
    rows: dict[tuple[str, str], list[dict]] = {}
    walls: dict[str, list[float]] = {name: [] for name, _ in variants}
    with tempfile.TemporaryDirectory(prefix="kb-aa-") as tmp:
        for problem in args.problem:
            for n in range(args.runs):
                for name, sets in variants:
                    run_id = f"{Path(problem).stem}-{name}-{n}"
                    found, wall, tail = one_run(problem, sets, args.device, Path(tmp), run_id)
                    walls[name].append(wall)
                    if not found:
                        print(f"{problem} {name} run {n + 1}: no result ({wall:.0f} s)\n{tail}", flush=True)
                        continue
                    shown = []
                    for result in found:
                        timing = result.get("timing") or {}
                        row = {"problem": result["problem"]["id"], "variant": name, "run": n + 1,
                               "status": result["status"], "speedup": timing.get("speedup"),
                               "interval": timing.get("speedup_ci")}
                        rows.setdefault((row["problem"], name), []).append(row)
                        if row["speedup"] is not None:
                            shown.append(f"{row['problem']}={row['speedup']:.3f}")
                    print(f"{problem} {name} run {n + 1}: {len(found)} result(s), {wall:.0f} s  {'  '.join(shown)}",
                          flush=True)
                    if args.json:  # as it goes, so a run stopped at a limit keeps what it timed
                        Path(args.json).write_text(json.dumps([r for runs in rows.values() for r in runs], indent=1))
    print()
    holds_all = within_all = total = 0
    for (problem, name), runs in sorted(rows.items()):
        shown, holds, within = [], 0, 0
        for r in runs:
            if r["speedup"] is None or not r["interval"]:
                shown.append(f"{r['status']}")
                continue
            low, high = r["interval"]
            holds += low <= 1.0 <= high
            within += abs(r["speedup"] - 1.0) <= args.within
            shown.append(f"{r['speedup']:.3f} [{low:.3f}, {high:.3f}]")
        holds_all, within_all, total = holds_all + holds, within_all + within, total + len(runs)
        print(f"{problem[:40]:40s} {name:10s} holds 1.0 {holds}/{len(runs)}  within {args.within:.0%} "
              f"{within}/{len(runs)}  " + "  ".join(shown))
    print(f"\nall: {holds_all} of {total} intervals hold 1.0, {within_all} of {total} within {args.within:.0%}; "
          + "; ".join(f"{name} {sum(w):.0f} s" for name, w in walls.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
