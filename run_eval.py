#!/usr/bin/env python3
"""Evaluate custom-kernel solutions against their reference problems.

  python run_eval.py --problem conv_transpose2d            # every solution of every problem in the family
  python run_eval.py --problem 57 --solution direct        # one problem, one solution (by name)
  python run_eval.py --problem 57 --solution path/to/x.py  # any solution file
  python run_eval.py report results/<run-id> [--format md|csv|text]
  python run_eval.py lint [SOLUTION_OR_FOLDER ...]          # static checks, no GPU, seconds
  python run_eval.py compile [SOLUTION_OR_FOLDER ...]       # compile-only (nvcc / c++), no GPU

Exit codes: 0 every evaluated pair is correct (lint/compile: no error); 1 some pair is not
(lint/compile: some error); 2 bad usage or bad input.
"""
from __future__ import annotations

import argparse
import sys
import warnings

# torch warns on import when numpy is absent; the harness does not use numpy (nor need a user's
# problem file), so the warning only alarms a new user of a fresh venv.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

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
    p.add_argument("--gpus", help="evaluation lanes, one per GPU: a number or 'all' (default: config gpus, 1)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override any config key, e.g. --set timing.min_samples=20")
    p.add_argument("--format", choices=["text", "md", "csv"], default="text", help="final table format")
    return p


def report_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run_eval.py report", description="Print the table of a recorded run.")
    p.add_argument("run_dir", help="results/<run-id>")
    p.add_argument("--format", choices=["text", "md", "csv"], default="text")
    p.add_argument("--phases", action="store_true", help="the phase table instead: seconds per phase of each pair, "
                                                         "its GPU time and its overhead")
    return p


def render(results, fmt: str) -> str:
    return {"text": leaderboard.table, "md": leaderboard.markdown, "csv": leaderboard.to_csv}[fmt](results)


def cmd_report(argv: list[str]) -> int:
    args = report_parser().parse_args(argv)
    results = load_run(args.run_dir)
    if args.phases:
        print(leaderboard.phase_table(results, args.format))
    else:
        print(render(results, args.format))
    return 0


def checks_parser(command: str, what: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"run_eval.py {command}", description=what)
    p.add_argument("paths", nargs="*", help="solution files or folders (default: every solution under solutions/)")
    p.add_argument("--problem", help="the problem the files solve (default: from their place under solutions/)")
    return p


def _files_and_problems(args) -> list[tuple]:
    files = solutions.solution_files(args.paths)
    if not files:
        raise BadInput(" ".join(args.paths) or "solutions/", "no solution files found")
    everything = problems.discover()
    explicit = problems.select(args.problem) if args.problem else None
    if explicit is not None and len(explicit) != 1:
        raise BadInput("--problem", f"'{args.problem}' matches {len(explicit)} problems; name one")
    return [(f, explicit[0] if explicit else solutions.problem_for(f, everything)) for f in files]


def cmd_lint(argv: list[str]) -> int:
    from harness.lint import lint_file
    args = checks_parser("lint", "Static checks of solution files (no import, no GPU).").parse_args(argv)
    findings = []
    pairs = _files_and_problems(args)
    for path, problem in pairs:
        findings += lint_file(path, problem)
    for finding in findings:
        print(finding)
    errors = sum(f.severity == "error" for f in findings)
    print(f"lint: {len(pairs)} file(s), {errors} error(s), {len(findings) - errors} warning(s)")
    return 1 if errors else 0


def cmd_compile(argv: list[str]) -> int:
    from harness.runner import compile_solutions
    p = checks_parser("compile", "Compile each solution's load_inline sources against the torch headers "
                                 "without linking or loading them (needs nvcc for CUDA sources, no GPU).")
    p.add_argument("--config", default=DEFAULT_CONFIG)
    p.add_argument("--arch", default="9.0", help="CUDA architecture to compile for (TORCH_CUDA_ARCH_LIST)")
    p.add_argument("--jobs", type=int, help="solutions compiled in parallel")
    args = p.parse_args(argv)
    cfg = load_config(args.config)
    files = [f for f, _ in _files_and_problems(args)]
    results = compile_solutions(files, cfg, arch=args.arch, jobs=args.jobs)
    bad = [r for r in results if r["status"] not in ("ok", "skipped")]
    skipped = sum(r["status"] == "skipped" for r in results)
    print(f"compile: {len(results)} file(s), {len(bad)} failed, {skipped} skipped")
    return 1 if bad else 0


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
    if args.gpus is not None:
        if args.gpus != "all" and not (args.gpus.isdigit() and int(args.gpus) >= 1):
            raise BadInput("--gpus", f"expected a number of GPUs >= 1 or 'all', got {args.gpus!r}")
        overrides["gpus"] = "all" if args.gpus == "all" else int(args.gpus)
    if overrides:
        cfg = with_overrides(cfg, overrides)
    selected = problems.select(args.problem)
    if not selected:
        raise BadInput("problems/", "no problem files found")
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
        commands = {"report": cmd_report, "lint": cmd_lint, "compile": cmd_compile}
        if argv and argv[0] in commands:
            return commands[argv[0]](argv[1:])
        return cmd_eval(argv)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
