"""The red team's clock fixtures against their unpatched twin, in one run: each fixture's verdict and
reported time next to the twin's (tests/fixtures/solutions/cheat_clock_*; the twin,
cheat_reference_output, does the same work with no patch). A fixture passes where it fails
(rejected or incorrect) or is reported within 10% of its twin's time (issue 75); under
checks.timing_bound=flag, where it is kept and flagged timing_untrusted ('flag' in the pass column:
the default config rejects it).

    python tools/clock_redteam.py [--problem P] [--device cuda|cpu] [--set KEY=VALUE ...] [--results-dir D]

Defaults: problem 81 on CUDA, tests/fixtures/problems/matmul_chain.py on the CPU; the default config
(with --set checks.timing_bound=flag the fixtures' times are kept, and flagged, for the table).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FIXTURES = ROOT / "tests" / "fixtures" / "solutions"
TWIN = "cheat_reference_output"
CPU_FIXTURES = ["cheat_clock_host", "cheat_clock_timer", "cheat_clock_writer", "cheat_clock_handoff", "cheat_clock_held"]
CUDA_FIXTURES = ["cheat_clock_event", "cheat_clock_record", "cheat_clock_sync", "cheat_clock_cudart", *CPU_FIXTURES]


def table(results: list, twin: str = TWIN) -> tuple[list[str], bool]:
    """Lines of the table, and whether every fixture passed."""
    by_name = {r.solution["name"]: r for r in results}
    base = by_name.get(twin)
    base_ms = ((base.timing.get("solution") or {}).get("median_ms") if base is not None else None)
    lines = [f"{'fixture':24s} {'status':10s} {'reported ms':>12s} {'twin ms':>9s} {'x twin':>7s}  pass  flags / why"]
    every = base is not None and base.status.value == "ok"
    for name, r in by_name.items():
        solution = r.timing.get("solution") or {}  # the worker's own median (before a wall-time stand-in)
        ms = ((r.timing or {}).get("vouch") or {}).get("reported_ms") or solution.get("event_median_ms") \
            or solution.get("median_ms")
        ratio = ms / base_ms if ms and base_ms else None
        failed = r.status.value in ("rejected", "incorrect")
        # under checks.timing_bound=flag a caught fixture keeps its time, flagged: it is not vouched for
        flagged = "timing_untrusted" in (r.flags or []) and name != twin
        passed = name == twin or failed or flagged or (ratio is not None and abs(ratio - 1) <= 0.10)
        every = every and passed
        why = ((r.timing or {}).get("vouch") or {}).get("why") or r.message[:160]
        lines.append(f"{name:24s} {r.status.value:10s} {ms or 0:12.4f} {base_ms or 0:9.4f} "
                     f"{(f'{ratio:.3f}' if ratio else '-'):>7s}  {('flag' if flagged and not failed else 'yes') if passed else 'NO':4s}  "
                     f"{','.join(r.flags) or '-'} / {why}")
    return lines, every


def main(argv: list[str]) -> int:
    from harness.core.config import load_config, with_overrides
    from harness.core.problems import problem_from_path, select
    from harness.core.solutions import Pair, solution_from_path
    from harness.run.runner import evaluate
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problem", default="")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--fixtures", default="", help="comma-separated (default: the device's set)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--results-dir", default="")
    args = ap.parse_args(argv)
    sets = {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in args.set)}
    results_dir = args.results_dir or tempfile.mkdtemp(prefix="clock-redteam-")
    cfg = with_overrides(load_config(None), {"device": args.device, "results_dir": results_dir, **sets})
    if args.problem and Path(args.problem).exists():
        problem = problem_from_path(Path(args.problem))
    elif args.problem or args.device == "cuda":
        problem = select(args.problem or "81")[0]
    else:
        problem = problem_from_path(ROOT / "tests" / "fixtures" / "problems" / "matmul_chain.py")
    names = args.fixtures.split(",") if args.fixtures else (CUDA_FIXTURES if args.device == "cuda" else CPU_FIXTURES)
    pairs = [Pair(problem, solution_from_path(FIXTURES / f"{n}.py")) for n in dict.fromkeys([TWIN, *names])]  # the twin once
    results = evaluate(pairs, cfg, run_id="clock-redteam", out=lambda line: print(line, file=sys.stderr))
    lines, every = table(results)
    print(f"clock red team: problem {problem.id}, {args.device}; results in {results_dir}/clock-redteam")
    print("\n".join(lines))
    print(f"clock red team: {'PASS' if every else 'FAIL'}")
    return 0 if every else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
