"""The CI gate's judgement of a finished check (run_eval.py check): which findings fail it,
regressions against a baseline run, and what CI reads: JUnit XML and GitHub's step summary.
Pure functions of results; the check command runs lint, compile-only and the pipeline.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.problems import _display
from ..core.results import EvalResult, Status
from .standings import Entry, board_of, speedup_of
from ..verdict.timing import change_called, same_rounds_ratio, speedup_change_interval


@dataclass(frozen=True)
class Change:
    problem: str
    solution: str
    kind: str        # "no longer correct", "slower", "disappeared", "now correct", "faster", "within noise",
    #                  "not compared"
    message: str

    @property
    def regression(self) -> bool:
        return self.kind in ("no longer correct", "slower", "disappeared")

    @property
    def improvement(self) -> bool:
        return self.kind in ("now correct", "faster")


def _rounds(result: EvalResult) -> tuple[list, list] | None:
    """(baseline rounds, solution rounds) where both were timed in alternating rounds."""
    t = result.timing or {}
    ref, sol = (t.get(t.get("baseline", "")) or {}).get("rounds"), (t.get("solution") or {}).get("rounds")
    return (ref, sol) if ref and sol and t.get("speedup_ci") else None


def speedup_bounds(result: EvalResult) -> tuple[float, float] | None:
    """(lowest, highest) speedup a result allows: its confidence interval (timing.speedup_ci), or
    for a result timed before the rounds, what its two interquartile ranges allow (the baseline's
    q1 over the solution's q3, its q3 over the solution's q1)."""
    t = result.timing or {}
    if speedup_of(result) is None:
        return None
    if t.get("speedup_ci"):
        return tuple(t["speedup_ci"])
    sol, base = t.get("solution") or {}, t.get(t.get("baseline", ""), {}) or {}
    try:
        return base["q1_ms"] / sol["q3_ms"], base["q3_ms"] / sol["q1_ms"]
    except (KeyError, ZeroDivisionError):
        value = speedup_of(result)
        return value, value


def change_interval(new: EvalResult, old: EvalResult, confidence: float = 0.95) -> tuple[float, float] | None:
    """Confidence interval of speedup(new) / speedup(old): a bootstrap over both results' rounds
    where both have them (the two timed in this run, or in runs with rounds), widened by both
    process terms, else the widest ratio their own intervals allow."""
    if speedup_of(new) is None or speedup_of(old) is None:
        return None
    a, b = _rounds(new), _rounds(old)
    if a and b:  # each side's process term (timing.process_term) at each end, as in its own interval
        low, high = speedup_change_interval(a, b, confidence, seed=0)
        widen = (1 + (new.timing or {}).get("process_term", 0.0)) * (1 + (old.timing or {}).get("process_term", 0.0))
        return low / widen, high * widen
    lo_new, hi_new = speedup_bounds(new)
    lo_old, hi_old = speedup_bounds(old)
    return lo_new / hi_old, hi_new / lo_old


def shared_rounds(new: EvalResult) -> tuple[list, list, bool] | None:
    """(then's rounds, now's rounds, whether in one process) of a pair timed with its solution at a
    revision in the same rounds (harness/run/rounds.py ReferenceRounds), where the times are trusted: now
    as timed beside then in the yardstick worker, else (now could not be imported there) the
    solution's own worker."""
    t = new.timing or {}
    then = t.get("yardstick") or {}
    now, one = (then["now"], True) if (then.get("now") or {}).get("rounds") else (t.get("solution") or {}, False)
    if then.get("rounds") and now.get("rounds") and "event_median_ms" not in then and "event_median_ms" not in now:
        if one or not then.get("pair_rounds"):
            return then["rounds"], now["rounds"], one
        # then timed in some of the solution's rounds (timing.gate_rounds): those rounds of the solution's
        mine = [now["rounds"][i] for i in then["pair_rounds"] if i < len(now["rounds"])]
        return then["rounds"][:len(mine)], mine, one
    return None


def same_rounds_change(new: EvalResult, confidence: float = 0.95) -> tuple[float, tuple[float, float], bool] | None:
    """now's speed over then's, (ratio, interval, in one process), from the rounds both shared
    (timing.same_rounds_ratio): the median over those rounds of each round's then/now, its
    interval a bootstrap over the rounds. Timed in one process (the yardstick worker's two models)
    that is all; timed in two (then in the yardstick worker, now in the solution's), the interval
    is widened at each end by the process term (timing.process_term)."""
    shared = shared_rounds(new)
    if shared is None:
        return None
    then_rounds, now_rounds, one = shared
    term = 1.0 if one else 1 + new.timing.get("process_term", 0.0)
    ratio, interval = same_rounds_ratio(then_rounds, now_rounds, confidence, widen=term)
    return ratio, interval, one


