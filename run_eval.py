#!/usr/bin/env python3
"""Evaluate custom-kernel solutions against their reference problems.

  python run_eval.py --problem conv_transpose2d            # every solution of every problem in the family
  python run_eval.py --problem 57 --solution direct        # one problem, one solution (by name)
  python run_eval.py --problem 57 --solution path/to/x.py  # any solution file
  python run_eval.py report results/<run-id> [--format md|csv|text] [--phases]
  python run_eval.py leaderboard [RUN_DIR ...] [--format text|md|csv|json|html] [--plot F.png] [--out DIR]
  python run_eval.py lint [SOLUTION_OR_FOLDER ...]          # static checks, no GPU, seconds
  python run_eval.py compile [SOLUTION_OR_FOLDER ...]       # compile-only (nvcc / c++), no GPU
  python run_eval.py check [--problem P] [--timing] [--junit F] [--baseline RUN_DIR]   # the CI gate
  python run_eval.py batch SUBMISSIONS.jsonl|-  # a training loop's batch: a JSON line per result as it is judged

Exit codes (every command): 0 every evaluated pair is correct (lint/compile: no error); 1 some
pair is not, or the gate found a regression (lint/compile: some error); 2 bad usage or bad input
(one line naming the file and the problem); 3 the checkout changed during the run (its results
cannot be trusted); 5 nothing was evaluated (every pair skipped, e.g. CUDA pairs on a machine
without a GPU; check --allow-skipped accepts it); 130 interrupted (Ctrl-C or SIGTERM: what was
recorded is printed, and --resume --run-id finishes it).
"""
from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
import warnings
from pathlib import Path

# torch warns on import when numpy is absent; the harness does not use numpy (nor need a user's
# problem file), so the warning only alarms a new user of a fresh venv.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

from harness.record import leaderboard
from harness.core import problems, solutions
from harness.core.config import DEVICES, Config, load_config, parse_override, with_overrides
from harness.core.errors import BadInput
from harness.run.runner import CheckoutChanged
from harness.isolate.sandbox import SandboxError
from harness.core.precision import PRECISIONS
from harness.run.runner import evaluate
from harness.run.progress import TERMINAL_WIDTH, printer
from harness.core.store import load_run, new_run_id

DEFAULT_CONFIG = "configs/default.yaml"
# exit codes (the module's docstring, README.md, docs/usage.md say the same)
OK, FAILED, BAD_INPUT, CHECKOUT_CHANGED, NOTHING_EVALUATED, INTERRUPTED = 0, 1, 2, 3, 5, 130


def eval_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run_eval.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    selection_args(p)
    p.add_argument("--resume", action="store_true", help="skip pairs already recorded in --run-id")
    p.add_argument("--format", choices=["text", "md", "csv"], default="text", help="final table format")
    p.add_argument("--wide", action="store_true", help="the text table with full names and spreads (wider than 120 columns)")
    return p


def selection_args(p: argparse.ArgumentParser) -> None:
    """What the eval and check commands share: which pairs, which config, where results go."""
    p.add_argument("--problem", action="append", help="family, problem id, number, unique prefix, or a problem file "
                                                      "path (again for more: their union)")
    p.add_argument("--solution", action="append",
                   help="solution name (file stem) or a path to any solution file; 'reference': each problem's own "
                        "Model as its solution (A/A: the harness's noise floor); again for more: each one's pairs")
    run_args(p)


def run_args(p: argparse.ArgumentParser) -> None:
    """Which config, where results go, what runs them (eval, check and batch)."""
    p.add_argument("--config", default=DEFAULT_CONFIG, help=f"YAML config (default {DEFAULT_CONFIG})")
    p.add_argument("--device", choices=DEVICES, help="override the config's device")
    p.add_argument("--run-id", help="results go to <results_dir>/<run-id>/ (default: a new timestamped id)")
    p.add_argument("--results-dir", help="override the config's results_dir")
    p.add_argument("--jobs", type=int, help="parallel build workers (default: config build.jobs)")
    p.add_argument("--gpus", help="evaluation lanes, one per GPU: a number or 'all' (default: config gpus, 1)")
    p.add_argument("--cluster", metavar="local|ray|ray://HOST:PORT",
                   help="where the lanes run: this host (default), a local Ray instance (ray), or a Ray cluster")
    p.add_argument("--precision", metavar="fp32|fp16|bf16",
                   help="cast both models and the floating-point inputs to this dtype (default: config precision, "
                        "fp32); each precision has its own classes and baselines")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override any config key, e.g. --set timing.min_samples=20")


