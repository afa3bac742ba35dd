#!/usr/bin/env python3
"""How many rounds would the CI gate's yardstick add under its stopping rule? Replays
`Yardstick.settle`'s look (harness/run/yardstick.py: stop where the gate's interval decides the
call at 1 - max_regression, or lies within `precision` of the ratio) over the rounds a recorded
gate run timed, at prefixes of 10, 15, ... rounds, and prints per pair the rounds it added then
and the rounds the rule would add, with the interval where it would stop. An approximation: the
prefixes stand for the rounds settle would have timed.

    python tools/gate_replay.py RUN_DIR [--max-regression 0.05] [--precision 0.025]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.verdict.timing import gate_can_stop  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--max-regression", type=float, default=0.05)
    p.add_argument("--precision", type=float, default=0.025)
    p.add_argument("--first", type=int, default=10, help="the pair's rounds the yardstick timed in")
    args = p.parse_args(argv)
    before = after = 0
    for path in sorted(args.run_dir.glob("*.json")):
        y = (json.loads(path.read_text()).get("timing") or {}).get("yardstick") or {}
        if not y.get("rounds") or not (y.get("now") or {}).get("rounds"):
            continue
        then, now = y["rounds"], y["now"]["rounds"]
        n = min(args.first, len(then))
        while True:
            done, (low, high) = gate_can_stop(then[:n], now[:n], 0.95, args.max_regression, args.precision)
            if done or n >= len(then):
                break
            n += 5
        added = y.get("settled_rounds", 0)
        before, after = before + added, after + n - args.first
        would = f"{n - args.first}" if done else f">={n - args.first}"
        print(f"{path.stem[:60]:60} added {added:2} would {would:>4} at [{low:.3f}, {high:.3f}]")
    print(f"rounds added: {before}; under the rule: {after} (at least)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