def compare_pairs(pairs: list[tuple[EvalResult, EvalResult | None, str]], max_regression: float,
                  confidence: float = 0.95) -> list[Change]:
    """Regressions and improvements of each (now, then, label): a pair correct then and not now; a
    speedup lower by more than `max_regression`, called only when the whole confidence interval of
    now / then lies below 1 - max_regression (faster: above 1 + max_regression); a pair of then
    that is missing now (`now` None). Where now was timed with then in the same rounds (the CI
    gate's --baseline-rev), now / then is the ratio of their times in those rounds
    (same_rounds_change: the median of the rounds' then/now); else the ratio of the two speedups
    (change_interval)."""
    changes: list[Change] = []
    for new, old, label in pairs:
        problem = old.problem["id"]
        where = f"{problem} / {label}"
        if new is None:
            changes.append(Change(problem, label, "disappeared", f"{where}: in the baseline, not in this check"))
            continue
        if old.status is Status.OK and new.status is not Status.OK:
            changes.append(Change(problem, label, "no longer correct",
                                  f"{where}: correct in the baseline, now {new.status.value}: {new.message}"))
        elif old.status is not Status.OK and new.status is Status.OK:
            changes.append(Change(problem, label, "now correct", f"{where}: {old.status.value} in the baseline, now ok"))
        if old.status is Status.OK and new.status is Status.OK and (new.timing or {}).get("yardstick_failed"):
            changes.append(Change(problem, label, "not compared", f"{where}: the baseline could not be timed in this "
                                                                  f"pair's rounds: {new.timing['yardstick_failed']}"))
            continue
        same = same_rounds_change(new, confidence) if old.status is Status.OK else None
        if same is not None:
            ratio, interval, one = same
            t = new.timing
            now_ms = (t["yardstick"]["now"] if one else t["solution"])["median_ms"]
            added = t["yardstick"].get("settled_rounds", 0)
            more = f" and {added} more of the two alone" if added else ""
            said = (f"{where}: {now_ms:.4g} ms against the baseline's {t['yardstick']['median_ms']:.4g} ms in the "
                    f"same {len(t['yardstick']['rounds']) - added} rounds{more}{', in one process' if one else ''}: "
                    f"x{ratio:.3f} (the rounds' median), {confidence:.0%} CI [{interval[0]:.3f}, {interval[1]:.3f}]")
            changes.append(_called(problem, label, said, interval, max_regression))
            continue
        interval = change_interval(new, old, confidence)
        if interval is None:
            continue
        ratio = speedup_of(new) / speedup_of(old)
        said = (f"{where}: speedup {speedup_of(new):.2f}x against the baseline's {speedup_of(old):.2f}x: "
                f"x{ratio:.3f}, {confidence:.0%} CI [{interval[0]:.3f}, {interval[1]:.3f}]")
        changes.append(_called(problem, label, said, interval, max_regression))
    return changes


def _called(problem: str, label: str, said: str, interval: tuple[float, float], max_regression: float) -> Change:
    called = change_called(interval, max_regression)
    if called == "slower":
        return Change(problem, label, "slower", f"{said}, all of it more than {max_regression:.0%} lower")
    if called == "faster":
        return Change(problem, label, "faster", f"{said}, all of it more than {max_regression:.0%} higher")
    return Change(problem, label, "within noise", f"{said}: no change called")


def compare(current: list[EvalResult], baseline: list[Entry], max_regression: float,
            confidence: float = 0.95) -> list[Change]:
    """Regressions and improvements of `current` against a stored baseline's results on the same
    board (GPU and precision; harness/record/standings.py), by compare_pairs's interval rule."""
    now = {(r.problem["id"], r.solution["name"], board_of(r)): r for r in current}
    boards = {board_of(r) for r in current}
    pairs = []
    for entry in baseline:
        old = entry.result
        key = (old.problem["id"], old.solution["name"], board_of(old))
        if key[2] not in boards or old.status is Status.SKIPPED:
            continue  # another GPU's results are not comparable
        pairs.append((now.get(key), old, key[1]))
    return compare_pairs(pairs, max_regression, confidence)


@dataclass
class Verdict:
    results: list[EvalResult]
    lint: list[Any] = field(default_factory=list)         # harness.compile.lint.Finding (errors and warnings)
    compiled: list[dict] = field(default_factory=list)    # compile_solutions items
    changes: list[Change] = field(default_factory=list)
    allow_skipped: bool = False
    linted: list[str] = field(default_factory=list)        # every file lint read

    @property
    def evaluated(self) -> list[EvalResult]:
        return [r for r in self.results if r.status.evaluated]

    @property
    def reasons(self) -> list[str]:
        """Why the gate fails; empty when it passes."""
        reasons = [f"{r.problem['id']} / {r.solution['name']}: {r.status.value}: {r.message}"
                   for r in self.evaluated if not r.status.passed]
        reasons += [str(f) for f in self.lint if f.severity == "error"]
        reasons += [f"{c['path']}: compile: {c['message']}" for c in self.compiled if c["status"] not in ("ok", "skipped")]
        reasons += [c.message for c in self.changes if c.regression]
        if self.nothing_evaluated:
            reasons.append(self.nothing_evaluated)
        return reasons

    @property
    def nothing_evaluated(self) -> str:
        """Why a gate that evaluated no pair fails ('' where it evaluated one, or --allow-skipped)."""
        if self.evaluated or self.allow_skipped:
            return ""
        return (f"nothing was evaluated ({len(self.results)} pair(s) skipped): a gate that checked nothing fails "
                f"(--allow-skipped to accept)")

    def headline(self) -> str:
        skipped = len(self.results) - len(self.evaluated)
        ok = sum(r.status.passed for r in self.evaluated)
        state = "FAIL" if self.reasons else "PASS"
        return (f"check {state}: {ok} of {len(self.evaluated)} evaluated pair(s) ok, {skipped} not run (skipped); "
                f"lint {sum(f.severity == 'error' for f in self.lint)} error(s); compile-only "
                f"{sum(c['status'] not in ('ok', 'skipped') for c in self.compiled)} failure(s) of {len(self.compiled)}; "
                f"{sum(c.regression for c in self.changes)} regression(s)")


