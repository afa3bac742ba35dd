"""Pure functions: results -> rows -> text/markdown/CSV tables. Never re-runs anything."""
from __future__ import annotations

import csv
import io
from typing import Iterable

from tabulate import tabulate

from .results import EvalResult, Status

COLUMNS = ["problem", "solution", "status", "class", "max abs err", "ms", "ref ms", "ref fp32 ms", "speedup",
           "flags"]


def _ms(stats: dict | None) -> str:
    if not stats:
        return "-"
    return f"{stats['median_ms']:.3f} ±{stats['iqr_ms']:.3f}"


def row(result: EvalResult) -> list[str]:
    t = result.timing or {}
    err = result.correctness.get("max_abs_error") if result.correctness else None
    speedup = t.get("speedup")
    precision = result.correctness.get("precision") if result.correctness else None
    vs = " (vs fp32)" if t.get("baseline") == "reference_fp32" else ""
    return [
        result.problem["id"],
        result.solution["name"],
        result.status.value,
        precision or "-",
        f"{err:.2e}" if err is not None else "-",
        _ms(t.get("solution")),
        _ms(t.get("reference")),
        _ms(t.get("reference_fp32")),
        f"{speedup:.2f}x{vs}" if speedup is not None and result.status in (Status.OK, Status.REJECTED) else "-",
        ",".join(result.flags) or "-",
    ]


def rows(results: Iterable[EvalResult]) -> list[list[str]]:
    return [row(r) for r in sorted(results, key=lambda r: (r.problem["id"], r.solution["name"]))]


def table(results: Iterable[EvalResult], fmt: str = "simple") -> str:
    return tabulate(rows(results), headers=COLUMNS, tablefmt=fmt, disable_numparse=True)


def markdown(results: Iterable[EvalResult]) -> str:
    return table(results, fmt="github")


def _csv(headers: list[str], body: list[list[str]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(headers)
    writer.writerows(body)
    return buf.getvalue()


def to_csv(results: Iterable[EvalResult]) -> str:
    return _csv(COLUMNS, rows(results))


# The phase table: where each pair's own wall time went (results' `phases`, harness/results.py).
PHASE_COLUMNS = [("build", "build_s"), ("start-up", "startup_s"), ("reference", "reference_s"), ("load", "load_s"),
                 ("construct", "construct_s"), ("correctness", "correctness_s"), ("timing", "timing_s"),
                 ("profile", "profile_s"), ("truth", "truth_s"), ("judge", "judge_s"), ("store", "store_s"),
                 ("wall", "wall_s"), ("GPU", "gpu_s"), ("overhead", "overhead_s")]


def phase_rows(results: Iterable[EvalResult]) -> list[list[str]]:
    rows_ = []
    for r in sorted(results, key=lambda r: (r.problem["id"], r.solution["name"])):
        p = r.phases or {}
        cells = [f"{p[key]:.2f}" if key in p else "-" for _, key in PHASE_COLUMNS]
        share = f"{p['overhead_s'] / p['wall_s']:.0%}" if p.get("wall_s") else "-"
        rows_.append([r.problem["id"], r.solution["name"], r.status.value, *cells, share])
    return rows_


PHASE_HEADERS = ["problem", "solution", "status"] + [name for name, _ in PHASE_COLUMNS] + ["overhead %"]


def phase_table(results: Iterable[EvalResult], fmt: str = "text") -> str:
    """Seconds per phase of each pair, its GPU time, and its overhead (wall - GPU) and share;
    fmt text, md or csv."""
    if fmt == "csv":
        return _csv(PHASE_HEADERS, phase_rows(results))
    return tabulate(phase_rows(results), headers=PHASE_HEADERS, tablefmt="github" if fmt == "md" else "simple",
                    disable_numparse=True)


def summary(results: Iterable[EvalResult]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    return counts
