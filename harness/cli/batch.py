"""A batch of solutions, each with its problem, judged on the main command's pipeline, each
result handed back as soon as it is recorded: the entry point of a training loop or a sampler
(`judge_batch` here, `run_eval.py batch` on the command line; docs/usage.md).

A submission is a mapping: `problem` (what --problem takes: a number, an id, a unique prefix or a
problem file's path), the solution's text as `source` or its path as `file` (one of the two), and
optionally `name` (the solution's name in the results; default `s<index>`) and `tag` (anything
JSON can hold, handed back with its result, e.g. the sample's id in the loop). A text is written,
as it is, to `<folder>/<problem id>/<name>.py` and judged from there: a file of its own, like any
solution, so identical texts build once (the build cache is keyed by the sources). A submission
that cannot be judged (no such problem, neither or both of source and file, a name used twice for
one problem, PRECISIONS that leave out the run's) is answered at once with status `bad_input` and the reason; the others go on.

Each result is stored in the run's folder as the main command stores it (`--resume` goes on with
an interrupted batch), and handed back as a line (`line`): the verdict, the speedup and its
interval, the times, the flags and the message, with the submission's tag. Verdicts, timing and
sandbox are the run's config's: nothing here changes how a pair is judged.
"""
from __future__ import annotations

import os
import queue
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from ..core import problems
from ..core.config import Config
from ..core.errors import BadInput
from ..core.results import EvalResult, pair_key
from ..core.solutions import Pair, solution_from_path

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
KEYS = {"problem", "source", "file", "name", "tag"}


@dataclass
class Accepted:
    pair: Pair
    tag: Any
    index: int


def sources_folder(cache: Path, run_id: str) -> Path:
    """Where a batch's texts are written: beside the build cache (a sandboxed worker reads its
    solution file, and does not see the cache), one folder per run."""
    return cache.parent / f"{cache.name}-batch" / run_id


def accept(submissions: Iterable[Mapping[str, Any]], folder: Path,
           precision: str = "fp32") -> tuple[list[Accepted], list[dict[str, Any]]]:
    """The submissions as pairs (texts written under `folder`), and a `bad_input` line for each
    that cannot be judged in a run of `precision`."""
    accepted: list[Accepted] = []
    refused: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, item in enumerate(submissions):
        tag = item.get("tag") if isinstance(item, Mapping) else None
        try:
            pair = _pair(item, index, folder)
            key = pair_key(pair.problem.id, pair.solution.name)
            if not pair.solution.supports(precision):
                raise BadInput(f"submission {index}", f"written for {'/'.join(pair.solution.precisions)} (PRECISIONS "
                                                      f"in its text), not for this run's {precision}")
            if key in seen:
                raise BadInput(f"submission {index}", f"name '{pair.solution.name}' is used twice for problem "
                                                      f"{pair.problem.id}: give each its own name")
            seen.add(key)
            accepted.append(Accepted(pair, tag, index))
        except BadInput as exc:
            refused.append({"index": index, "tag": tag, "status": "bad_input", "passed": False,
                            "message": str(exc)})
    return accepted, refused


