"""Standings across runs: a pure function of stored results (it never builds or runs anything).

Results are gathered from run folders (`results/<run-id>/`, or a folder of runs such as
`results/snapshots/`), the latest kept per (problem, solution, board), and ranked per problem on
one board per GPU name and run precision (board_of): results from different GPUs, or from runs in
different precisions (--precision), are never ranked together. A solution set is a
solution name across problems; a set may hold several samples per problem, named
`<set>.<k>.py` (e.g. `gen.0.py`, `gen.1.py`), and then its summary also gives pass@k and fast_p@k
(the unbiased estimator of Chen et al. 2021) and each problem's best sample.

fast_p (KernelBench): the fraction of attempted problems where the solution is correct and its
speedup is above p; fast_0 is the correct rate. With samples, each problem counts the fraction of
its samples that qualify (fast_p@1). Skipped pairs are not attempted.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..core.errors import BadInput
from ..core.precision import CLASSES
from ..core.results import READABLE_VERSIONS, EvalResult, Status
from ..core.store import MANIFEST, read_result

FAST_P = (0.0, 1.0, 1.5, 2.0)
PASS_K = (1, 5, 10)
_SAMPLE = re.compile(r"^(?P<set>.+)\.(?P<k>\d+)$")


def sample_of(solution: str) -> tuple[str, int | None]:
    """('gen', 3) for 'gen.3'; ('fast', None) for a solution that is not a sample."""
    m = _SAMPLE.match(solution)
    return (m.group("set"), int(m.group("k"))) if m else (solution, None)


def gpu_of(result: EvalResult) -> str:
    gpu = (result.env or {}).get("gpu") or {}
    if gpu.get("name"):
        return str(gpu["name"])
    if (result.env or {}).get("gpu_name"):  # a pair that ended before a lane took it: the run's GPU
        return str(result.env["gpu_name"])
    return "CPU" if (result.env or {}).get("device") == "cpu" else "unknown GPU"


def board_of(result: EvalResult) -> str:
    """The board a result is ranked on: its GPU, and the run's precision where it is not fp32."""
    return gpu_of(result) if result.precision == "fp32" else f"{gpu_of(result)}, {result.precision}"


def commit_of(result: EvalResult) -> str:
    commit = ((result.env or {}).get("git") or {}).get("commit") or ""
    return str(commit)[:7]


@dataclass(frozen=True)
class Entry:
    """A result and where it came from."""
    result: EvalResult
    path: Path

    @property
    def key(self) -> tuple[str, str, str]:
        return self.result.problem["id"], self.result.solution["name"], board_of(self.result)