def check_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run_eval.py check", description=(
        "The CI gate: lint, the pipeline (correctness only unless --timing) and, on a machine without a GPU, "
        "compile-only of the CUDA solutions it cannot run. Exit 0 when everything checked passes, 1 when something "
        "fails (a pair, lint, compile-only, a regression), 2 on bad input, 3 when the checkout changed during the "
        "run, 5 when no pair was evaluated and nothing else failed (--allow-skipped: 0). Skipped pairs never pass."))
    selection_args(p)
    p.add_argument("--timing", action="store_true", help="also time the pairs (and compare them with --baseline)")
    p.add_argument("--junit", metavar="FILE", help="write JUnit XML: one testcase per pair")
    against = p.add_mutually_exclusive_group()
    against.add_argument("--baseline", metavar="RUN_DIR", help="fail on regressions against this stored run")
    against.add_argument("--baseline-rev", metavar="REV",
                         help="fail on regressions against each solution as it was at this git revision, timed in "
                              "the same run (with --timing)")
    p.add_argument("--max-regression", type=float, default=None,
                   help="a regression is called when the whole confidence interval of speedup now / speedup then "
                        "lies this much below 1 (default: timing.gate_max_regression, 0.05)")
    p.add_argument("--allow-skipped", action="store_true", help="pass even when no pair could be evaluated here")
    p.add_argument("--wide", action="store_true", help="lines and the table in full (wider than 120 columns)")
    return p


def batch_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run_eval.py batch", description=(
        "Judge a batch of solutions on the main command's pipeline and print a JSON line for each as soon as it "
        "is judged (progress goes to stderr). Each input line is an object: problem (as --problem takes it), "
        "source (the solution's text) or file (its path), and optionally name and tag (handed back). Exit 0 when "
        "every submission was judged, whatever its verdict; 2 when some line could not be (its JSON line says "
        "why; the others are judged); 130 interrupted (--resume --run-id goes on)."))
    p.add_argument("submissions", help="a JSON-lines file of submissions, or - for standard input")
    run_args(p)
    p.add_argument("--resume", action="store_true", help="answer the submissions recorded in --run-id from its "
                                                         "results, and judge the rest")
    p.add_argument("--full", action="store_true", help="each line also holds the whole result (as results/ stores it)")
    return p


def cmd_batch(argv: list[str]) -> int:
    import json
    from harness.cli.batch import judge_batch
    args = batch_parser().parse_args(argv)
    if args.resume and not args.run_id:
        raise BadInput("--resume", "needs --run-id naming the run to resume")
    cfg = configured(args)
    where = "<stdin>" if args.submissions == "-" else args.submissions
    if where != "<stdin>" and not Path(where).is_file():
        raise BadInput(where, "submissions file not found")
    text = sys.stdin.read() if where == "<stdin>" else Path(where).read_text()
    submissions, malformed = [], []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            submissions.append(json.loads(raw))
        except json.JSONDecodeError as exc:
            malformed.append({"index": None, "tag": None, "status": "bad_input", "passed": False,
                              "message": f"{where}:{number}: not a JSON object ({exc.msg})"})
    run_id = args.run_id or new_run_id()
    err = printer(None, sys.stderr)
    bad = len(malformed)
    for answer in malformed:
        print(json.dumps(answer), flush=True)
    stop = threading.Event()
    try:
        with interruptible():
            for answer in judge_batch(submissions, cfg, run_id=run_id, resume=args.resume, out=err, full=args.full,
                                      stop=stop):
                bad += answer["status"] == "bad_input"
                print(json.dumps(answer, default=str), flush=True)
    except KeyboardInterrupt:
        stop.set()   # (interrupted while printing: the run's own thread halts it)
        err(f"interrupted: the rest: python run_eval.py {resume_command(['batch', *argv], run_id)}")
        return INTERRUPTED
    err(f"results: {cfg.results_dir}/{run_id}/")
    return BAD_INPUT if bad else OK


def report_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run_eval.py report", description="Print the table of a recorded run.")
    p.add_argument("run_dir", help="results/<run-id>")
    p.add_argument("--format", choices=["text", "md", "csv"], default="text")
    p.add_argument("--wide", action="store_true", help="the text table with full names and spreads")
    p.add_argument("--phases", action="store_true", help="the phase table instead: seconds per phase of each pair, "
                                                         "its GPU time and its overhead")
    return p