def _pair(item: Any, index: int, folder: Path) -> Pair:
    where = f"submission {index}"
    if not isinstance(item, Mapping):
        raise BadInput(where, f"expected an object with problem and source (or file), got {type(item).__name__}")
    unknown = sorted(set(item) - KEYS)
    if unknown:
        raise BadInput(where, f"unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(KEYS))})")
    if not isinstance(item.get("problem"), str) or not item["problem"]:
        raise BadInput(where, "needs 'problem': a number, an id or a problem file's path")
    try:
        found = problems.select(item["problem"])
    except BadInput as exc:
        raise BadInput(where, exc.problem) from None
    if len(found) != 1:
        raise BadInput(where, f"problem '{item['problem']}' names {len(found)} problems (a family?): name one")
    problem = found[0]
    has_source, has_file = item.get("source") is not None, item.get("file") is not None
    if has_source == has_file:
        raise BadInput(where, "needs exactly one of 'source' (the solution's text) and 'file' (its path)")
    name = item.get("name", f"s{index:05d}")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise BadInput(where, f"name {name!r} must be a Python identifier of at most 100 characters")
    if has_file:
        path = Path(item["file"])
        if not path.is_file():
            raise BadInput(where, f"solution file not found: {path}")
        if "name" in item and path.stem != name:
            raise BadInput(where, f"a file's name is its stem ('{path.stem}'): leave 'name' out or make them agree")
        return Pair(problem, solution_from_path(path))
    if not isinstance(item["source"], str):
        raise BadInput(where, f"'source' must be the solution's text, got {type(item['source']).__name__}")
    path = Path(folder) / problem.id / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    for part in (path.parent, path.parent.parent):
        os.chmod(part, 0o755)   # read by the sandbox's own uids where the harness runs as root
    path.write_text(item["source"])
    os.chmod(path, 0o644)
    return Pair(problem, solution_from_path(path))


def line(result: EvalResult, tag: Any = None, index: int | None = None) -> dict[str, Any]:
    """What a loop needs of a result: its verdict, its speed with the interval, why, and where
    the whole of it is stored."""
    timing = result.timing or {}
    solution = timing.get("solution") or {}
    reference = timing.get(timing.get("baseline") or "reference") or {}   # what the speedup is against
    return {"index": index, "tag": tag, "problem": result.problem["id"], "solution": result.solution["name"],
            "status": result.status.value, "passed": result.status.passed,
            "speedup": timing.get("speedup"), "speedup_ci": timing.get("speedup_ci"),
            "ms": solution.get("median_ms"), "ref_ms": reference.get("median_ms"), "baseline": timing.get("baseline"),
            "precision": result.precision, "flags": list(result.flags), "message": result.message,
            "phase": result.phase, "seconds": result.duration_s, "run_id": result.run_id}


def judge_batch(submissions: Iterable[Mapping[str, Any]], cfg: Config, *, run_id: str, resume: bool = False,
                out: Callable[[str], None] = lambda text: None, full: bool = False,
                stop: threading.Event | None = None) -> Iterator[dict[str, Any]]:
    """Judge the submissions; yield each one's line (`full`: with the whole result under
    "result") as soon as it is recorded, refused ones first. The run goes on in a thread of its
    own; a loop that stops iterating early (break) leaves it to finish (its results are stored).
    Setting `stop` (from any thread) stops it within seconds, as does an interrupt (Ctrl-C, or a
    SIGTERM made one) while this waits for the next result: the steps in flight are killed and
    nothing is recorded of the pairs cut short (runner.evaluate)."""
    from ..compile.build import cache_dir_of
    from ..run.runner import evaluate
    accepted, refused = accept(submissions, sources_folder(cache_dir_of(cfg), run_id), cfg.precision)
    yield from refused
    if not accepted:
        return
    by_key = {pair_key(a.pair.problem.id, a.pair.solution.name): a for a in accepted}
    done: queue.Queue = queue.Queue()
    end = object()
    stop = stop or threading.Event()

    def run() -> None:
        try:
            evaluate([a.pair for a in accepted], cfg, run_id=run_id, resume=resume, out=out, on_result=done.put,
                     stop=stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            done.put(exc)
        done.put(end)

    thread = threading.Thread(target=run, daemon=True, name="batch")
    thread.start()
    try:
        while (got := done.get()) is not end:
            if isinstance(got, BaseException):
                raise got
            submission = by_key.get(got.key)
            answer = line(got, submission.tag if submission else None, submission.index if submission else None)
            if full:
                answer["result"] = got.to_dict()
            yield answer
    except (KeyboardInterrupt, SystemExit):
        stop.set()
        thread.join(timeout=60)
        raise