def run_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Run folders named, or found one and two levels down in folders of runs. A folder with
    neither results nor runs is bad input."""
    found: list[Path] = []
    for spec in paths:
        path = Path(spec)
        if not path.is_dir():
            raise BadInput(path, "no such results folder")
        if _is_run(path):
            found.append(path)
            continue
        nested = [d for d in sorted(path.iterdir()) if d.is_dir() and _is_run(d)]
        nested += [d for sub in sorted(path.iterdir()) if sub.is_dir() and not _is_run(sub)
                   for d in sorted(sub.iterdir()) if d.is_dir() and _is_run(d)]
        if not nested:
            raise BadInput(path, "not a run folder (no run.json or result files) and no runs inside it")
        found += nested
    return found


def _is_run(path: Path) -> bool:
    return (path / MANIFEST).is_file() or any(p.name != MANIFEST for p in path.glob("*__*.json"))


def gather(paths: Iterable[str | Path], warn=print) -> list[Entry]:
    """Every readable result of the runs under `paths`. A corrupt file is skipped with a warning;
    a result of an unknown schema version, or two files recording the same pair of the same run
    differently, is bad input (one line); so is finding nothing readable at all."""
    entries: list[Entry] = []
    seen: dict[tuple[str, str, str], Entry] = {}
    skipped = 0
    for run in run_dirs(paths):
        for path in sorted(run.glob("*.json")):
            if path.name == MANIFEST:
                continue
            try:
                raw = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                warn(f"warning: {path}: skipped, not readable JSON ({exc})")
                skipped += 1
                continue
            if isinstance(raw, dict) and "schema_version" in raw and raw["schema_version"] not in READABLE_VERSIONS:
                raise BadInput(path, f"results schema_version {raw['schema_version']!r} is not one this harness reads "
                                     f"({', '.join(map(str, READABLE_VERSIONS))})")
            try:
                result = read_result(path)
            except BadInput as exc:
                warn(f"warning: {exc}; skipped")
                skipped += 1
                continue
            entry = Entry(result, path)
            same = (result.run_id, result.problem["id"], result.solution["name"])
            if same in seen:
                if seen[same].result != result:
                    raise BadInput(path, f"records {same[1]} / {same[2]} of run {same[0]} differently from "
                                         f"{seen[same].path}")
                continue
            seen[same] = entry
            entries.append(entry)
    if not entries:
        raise BadInput(" ".join(map(str, paths)) or "results/",
                       f"no readable results{f' ({skipped} file(s) skipped)' if skipped else ''}")
    _check_verdicts(entries)
    return entries


def _check_verdicts(entries: list[Entry]) -> None:
    """The same problem file and solution sources on the same GPU, in the same precision, judged
    correct in one run and incorrect in another: a verdict that is not reproducible is bad input,
    named in one line."""
    verdicts: dict[tuple[str, str, str], Entry] = {}
    for e in entries:
        if e.result.status not in (Status.OK, Status.INCORRECT):
            continue
        key = (e.result.problem.get("sha256", ""),
               e.result.solution.get("sources_sha256") or e.result.solution.get("sha256", ""), board_of(e.result))
        other = verdicts.setdefault(key, e)
        if other.result.status is not e.result.status:
            raise BadInput(e.path, f"{e.result.status.value}, while {other.path} records the same problem and "
                                   f"solution sources on the same GPU ({key[2]}) as {other.result.status.value}")


def select(entries: list[Entry], *, keep_all: bool = False, problem: str | None = None,
           solution: str | None = None, gpu: str | None = None) -> list[Entry]:
    """The latest result per (problem, solution, board) unless `keep_all`; filtered by substrings
    of the problem id, exact solution (or solution set) name, substring of the board's name (the
    GPU's, with ", fp16" or ", bf16" for a half-precision run)."""
    chosen = [e for e in entries
              if (problem is None or problem in e.result.problem["id"])
              and (solution is None or solution in (e.result.solution["name"], sample_of(e.result.solution["name"])[0]))
              and (gpu is None or gpu.lower() in board_of(e.result).lower())]
    if keep_all:
        return chosen
    latest: dict[tuple[str, str, str], Entry] = {}
    for e in sorted(chosen, key=lambda e: (e.result.finished_at, e.result.run_id)):
        old = latest.get(e.key)
        if old is None or not (untimed(e.result) and timed(old.result) and same_sources(e.result, old.result)):
            latest[e.key] = e  # later, unless it is an untimed pass of the sources a timed result has
    return list(latest.values())


def timed(result: EvalResult) -> bool:
    return (result.timing or {}).get("speedup") is not None


def untimed(result: EvalResult) -> bool:
    """Correct, with no speedup: a correctness-only run (check without --timing)."""
    return correct(result) and not timed(result)


def same_sources(a: EvalResult, b: EvalResult) -> bool:
    def sources(r: EvalResult) -> tuple:
        return r.problem.get("sha256", ""), r.solution.get("sources_sha256") or r.solution.get("sha256", "")
    return sources(a) == sources(b) and all(sources(a))


SNAPSHOTS = "snapshots"


def own_runs(root: str | Path = "results") -> tuple[list[Path], list[Path]]:
    """(the runs under `root` that a user made, the committed snapshots' runs under root/snapshots):
    the leaderboard with no argument shows the first and names the second apart."""
    root = Path(root)
    if not root.is_dir():
        return [], []
    own = [d for d in sorted(root.iterdir()) if d.is_dir() and d.name != SNAPSHOTS and _is_run(d)]
    snaps = root / SNAPSHOTS
    snapshots = [d for d in sorted(snaps.iterdir()) if d.is_dir()] if snaps.is_dir() else []
    return own, snapshots


def correct(result: EvalResult) -> bool:
    return result.status is Status.OK


def speedup_of(result: EvalResult) -> float | None:
    value = (result.timing or {}).get("speedup")
    return float(value) if value is not None and correct(result) else None


