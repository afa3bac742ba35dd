#!/usr/bin/env python3
"""Evaluate custom-kernel solutions against their reference problems.

  python run_eval.py --problem conv_transpose2d            # every solution of every problem in the family
  python run_eval.py --problem 57 --solution direct        # one problem, one solution (by name)
  python run_eval.py --problem 57 --solution path/to/x.py  # any solution file
  python run_eval.py report results/<run-id> [--format md|csv|text]

Exit codes: 0 every evaluated pair is correct; 1 some pair is not; 2 bad usage or bad input.
"""
from __future__ import annotations

import argparse
import sys

from harness import leaderboard, problems, solutions
from harness.config import DEVICES, load_config, parse_override, with_overrides
from harness.errors import BadInput
from harness.runner import evaluate
from harness.store import load_run, new_run_id

DEFAULT_CONFIG = "configs/default.yaml"


def eval_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run_eval.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--problem", help="family, problem id, number, unique prefix, or a problem file path")
    p.add_argument("--solution", help="solution name (file stem) or a path to any solution file")
    p.add_argument("--config", default=DEFAULT_CONFIG, help=f"YAML config (default {DEFAULT_CONFIG})")
    p.add_argument("--device", choices=DEVICES, help="override the config's device")
    p.add_argument("--run-id", help="results go to <results_dir>/<run-id>/ (default: a new timestamped id)")
    p.add_argument("--resume", action="store_true", help="skip pairs already recorded in --run-id")
    p.add_argument("--results-dir", help="override the config's results_dir")
    p.add_argument("--jobs", type=int, help="parallel build workers (default: config build.jobs)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override any config key, e.g. --set timing.min_samples=20")
    p.add_argument("--format", choices=["text", "md", "csv"], default="text", help="final table format")
    return p


def report_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run_eval.py report", description="Print the table of a recorded run.")
    p.add_argument("run_dir", help="results/<run-id>")
    p.add_argument("--format", choices=["text", "md", "csv"], default="text")
    return p


def render(results, fmt: str) -> str:
    return {"text": leaderboard.table, "md": leaderboard.markdown, "csv": leaderboard.to_csv}[fmt](results)


def cmd_report(argv: list[str]) -> int:
    args = report_parser().parse_args(argv)
    print(render(load_run(args.run_dir), args.format))
    return 0


def cmd_eval(argv: list[str]) -> int:
    args = eval_parser().parse_args(argv)
    if args.resume and not args.run_id:
        raise BadInput("--resume", "needs --run-id naming the run to resume")
    cfg = load_config(args.config)
    overrides = dict(parse_override(s) for s in args.set)
    if args.device:
        overrides["device"] = args.device
    if args.results_dir:
        overrides["results_dir"] = args.results_dir
    if args.jobs is not None:
        overrides["build.jobs"] = args.jobs
    if overrides:
        cfg = with_overrides(cfg, overrides)
    selected = problems.select(args.problem)
    if not selected:
        raise BadInput("problems/", "no problem files found")
    for problem in selected:
        problems.validate(problem)
    pairs = solutions.select_pairs(selected, args.solution, args.problem is not None, problems.discover())
    run_id = args.run_id or new_run_id()
    results = evaluate(pairs, cfg, run_id=run_id, resume=args.resume)
    print()
    print(render(results, args.format))
    counts = leaderboard.summary(results)
    print(f"\nresults: {cfg.results_dir}/{run_id}/  ({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))})")
    evaluated = [r for r in results if r.status.evaluated]
    if not evaluated:
        print("warning: no pair was evaluated (all skipped)", file=sys.stderr)
    return 0 if all(r.status.passed for r in evaluated) else 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "report":
            return cmd_report(argv[1:])
        return cmd_eval(argv)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