def render(results, fmt: str, wide: bool = False) -> str:
    if fmt == "text":
        return leaderboard.terminal_table(results, wide)
    return {"md": leaderboard.markdown, "csv": leaderboard.to_csv}[fmt](results)


def cmd_report(argv: list[str]) -> int:
    args = report_parser().parse_args(argv)
    results = load_run(args.run_dir)
    if args.phases:
        print(leaderboard.phase_table(results, args.format))
    else:
        print(render(results, args.format, args.wide))
    return 0


def leaderboard_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run_eval.py leaderboard",
                                description="Rank stored results (never builds or runs anything): one board per GPU, "
                                            "per problem the correct solutions by speedup, then fast_p, geomean and "
                                            "pass@k per solution set.")
    p.add_argument("runs", nargs="*", help="run folders, or folders of runs (default: your runs under results/, "
                                           "the committed results/snapshots/ named apart)")
    p.add_argument("--all", action="store_true", help="every result, not only the latest per (problem, solution, GPU)")
    p.add_argument("--problem", help="only problems whose id contains this")
    p.add_argument("--solution", help="only this solution (or solution set: gen for gen.0, gen.1, ...)")
    p.add_argument("--gpu", help="only GPUs whose name contains this")
    p.add_argument("--format", choices=["text", "md", "csv", "json", "html"], default="text")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the speedups (matplotlib)")
    p.add_argument("--out", metavar="DIR", help="write every format and the plot into DIR")
    p.add_argument("--wide", action="store_true", help="the text board in full (wider than 120 columns)")
    p.add_argument("--include-degenerate", action="store_true",
                   help="count results of degenerate problems (flag degenerate_problem: output independent of the "
                        "inputs) in the summary's rates and geometric means")
    return p


def cmd_leaderboard(argv: list[str]) -> int:
    import json as jsonlib

    from harness.record import htmlboard, standings
    args = leaderboard_parser().parse_args(argv)
    sources = args.runs
    if not sources:  # the user's own runs; the committed snapshots are named apart, not mixed in
        own, snapshots = standings.own_runs("results")
        if snapshots:
            printer(None if args.wide or args.format != "text" else TERMINAL_WIDTH, sys.stderr)(
                f"snapshots (not on this board; name a folder to see one): "
                + ", ".join(str(p) for p in snapshots))
        if not own:
            raise BadInput("results/", "no runs of yours yet (run python run_eval.py first, or name a folder"
                                       + (", e.g. " + str(snapshots[-1]) if snapshots else "") + ")")
        sources = [str(p) for p in own]
    entries = standings.gather(sources, warn=lambda line: print(line, file=sys.stderr))
    chosen = standings.select(entries, keep_all=args.all, problem=args.problem, solution=args.solution, gpu=args.gpu)
    if not chosen:
        raise BadInput("leaderboard", "no result matches --problem/--solution/--gpu")
    data = leaderboard.board_data(standings.boards(chosen), standings.summarize(chosen, args.include_degenerate))
    texts = {"text": lambda: leaderboard.board_text(data, "text", wide=args.wide),
             "md": lambda: leaderboard.board_text(data, "md"),
             "csv": lambda: leaderboard.board_csv(data) + "\n" + leaderboard.summary_csv(data),
             "json": lambda: jsonlib.dumps(data, indent=1, default=str)}
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        png = htmlboard.plot_png(data)
        (out / "leaderboard.png").write_bytes(png)
        for fmt, name in (("text", "leaderboard.txt"), ("md", "leaderboard.md"), ("json", "leaderboard.json")):
            (out / name).write_text(texts[fmt]() + "\n")
        (out / "leaderboard.csv").write_text(leaderboard.board_csv(data))
        (out / "summary.csv").write_text(leaderboard.summary_csv(data))
        (out / "leaderboard.html").write_text(htmlboard.page(data, sources, png))
        print(f"leaderboard of {len(chosen)} result(s) written to {out}/ (txt, md, csv, json, html, png)")
        return 0
    png = htmlboard.plot_png(data) if args.plot or args.format == "html" else None
    if args.plot:
        Path(args.plot).write_bytes(png)
    print(htmlboard.page(data, sources, png) if args.format == "html" else texts[args.format]())
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
    from harness.compile.lint import lint_file
    args = checks_parser("lint", "Static checks of solution files (no import, no GPU).").parse_args(argv)
    findings = []
    pairs = _files_and_problems(args)
    for path, problem in pairs:
        findings += lint_file(path, problem)
    out = printer(TERMINAL_WIDTH)
    for finding in findings:
        out(str(finding))
    errors = sum(f.severity == "error" for f in findings)
    out(f"lint: {len(pairs)} file(s), {errors} error(s), {len(findings) - errors} warning(s)")
    return 1 if errors else 0


