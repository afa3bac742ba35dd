"""run_eval.py check, the CI gate: lint the selected solutions, run the pipeline (correctness only
unless timing is enabled), and on a run without a GPU compile the CUDA solutions it could not run
(compile-only); then judge it (harness/record/gate.py): regressions against a baseline run, JUnit XML,
GitHub's step summary. Skipped pairs are reported as not run, never as passed."""
from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path
from typing import Callable

from ..record import leaderboard, standings
from ..isolate import sandbox
from ..core.config import Config, with_overrides
from ..core.errors import BadInput
from ..record.gate import Verdict, compare, compare_pairs, junit as junit_xml, step_summary
from ..compile.lint import lint_file
from ..core.results import Status
from ..compile.compile_only import compile_solutions
from ..run.runner import evaluate
from ..core.problems import _display
from ..core.solutions import Pair, solution_from_path


def revision_pairs(pairs: list[Pair], rev: str, folder: Path,
                   out: Callable[[str], None] = print) -> dict[tuple[str, str], Pair]:
    """For each pair whose solution file is in a git repository and was there at `rev`: the same
    problem with the solution as it was at `rev` (its folder's family tree exported with git
    archive, so its helper files are those of `rev` too), named '<name>@<short rev>'. Keyed by the
    current pair's (problem id, solution name)."""
    found: dict[tuple[str, str], Pair] = {}
    for pair in pairs:
        path = pair.solution.path
        try:
            top = Path(_git(path.parent, "rev-parse", "--show-toplevel"))
        except RuntimeError:
            out(f"--baseline-rev: {_display(path)} is not in a git repository; not compared")
            continue
        try:
            short = _git(top, "rev-parse", "--short=7", f"{rev}^{{commit}}")
        except RuntimeError:
            raise BadInput("--baseline-rev", f"'{rev}' is not a revision of {top}") from None
        family = path.parent.parent.relative_to(top)
        tree = folder / short
        if not (tree / family).is_dir():
            archive = subprocess.run(["git", "-C", str(top), "archive", "--format=tar", rev, "--", str(family)],
                                     capture_output=True)
            if archive.returncode != 0:
                out(f"--baseline-rev: {family}/ is not in {rev}; {_display(path)} is new, not compared")
                continue
            tree.mkdir(parents=True, exist_ok=True)
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        then = tree / path.relative_to(top)
        if not then.is_file():
            out(f"--baseline-rev: {_display(path)} is not in {rev}; new, not compared")
            continue
        old = solution_from_path(then)
        found[(pair.problem.id, pair.solution.name)] = Pair(pair.problem, dataclasses.replace(
            old, name=f"{pair.solution.name}@{short}"))
    return found


def _git(where: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip())
    return proc.stdout.strip()


def run_check(pairs: list[Pair], cfg: Config, *, run_id: str, baseline: str | None = None,
              baseline_rev: str | None = None, max_regression: float | None = None, allow_skipped: bool = False,
              junit: str | None = None, jobs: int | None = None, solution_filter: str | None = None,
              out: Callable[[str], None] = print, width: int | None = None) -> Verdict:
    """The CI gate. `width`: a terminal's (the table and the pairs' lines fit it); None: in full.
    `max_regression`: the threshold of a regression; None: the config's (timing.gate_max_regression),
    which is also where the yardstick's rounds read it."""
    if max_regression is None:
        max_regression = cfg.timing.gate_max_regression
    elif max_regression != cfg.timing.gate_max_regression:
        cfg = with_overrides(cfg, {"timing.gate_max_regression": max_regression})
    files = {pair.solution.path: pair.problem for pair in pairs}
    findings = [f for path, problem in files.items() for f in lint_file(path, problem)]
    for finding in findings:
        out(str(finding))
    out(f"lint: {len(files)} file(s), {sum(f.severity == 'error' for f in findings)} error(s)")
    then = revision_pairs(pairs, baseline_rev, sandbox.work_folder("kb-rev-"), out) if baseline_rev else {}
    ordered = [p for pair in pairs for p in [pair] + ([then[(pair.problem.id, pair.solution.name)]]
                                                        if (pair.problem.id, pair.solution.name) in then else [])]
    everything = evaluate(ordered, cfg, run_id=run_id, out=out, width=width,
                          yardsticks={key: (key[0], p.solution.name) for key, p in then.items()})
    recorded = {(r.problem["id"], r.solution["name"]): r for r in everything}
    yardsticks = {(key[0], p.solution.name) for key, p in then.items()}
    results = [r for r in everything if (r.problem["id"], r.solution["name"]) not in yardsticks]
    compiled: list[dict] = []
    by_key = {(p.problem.id, p.solution.name): p.solution.path for p in pairs}
    needs_cuda = sorted({by_key[(r.problem["id"], r.solution["name"])] for r in results
                         if r.status is Status.SKIPPED and "CUDA" in r.message and r.env.get("device") == "cpu"})
    if needs_cuda:
        out(f"compile-only: the {len(needs_cuda)} CUDA solution(s) skipped above (no GPU here) are compiled with "
            f"nvcc instead, to catch their compile errors; nothing is run")
        compiled = compile_solutions(needs_cuda, cfg, jobs=jobs, out=out)
    changes = []
    if then:  # each solution against itself at the revision, timed in the same rounds of this run
        # a solution whose sources are those of the revision was not run twice: it is its own then
        # (harness/run/runner.py: every pair run has a result; one left out is one unchanged)
        unchanged = [key for key, p in then.items() if (key[0], p.solution.name) not in recorded and key in recorded]
        if unchanged:
            out(f"--baseline-rev: {len(unchanged)} of {len(then)} solution(s) unchanged since {baseline_rev} "
                f"(the same sources, helpers included): judged once, timed against themselves in one process")
        changes = compare_pairs([(recorded.get(key), recorded.get((key[0], p.solution.name)) or recorded[key], key[1])
                                 for key, p in then.items() if (key[0], p.solution.name) in recorded
                                 or key in unchanged], max_regression, cfg.timing.confidence)
    if baseline:
        problems_ = {p.problem.id for p in pairs}
        names = {p.solution.name for p in pairs} if solution_filter else None
        base = [e for e in standings.select(standings.gather([baseline], warn=out))
                if e.result.problem["id"] in problems_ and (names is None or e.result.solution["name"] in names)]
        changes = compare(results, base, max_regression, cfg.timing.confidence)
    verdict = Verdict(results, findings, compiled, changes, allow_skipped, linted=[str(p) for p in files])
    out("")
    out(leaderboard.terminal_table(everything, wide=width is None))
    for change in changes:
        out(f"{'regression' if change.regression else 'improvement' if change.improvement else 'compared'}: "
            f"{change.message}")
    for reason in verdict.reasons:
        out(f"FAIL: {reason}")
    out(verdict.headline())
    if junit:
        Path(junit).parent.mkdir(parents=True, exist_ok=True)
        Path(junit).write_bytes(junit_xml(verdict))
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_file:
        with open(summary_file, "a") as f:
            f.write(step_summary(verdict))
    out(f"results: {cfg.results_dir}/{run_id}/" + (f"; JUnit: {junit}" if junit else ""))
    out(f"leaderboard: python run_eval.py leaderboard {cfg.results_dir}/{run_id}")
    return verdict
