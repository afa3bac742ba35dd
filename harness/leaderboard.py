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


def to_csv(results: Iterable[EvalResult]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(COLUMNS)
    writer.writerows(rows(results))
    return buf.getvalue()


def summary(results: Iterable[EvalResult]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    return counts