def cmd_compile(argv: list[str]) -> int:
    from harness.compile.compile_only import compile_solutions
    p = checks_parser("compile", "Compile each solution's load_inline sources against the torch headers "
                                 "without linking or loading them (needs nvcc for CUDA sources, no GPU).")
    p.add_argument("--config", default=DEFAULT_CONFIG)
    p.add_argument("--arch", default="9.0", help="CUDA architecture to compile for (TORCH_CUDA_ARCH_LIST)")
    p.add_argument("--jobs", type=int, help="solutions compiled in parallel")
    args = p.parse_args(argv)
    cfg = load_config(args.config)
    files = [f for f, _ in _files_and_problems(args)]
    results = compile_solutions(files, cfg, arch=args.arch, jobs=args.jobs, out=printer(TERMINAL_WIDTH))
    bad = [r for r in results if r["status"] not in ("ok", "skipped")]
    skipped = sum(r["status"] == "skipped" for r in results)
    print(f"compile: {len(results)} file(s), {len(bad)} failed, {skipped} skipped")
    return 1 if bad else 0


def configured(args, **extra) -> Config:
    """The config file with the command line's overrides (and `extra` dotted keys) applied."""
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
    if args.cluster is not None:
        if args.cluster == "local":
            overrides["cluster"] = "local"
        elif args.cluster == "ray" or args.cluster.startswith("ray://") or args.cluster == "ray:auto":
            overrides["cluster"] = "ray"
            if args.cluster != "ray":
                overrides["ray.address"] = "auto" if args.cluster == "ray:auto" else args.cluster
        else:
            raise BadInput("--cluster", f"expected local, ray, ray:auto or ray://HOST:PORT, got {args.cluster!r}")
    if args.precision is not None:
        if args.precision not in PRECISIONS:
            raise BadInput("--precision", f"expected one of {', '.join(PRECISIONS)}, got {args.precision!r}")
        overrides["precision"] = args.precision
    overrides.update(extra)
    cfg = with_overrides(cfg, overrides) if overrides else cfg
    if cfg.cluster == "ray":
        from harness.run.cluster import ray_module
        ray_module()  # one line naming what to install when Ray is missing
    return cfg


def selected_pairs(args, cfg: Config) -> list:
    """The pairs of --problem and --solution, each given any number of times: the problems' union,
    each solution's pairs with them, in the order given, each pair once."""
    selected = list({p.id: p for spec in (args.problem or [None]) for p in problems.select(spec)}.values())
    if not selected:
        raise BadInput("problems/", "no problem files found")
    from harness.compile.build import cache_dir_of
    every, shims = problems.discover(), reference_dir(cache_dir_of(cfg))
    pairs = [pair for spec in (args.solution or [None])
             for pair in solutions.select_pairs(selected, spec, bool(args.problem), every,
                                                precision=cfg.precision, reference_dir=shims)]
    return list({(pair.problem.id, str(pair.solution.path)): pair for pair in pairs}.values())


def reference_dir(cache: Path) -> Path:
    """Where --solution reference writes its shims: beside the build cache, not in it (a sandboxed
    worker does not see the cache, and reads its solution file)."""
    return cache.parent / f"{cache.name}-reference"


