"""Two runs' verdicts on the same solutions, pair by pair (issue 76: a corpus judged by this tree
against the same corpus judged by an earlier one), and the way to judge a batch file with a tree
that has no batch command.

    python tools/corpus_verdicts.py compare RUN_DIR_A RUN_DIR_B [--md]
    python tools/corpus_verdicts.py judge SUBMISSIONS.jsonl --tree DIR --results-dir D --run-id ID [--judged-in RUN_DIR]
                                          [--not-judged-in RUN_DIR ...]
    python tools/corpus_verdicts.py phases RUN_DIR [RUN_DIR ...]
    python tools/corpus_verdicts.py verdicts RUN_DIR --out FILE.json [--commit C] [--host TEXT]

`compare` reads each run's results (`<problem id>/<solution name>` as the key) and prints how many
pairs both have, how many agree on the status, every pair whose status differs with both messages,
and the pairs only one run has; either side may be a verdicts file instead of a run folder.
`verdicts` writes a run's statuses (and each message's first 200 characters) by pair to a small JSON
file, what the repository keeps of a corpus run (results/snapshots/corpus100/) where the run folder,
megabytes of build logs, is not kept: the next tree's run is compared with it pair by pair. `judge`
imports the harness of the tree at DIR (a checkout of an earlier commit, e.g. `git worktree add
/tmp/old a44ea8e`) and runs its `evaluate` over the file submissions (`problem` a problem file,
`file` a solution file: what tools/kb_corpus.py writes), with that tree's default config; the
solutions' names are their files' names, as in the batch command; `--judged-in RUN_DIR`: only the
pairs that run holds (the earlier tree judges what a batch stopped at its deadline judged, over the
same build cache); `--not-judged-in RUN_DIR` (repeatable): not the pairs that run holds (a judge cut
by a call's limit goes on in the next call where it stopped). `phases` says what a run (or a run
resumed over several calls: give each call's run folder, or the one folder and `--walls` of the
calls) cost: solutions an hour over the calls' wall time, each recipe's build wall and CPU seconds
(those built, not found cached; how many read a precompiled header), the lane's time a pair (every
phase but the build) and the lanes' idle share; for one lane over one call, when its first pair
began and how long it waited between pairs after it; over one call, the rate after the run's first
quarter (from finish n/4 + 1 to the last: what a run of thousands approaches, without the first
wave's builds); and the compiles by nice and by MAX_JOBS where the records say (build.stagger).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Verdict:
    """A pair's verdict: what compare reads and a verdicts file keeps."""
    status: str
    message: str


def results_of(run: Path) -> dict:
    """A run folder's results (harness.core.store.load_run: every schema version it reads) by
    `<problem id>/<solution name>`."""
    from harness.core.store import load_run
    return {f"{r.problem['id']}/{r.solution['name']}": r for r in load_run(run)}


