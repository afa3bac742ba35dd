"""run_eval.py check, the CI gate: lint the selected solutions, run the pipeline (correctness only
unless timing is enabled), and on a run without a GPU compile the CUDA solutions it could not run
(compile-only); then judge it (harness/gate.py): regressions against a baseline run, JUnit XML,
GitHub's step summary. Skipped pairs are reported as not run, never as passed."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from . import leaderboard, standings
from .config import Config
from .gate import Verdict, compare, junit as junit_xml, step_summary
from .lint import lint_file
from .results import Status
from .compile_only import compile_solutions
from .runner import evaluate
from .solutions import Pair


def run_check(pairs: list[Pair], cfg: Config, *, run_id: str, baseline: str | None = None,
              max_regression: float = 0.05, allow_skipped: bool = False, junit: str | None = None,
              jobs: int | None = None, solution_filter: str | None = None,
              out: Callable[[str], None] = print) -> Verdict:
    files = {pair.solution.path: pair.problem for pair in pairs}
    findings = [f for path, problem in files.items() for f in lint_file(path, problem)]
    for finding in findings:
        out(str(finding))
    out(f"lint: {len(files)} file(s), {sum(f.severity == 'error' for f in findings)} error(s)")
    results = evaluate(pairs, cfg, run_id=run_id, out=out)
    compiled: list[dict] = []
    by_key = {(p.problem.id, p.solution.name): p.solution.path for p in pairs}
    needs_cuda = sorted({by_key[(r.problem["id"], r.solution["name"])] for r in results
                         if r.status is Status.SKIPPED and "CUDA" in r.message and r.env.get("device") == "cpu"})
    if needs_cuda:
        out(f"compile-only: {len(needs_cuda)} CUDA solution(s) this machine cannot run")
        compiled = compile_solutions(needs_cuda, cfg, jobs=jobs, out=out)
    changes = []
    if baseline:
        problems_ = {p.problem.id for p in pairs}
        names = {p.solution.name for p in pairs} if solution_filter else None
        base = [e for e in standings.select(standings.gather([baseline], warn=out))
                if e.result.problem["id"] in problems_ and (names is None or e.result.solution["name"] in names)]
        changes = compare(results, base, max_regression)
    verdict = Verdict(results, findings, compiled, changes, allow_skipped, linted=[str(p) for p in files])
    out("")
    out(leaderboard.table(results))
    for change in changes:
        out(f"{'regression' if change.regression else 'improvement'}: {change.message}")
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
    out(f"results: {cfg.results_dir}/{run_id}/" + (f"; JUnit: {junit}" if junit else "")
        + f"; leaderboard: python run_eval.py leaderboard {cfg.results_dir}/{run_id}")
    return verdict