def cmd_eval(argv: list[str]) -> int:
    args = eval_parser().parse_args(argv)
    if args.resume and not args.run_id:
        raise BadInput("--resume", "needs --run-id naming the run to resume")
    cfg = configured(args)
    if args.resume and not (Path(cfg.results_dir) / args.run_id / "run.json").is_file():
        raise BadInput("--resume", f"no run '{args.run_id}' is recorded under {cfg.results_dir}/ (no "
                                   f"{cfg.results_dir}/{args.run_id}/run.json); without --resume it starts anew")
    pairs = selected_pairs(args, cfg)
    run_id = args.run_id or new_run_id()
    width = None if args.wide else TERMINAL_WIDTH
    out = printer(width)
    where = f"{cfg.results_dir}/{run_id}"
    try:
        with interruptible():
            results = evaluate(pairs, cfg, run_id=run_id, resume=args.resume, out=out, width=width)
    except KeyboardInterrupt:   # Ctrl-C, or a SIGTERM (timeout, a scheduler): what is recorded, and how to go on
        results = load_run(where) if (Path(where) / "run.json").is_file() else []
        print()
        if results:
            print(render(results, args.format, args.wide))
        out(f"\ninterrupted: {len(results)} of {len(pairs)} pair(s) recorded in {where}/; the rest: "
            f"python run_eval.py {resume_command(argv, run_id)}")
        return INTERRUPTED
    print()
    print(render(results, args.format, args.wide))
    counts = leaderboard.summary(results)
    out(f"\nresults: {where}/  ({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))})")
    out(f"leaderboard: python run_eval.py leaderboard {where}")
    out(f"lane logs: {where}/logs/")
    evaluated = [r for r in results if r.status.evaluated]
    if not evaluated:
        printer(width, sys.stderr)(nothing_evaluated(results))
        return NOTHING_EVALUATED
    return OK if all(r.status.passed for r in evaluated) else FAILED


def resume_command(argv: list[str], run_id: str) -> str:
    """The arguments that go on with an interrupted run: the same ones, with --resume --run-id."""
    import shlex
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--resume",):
            continue
        elif arg == "--run-id":
            skip = True
        elif not arg.startswith("--run-id="):
            kept.append(arg)
    return shlex.join([*kept, "--resume", "--run-id", run_id])


@contextlib.contextmanager
def interruptible():
    """SIGTERM (timeout, a batch scheduler) taken as Ctrl-C while a run goes on, so that both end it
    the same way: lanes and workers stopped (they die with this process), what is recorded printed."""
    def stop(signum, frame):
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def nothing_evaluated(results: list) -> str:
    """One line for a run in which no pair could be evaluated: why, and what to run instead here."""
    cuda = [r for r in results if "needs a CUDA device" in r.message]
    if results and len(cuda) == len(results):
        return (f"warning: no CUDA device: {len(results)} pair(s) skipped. On this machine: `python run_eval.py "
                f"check --device cpu` (lint, compile-only, the CPU pipeline) or `python run_eval.py --problem "
                f"elementwise_add --device cpu` (C++ solutions on the CPU)")
    why = f": {results[0].message}" if results else ""
    return f"warning: no pair was evaluated ({len(results)} skipped{why})"


def cmd_check(argv: list[str]) -> int:
    from harness.cli.check import run_check
    args = check_parser().parse_args(argv)
    extra = {} if args.timing else {"timing.enabled": False}
    if args.max_regression is not None:
        if not 0 <= args.max_regression < 1:
            raise BadInput("--max-regression", f"expected a share in [0, 1), e.g. 0.05, got {args.max_regression}")
        extra["timing.gate_max_regression"] = args.max_regression
    cfg = configured(args, **extra)
    pairs = selected_pairs(args, cfg)
    width = None if args.wide else TERMINAL_WIDTH
    verdict = run_check(pairs, cfg, run_id=args.run_id or "check-" + new_run_id(), baseline=args.baseline,
                        baseline_rev=args.baseline_rev,
                        allow_skipped=args.allow_skipped, junit=args.junit, jobs=args.jobs,
                        solution_filter=args.solution, out=printer(width), width=width)
    if verdict.nothing_evaluated and verdict.reasons == [verdict.nothing_evaluated]:
        return NOTHING_EVALUATED
    return FAILED if verdict.reasons else OK


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        commands = {"report": cmd_report, "lint": cmd_lint, "compile": cmd_compile, "leaderboard": cmd_leaderboard,
                    "check": cmd_check, "batch": cmd_batch}
        if argv and argv[0] in commands:
            return commands[argv[0]](argv[1:])
        return cmd_eval(argv)
    except BadInput as exc:  # one line, whatever its width: the file and the problem
        print(f"error: {exc}", file=sys.stderr)
        return BAD_INPUT
    except SandboxError as exc:  # sandbox: required, on a host that lacks part of it
        print(f"error: {exc}", file=sys.stderr)
        return BAD_INPUT
    except CheckoutChanged as exc:  # results stored; the run's verdicts cannot be trusted
        print(f"error: {exc}", file=sys.stderr)
        return CHECKOUT_CHANGED


if __name__ == "__main__":
    sys.exit(main())