def junit(verdict: Verdict) -> bytes:
    """JUnit XML: one testcase per pair (classname = problem, name = solution), with the message
    as the failure's message and the compiler log or traceback as its text; lint and compile-only
    findings and vanished pairs as testcases of their own."""
    root = ET.Element("testsuites", name="kb-harness check")
    regressions = {(c.problem, c.solution): c for c in verdict.changes if c.regression}
    pairs = ET.SubElement(root, "testsuite", name="pairs")
    failures = skipped = 0
    for r in verdict.results:
        case = ET.SubElement(pairs, "testcase", classname=r.problem["id"], name=r.solution["name"],
                             time=f"{r.duration_s:.3f}")
        change = regressions.pop((r.problem["id"], r.solution["name"]), None)
        if r.status is Status.SKIPPED:
            ET.SubElement(case, "skipped", message=r.message)
            skipped += 1
        elif not r.status.passed or change:
            failure = ET.SubElement(case, "failure", message=change.message if change and r.status.passed else r.message,
                                    type=change.kind if change and r.status.passed else r.status.value)
            failure.text = (r.build or {}).get("log") if r.status is Status.BUILD_ERROR else r.detail
            failures += 1
        if speedup_of(r) is not None:
            ET.SubElement(case, "system-out").text = f"speedup {speedup_of(r):.3f}x"
    for change in regressions.values():  # pairs that disappeared
        case = ET.SubElement(pairs, "testcase", classname=change.problem, name=change.solution, time="0")
        ET.SubElement(case, "failure", message=change.message, type=change.kind)
        failures += 1
    pairs.set("tests", str(len(pairs)))
    pairs.set("failures", str(failures))
    pairs.set("skipped", str(skipped))
    for name, items in (("lint", _lint_cases(verdict.linted, verdict.lint)), ("compile", _compile_cases(verdict.compiled))):
        suite = ET.SubElement(root, "testsuite", name=name, tests=str(len(items)),
                              failures=str(sum(1 for _, _, f in items if f)))
        for classname, case_name, failure in items:
            case = ET.SubElement(suite, "testcase", classname=classname, name=case_name)
            if failure:
                ET.SubElement(case, "failure", message=failure[0], type=name).text = failure[1]
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def _lint_cases(files: list[str], findings: list[Any]) -> list[tuple[str, str, tuple[str, str] | None]]:
    by_file: dict[str, list[Any]] = {_display(Path(path)): [] for path in files}
    for f in findings:
        by_file.setdefault(_display(Path(f.path)), []).append(f)
    return [("lint", path, (next(str(f) for f in fs if f.severity == "error"), "\n".join(map(str, fs)))
             if any(f.severity == "error" for f in fs) else None) for path, fs in sorted(by_file.items())]


def _compile_cases(items: list[dict]) -> list[tuple[str, str, tuple[str, str] | None]]:
    return [("compile", c["path"], (c["message"], c.get("detail", "")) if c["status"] not in ("ok", "skipped") else None)
            for c in items]


def step_summary(verdict: Verdict) -> str:
    """Markdown for GitHub's step summary: the headline, counts, failures with their messages,
    speedups, regressions and improvements."""
    lines = [f"## {verdict.headline()}", ""]
    counts: dict[str, int] = {}
    for r in verdict.results:
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    lines += ["| status | pairs |", "|---|---|"] + [f"| {k} | {v} |" for k, v in sorted(counts.items())] + [""]
    if verdict.reasons:
        lines += ["### Failures", ""] + [f"- {_md(reason)}" for reason in verdict.reasons] + [""]
    timed = [r for r in verdict.results if speedup_of(r) is not None]
    if timed:
        lines += ["### Speedups", "", "| problem | solution | class | speedup |", "|---|---|---|---|"]
        lines += [f"| {r.problem['id']} | {r.solution['name']} | {r.correctness.get('precision')} | "
                  f"{speedup_of(r):.2f}x |" for r in timed] + [""]
    better = [c for c in verdict.changes if c.improvement]
    if better:
        lines += ["### Improvements", ""] + [f"- {_md(c.message)}" for c in better] + [""]
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")[:500]