def precision_of(result: EvalResult) -> str | None:
    return (result.correctness or {}).get("precision") if result.status is Status.OK else None


@dataclass
class Board:
    """One GPU and precision: per problem, the correct solutions ranked by speedup (those without a timing, e.g.
    from a correctness-only check, last) and the others below."""
    gpu: str
    problems: dict[str, dict[str, list[Entry]]] = field(default_factory=dict)  # problem -> ranked / others


def boards(entries: list[Entry]) -> list[Board]:
    by_gpu: dict[str, Board] = {}
    for e in sorted(entries, key=lambda e: (e.key, e.result.finished_at)):
        board = by_gpu.setdefault(board_of(e.result), Board(board_of(e.result)))
        slot = board.problems.setdefault(e.result.problem["id"], {"ranked": [], "others": []})
        slot["ranked" if correct(e.result) else "others"].append(e)
    for board in by_gpu.values():
        for slot in board.problems.values():
            slot["ranked"].sort(key=lambda e: -(speedup_of(e.result) or 0.0))
            slot["others"].sort(key=lambda e: (e.result.status is Status.SKIPPED, e.result.solution["name"]))
    return [by_gpu[g] for g in sorted(by_gpu)]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c pass (Chen et al. 2021): 1 - C(n-c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def degenerate(result: EvalResult) -> bool:
    """A result of a problem whose output does not depend enough on its inputs (harness/verdict/checks.py)."""
    return "degenerate_problem" in result.flags


def summarize(entries: list[Entry], include_degenerate: bool = False) -> list[dict[str, Any]]:
    """Per (solution set, GPU): problems attempted, fast_p for each p (fast_0 = correct rate), the
    geometric mean of the speedup over correct pairs, each of them per precision class, and for
    sets with samples pass@k, fast_p@k and each problem's best sample. Results of degenerate
    problems (flag degenerate_problem) count in none of it unless `include_degenerate`."""
    groups: dict[tuple[str, str], dict[str, list[EvalResult]]] = {}
    for e in entries:
        if e.result.status is Status.SKIPPED or (degenerate(e.result) and not include_degenerate):
            continue
        name, _ = sample_of(e.result.solution["name"])
        groups.setdefault((name, board_of(e.result)), {}).setdefault(e.result.problem["id"], []).append(e.result)
    rows = []
    for (name, gpu), per_problem in sorted(groups.items()):
        samples = max(len(v) for v in per_problem.values())
        row: dict[str, Any] = {"solution": name, "gpu": gpu, "attempted": len(per_problem), "samples": samples}
        row.update(_rates(per_problem, None))
        for cls in CLASSES:
            row[cls] = _rates(per_problem, cls)
        if samples > 1:
            row["pass_at_k"] = {}
            for k in PASS_K:
                eligible = {p: rs for p, rs in per_problem.items() if len(rs) >= k}
                if not eligible:
                    continue
                row["pass_at_k"][k] = {f"fast_{p:g}": _mean([pass_at_k(len(rs), _count(rs, p), k)
                                                             for rs in eligible.values()]) for p in FAST_P}
            row["best"] = {p: max(rs, key=lambda r: speedup_of(r) or -1.0).solution["name"]
                           for p, rs in sorted(per_problem.items()) if any(speedup_of(r) is not None for r in rs)}
        rows.append(row)
    return rows


def _count(results: list[EvalResult], p: float, cls: str | None = None) -> int:
    """Results correct (in class `cls`) and, for p > 0, faster than the baseline by more than p."""
    return sum(1 for r in results if correct(r) and (cls is None or precision_of(r) == cls)
               and (p == 0 or (speedup_of(r) or 0.0) > p))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _rates(per_problem: dict[str, list[EvalResult]], cls: str | None) -> dict[str, Any]:
    rates = {f"fast_{p:g}": _mean([_count(rs, p, cls) / len(rs) for rs in per_problem.values()]) for p in FAST_P}
    speedups = [s for rs in per_problem.values() for r in rs
                if (s := speedup_of(r)) is not None and (cls is None or precision_of(r) == cls)]
    rates["correct"] = rates["fast_0"]
    rates["geomean_speedup"] = geomean(speedups)
    return rates