def load(run: Path) -> dict[str, Verdict]:
    """The verdicts of a run folder or of a verdicts file, by `<problem id>/<solution name>`."""
    from harness.core.errors import BadInput
    if not Path(run).is_file():
        return {k: Verdict(r.status.value, r.message) for k, r in results_of(run).items()}
    try:
        pairs = json.loads(Path(run).read_text())["pairs"]
        return {k: Verdict(v["status"], v.get("message", "")) for k, v in pairs.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BadInput(str(run), f"not a verdicts file (corpus_verdicts.py verdicts writes one): {exc}") from None


def verdicts(found: dict[str, Verdict], run: Path, commit: str, host: str) -> dict:
    """What `verdicts` writes: the run's statuses by pair, with where they came from."""
    manifest = json.loads((Path(run) / "run.json").read_text()) if (Path(run) / "run.json").is_file() else {}
    return {"run_id": manifest.get("run_id", Path(run).name),
            "commit": commit or (manifest.get("git") or {}).get("commit"),
            "device": manifest.get("device"), "gpu_names": manifest.get("gpu_names", []), "host": host,
            "counts": dict(sorted(Counter(v.status for v in found.values()).items())),
            "pairs": {k: {"status": v.status, "message": v.message[:200]} for k, v in sorted(found.items())}}


def compare(a: dict, b: dict) -> tuple[list[str], int]:
    """(lines of the report, the number of pairs whose status differs)."""
    both = sorted(set(a) & set(b))
    differ = [k for k in both if a[k].status != b[k].status]
    lines = [f"{len(both)} pair(s) in both runs: {len(both) - len(differ)} with the same status, {len(differ)} differ"]
    for k in differ:
        lines.append(f"  {k}: {a[k].status} / {b[k].status}")
        lines.append(f"    A: {a[k].message[:300]}")
        lines.append(f"    B: {b[k].message[:300]}")
    for name, only in (("A", sorted(set(a) - set(b))), ("B", sorted(set(b) - set(a)))):
        if only:
            lines.append(f"only in {name} ({len(only)}): {', '.join(only[:20])}{' ...' if len(only) > 20 else ''}")
    return lines, len(differ)


LANE_PHASES = ("startup_s", "load_s", "construct_s", "correctness_s", "timing_s", "profile_s", "truth_s", "judge_s",
               "reference_s", "store_s")


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def phases(results: list, walls: list[float], lanes: int = 1) -> list[str]:
    """Lines of what a run cost: `walls` the wall seconds of the calls that made it (the run's first
    start to its last finish where none is given)."""
    from datetime import datetime
    if not results:
        return ["no results"]
    if not walls:
        stamp = datetime.fromisoformat
        starts = [stamp(r.started_at) for r in results if r.started_at]
        ends = [stamp(r.finished_at) for r in results if r.finished_at]
        walls = [(max(ends) - min(starts)).total_seconds()] if starts and ends else []
    wall = sum(walls)
    statuses = Counter(r.status.value for r in results)
    built = [e for r in results for e in (r.build or {}).get("extensions") or [] if not e.get("cached")]
    seen: dict[str, dict] = {}
    for e in built:            # a recipe shared by two solutions is built once: count it once
        seen.setdefault(e.get("key") or e.get("dir") or str(id(e)), e)
    logs = [(r.build or {}).get("log") or "" for r in results]
    lane = [sum(float((r.phases or {}).get(k) or 0) for k in LANE_PHASES) for r in results]
    busy = sum(lane)
    cpu = [float(e.get("cpu_s") or 0) for e in seen.values()]
    lines = [f"{len(results)} solution(s): {', '.join(f'{n} {s}' for s, n in sorted(statuses.items()))}",
             f"wall {wall:.0f} s over {len(walls)} call(s): {3600 * len(results) / wall:.0f} an hour" if wall else
             "wall: unknown",
             f"recipes built {len(seen)}: wall median {median([float(e.get('seconds') or 0) for e in seen.values()]):.1f} s, "
             f"CPU-s median {median(cpu):.1f}, sum {sum(cpu):.0f}; main.cpp with a precompiled header in "
             f"{sum('/pch/' in log for log in logs)} of {sum('main.cpp' in log for log in logs)} build logs"
             + (f"; cuda.cu with a smaller torch header (build.cu_header) in "
                f"{sum(str(e.get('cu_header')).startswith('read') for e in seen.values())} (the lean one in "
                f"{sum(str(e.get('cu_header')).startswith('read lean') for e in seen.values())}) of "
                f"{sum('cu_header' in e for e in seen.values())} recipes" if any('cu_header' in e for e in seen.values())
                else ""),
             f"lane a pair: median {median(lane):.2f} s, sum {busy:.0f} s"
             + (f"; lanes idle {max(0.0, 1 - busy / (wall * lanes)):.0%} of {lanes} x {wall:.0f} s" if wall else "")]
    if len(walls) <= 1:        # over one call only: over several the finishes span the gaps between them
        lines += (lane_start(results) if lanes == 1 else []) + steady(results)
    for field in ("nice", "jobs"):   # build.stagger's: each compile's nice and MAX_JOBS
        seen_by = Counter(e[field] for e in seen.values() if e.get(field) is not None)
        if seen_by:
            lines.append(f"compiles by {field}: " + ", ".join(f"{k}: {n}" for k, n in sorted(seen_by.items())))
    return lines


def steady(results: list, least: int = 8) -> list[str]:
    """The rate after the run's first quarter of results: from the (n/4 + 1)-th finish to the last,
    so that the first wave's builds (all started at once, before the precompiled header is made)
    and the run's own start are left out; a run of thousands goes at about this rate."""
    from datetime import datetime
    ends = sorted(datetime.fromisoformat(r.finished_at).timestamp() for r in results if r.finished_at)
    if len(ends) < least:
        return []
    k = len(ends) // 4
    span, more = ends[-1] - ends[k], len(ends) - 1 - k
    if span <= 0:
        return []
    return [f"after the first quarter: {more} more finished in the {span:.0f} s from finish {k + 1} to the last: "
            f"{3600 * more / span:.0f} an hour"]


def lane_start(results: list, gap_s: float = 0.3) -> list[str]:
    """When one lane's first pair began, and how long it waited between pairs after it: each pair's
    lane segment is its finish less its time after the build (`wall_s - build_s`); the run's start
    is the earliest `started_at` (build.stagger's measure: docs/harness-perf.md)."""
    from datetime import datetime
    segments = []
    for r in results:
        p = r.phases or {}
        if r.started_at and r.finished_at and p.get("wall_s") is not None:
            end = datetime.fromisoformat(r.finished_at).timestamp()
            segments.append((end - (float(p["wall_s"]) - float(p.get("build_s") or 0)), end))
    if not segments:
        return []
    start = min(datetime.fromisoformat(r.started_at).timestamp() for r in results if r.started_at)
    segments.sort()
    gaps = [b[0] - a[1] for a, b in zip(segments, segments[1:]) if b[0] - a[1] > gap_s]
    return [f"the lane's first pair began {segments[0][0] - start:.1f} s into the run; after it {len(gaps)} "
            f"wait(s) over {gap_s} s between pairs, {sum(gaps):.1f} s in all"]


def judged_keys(run: Path) -> set[str]:
    """`<problem id>/<solution name>` of each result in a run folder, its JSON read as it is (judge
    takes it before importing the other tree's harness)."""
    keys = set()
    for path in Path(run).glob("*.json"):
        if path.name != "run.json":
            result = json.loads(path.read_text())
            keys.add(f"{result['problem']['id']}/{result['solution']['name']}")
    return keys


def judge(submissions: Path, tree: Path, results_dir: str, run_id: str, only: set[str] | None = None,
          skip: frozenset[str] = frozenset()) -> int:
    sys.path.insert(0, str(tree.resolve()))
    from harness.core.config import load_config, with_overrides
    from harness.core.problems import problem_from_path
    from harness.core.solutions import Pair, solution_from_path
    from harness.run.runner import evaluate
    pairs = []
    for n, text in enumerate(submissions.read_text().splitlines()):
        if not text.strip():
            continue
        item = json.loads(text)
        if "file" not in item:
            print(f"{submissions}:{n + 1}: judge takes file submissions only (a text: write it to a file)",
                  file=sys.stderr)
            return 2
        pair = Pair(problem_from_path(Path(item["problem"])), solution_from_path(Path(item["file"])))
        key = f"{pair.problem.id}/{pair.solution.name}"
        if (only is None or key in only) and key not in skip:
            pairs.append(pair)
    cfg = with_overrides(load_config(None), {"results_dir": results_dir})
    results = evaluate(pairs, cfg, run_id=run_id)
    print(f"{len(results)} result(s) in {results_dir}/{run_id}")
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    j = sub.add_parser("judge")
    j.add_argument("submissions")
    j.add_argument("--tree", required=True)
    j.add_argument("--results-dir", required=True)
    j.add_argument("--run-id", required=True)
    j.add_argument("--judged-in", default="", help="only the pairs this run folder holds")
    j.add_argument("--not-judged-in", action="append", default=[], help="not the pairs this run folder holds")
    p = sub.add_parser("phases")
    p.add_argument("runs", nargs="+")
    p.add_argument("--walls", default="", help="the calls' wall seconds, comma-separated")
    p.add_argument("--lanes", type=int, default=1)
    v = sub.add_parser("verdicts")
    v.add_argument("run")
    v.add_argument("--out", required=True)
    v.add_argument("--commit", default="", help="the tree's commit (default: the run's manifest's)")
    v.add_argument("--host", default="", help="what ran it, in words")
    args = ap.parse_args(argv)
    if args.cmd == "judge":
        for folder in ([args.judged_in] if args.judged_in else []) + args.not_judged_in:
            if not Path(folder).is_dir():
                print(f"corpus_verdicts: {folder}: no such results folder", file=sys.stderr)
                return 2
        only = judged_keys(Path(args.judged_in)) if args.judged_in else None
        skip = frozenset(k for folder in args.not_judged_in for k in judged_keys(Path(folder)))
        return judge(Path(args.submissions), Path(args.tree), args.results_dir, args.run_id, only, skip)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from harness.core.errors import BadInput
    if args.cmd == "phases":
        try:
            if not all(Path(run).is_dir() for run in args.runs):
                raise BadInput(next(run for run in args.runs if not Path(run).is_dir()), "phases reads run folders")
            results = [r for run in args.runs for r in results_of(Path(run)).values()]
            walls = [float(w) for w in args.walls.split(",") if w.strip()]
        except (BadInput, ValueError) as exc:
            print(f"corpus_verdicts: {exc}", file=sys.stderr)
            return 2
        print("\n".join(phases(results, walls, args.lanes)))
        return 0
    if args.cmd == "verdicts":
        try:
            kept = verdicts(load(Path(args.run)), Path(args.run), args.commit, args.host)
        except BadInput as exc:
            print(f"corpus_verdicts: {exc}", file=sys.stderr)
            return 2
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(kept, indent=1) + "\n")
        print(f"{len(kept['pairs'])} verdict(s) of {kept['run_id']} in {args.out}: {kept['counts']}")
        return 0
    try:
        lines, differ = compare(load(Path(args.a)), load(Path(args.b)))
    except BadInput as exc:
        print(f"corpus_verdicts: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
