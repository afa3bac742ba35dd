"""Pure functions: results -> rows -> text/markdown/CSV tables. Never re-runs anything."""
from __future__ import annotations

import csv
import io
import textwrap
from typing import Iterable

from tabulate import tabulate

from ..core.precision import CLASSES, baseline_label
from ..core.problems import order_key
from ..core.results import EvalResult, Status

COLUMNS = ["problem", "solution", "status", "class", "max abs err", "ms", "ref ms", "ref strict ms", "speedup",
           "x floor", "flags"]
# the strict baselines (harness/core/precision.py): TF32 off in an fp32 run, the reduced-precision
# reductions off in a half run
STRICT_SHORT = {"reference_fp32": "fp32", "reference_strict": "strict"}


def _ms(stats: dict | None) -> str:
    if not stats:
        return "-"
    return f"{stats['median_ms']:.3f} ±{stats['iqr_ms']:.3f}"


def ci_text(interval) -> str:
    """' [lo-hi]': a speedup's confidence interval (timing.speedup_ci), or ''."""
    return f" [{interval[0]:.2f}-{interval[1]:.2f}]" if interval else ""


NOISY_SPAN = 2.0   # an interval whose ends are further apart than this factor decides nothing


def noisy(interval) -> bool:
    return bool(interval) and interval[0] > 0 and interval[1] / interval[0] > NOISY_SPAN


def speedup_text(speedup: float | None, interval=None) -> str:
    """'2.04x [1.97-2.08]'; 'noisy [0.21-14.37]' where the interval spans more than NOISY_SPAN (a
    figure a reader would quote, that the timing does not support); '-' without a speedup. The
    run's table, its progress lines and the leaderboard all say it this way."""
    if speedup is None:
        return "-"
    return f"noisy{ci_text(interval)}" if noisy(interval) else f"{speedup:.2f}x{ci_text(interval)}"


def x_floor(result: EvalResult) -> float | None:
    """How far the solution's median is from the problem's physical floor (the least time a call can
    take on the device: harness/verdict/checks.py floor), as a factor; None without a floor or a time."""
    floor = ((result.problem_checks or {}).get("floor") or {}).get("ms")
    ms = ((result.timing or {}).get("solution") or {}).get("median_ms")
    if not floor or not ms or result.status not in (Status.OK, Status.REJECTED):
        return None
    return ms / floor


def x_floor_text(result: EvalResult) -> str:
    factor = x_floor(result)
    return "-" if factor is None else f"{factor:.1f}"


def row(result: EvalResult) -> list[str]:
    t = result.timing or {}
    err = result.correctness.get("max_abs_error") if result.correctness else None
    speedup = t.get("speedup")
    precision = result.correctness.get("precision") if result.correctness else None
    vs = f" (vs {STRICT_SHORT[t['baseline']]})" if t.get("baseline") in STRICT_SHORT else ""
    return [
        result.problem["id"],
        result.solution["name"],
        result.status.value,
        precision or "-",
        f"{err:.2e}" if err is not None else "-",
        _ms(t.get("solution")),
        _ms(t.get("reference")),
        _ms(t.get("reference_fp32") or t.get("reference_strict")),
        speedup_text(speedup, t.get("speedup_ci")) + vs if speedup is not None and result.status in (Status.OK, Status.REJECTED) else "-",
        x_floor_text(result),
        ",".join(result.flags) or "-",
    ]


def rows(results: Iterable[EvalResult]) -> list[list[str]]:
    return [row(r) for r in sorted(results, key=lambda r: (order_key(r.problem["id"]), r.solution["name"]))]


def precision_line(results: Iterable[EvalResult]) -> str:
    """A line naming the run's precision where it is not fp32 (empty for fp32 runs)."""
    half = sorted({r.precision for r in results if r.precision != "fp32"})
    return (f"precision {', '.join(half)}: both models and the floating-point inputs cast to it; classes and "
            f"baselines of {', '.join(half)} (docs/precisions.md)") if half else ""


def table(results: Iterable[EvalResult], fmt: str = "simple") -> str:
    results = list(results)
    title = precision_line(results)
    text = tabulate(rows(results), headers=COLUMNS, tablefmt=fmt, disable_numparse=True)
    return f"{title}\n{text}" if title else text


TERMINAL_COLUMNS = ["problem", "solution", "status", "class", "err", "ms", "base ms", "speedup", "x floor", "flags"]
SHORT_FLAGS = {"library_passthrough": "passthrough", "timing_inconsistent": "timing?", "reference_disturbed": "ref-busy",
               "degenerate_problem": "degenerate", "below_floor": "<floor",
               "timing_unpinned": "unpinned"}


def short_label(name: str, width: int) -> str:
    """A problem or solution name in `width` characters: a KernelBench id's number, a space, and as
    much of its name as fits ('81 conv_transpose_2d_asy…')."""
    number, _, rest = name.partition("_")
    text = f"{number} {rest}" if number.isdigit() and rest else name
    return text if len(text) <= width else text[:width - 1] + "…"


def terminal_table(results: Iterable[EvalResult], wide: bool = False, problem_width: int = 21,
                   solution_width: int = 11) -> str:
    """The run's table for a terminal, within 120 columns: short labels, medians without their
    spread, the one baseline the class is compared with ('base ms': PyTorch's defaults for tf32 and
    the half classes, TF32 off or the strict setting for fp32), short flags. `wide`: every column
    in full, as `table` (md, csv, json and html always are)."""
    results = list(results)
    if wide:
        return table(results)
    body = []
    for result in sorted(results, key=lambda r: (order_key(r.problem["id"]), r.solution["name"])):
        full = row(result)
        t = result.timing or {}
        base = t.get(t.get("baseline") or "")
        err = (result.correctness or {}).get("max_abs_error")
        body.append([short_label(full[0], problem_width), short_label(full[1], solution_width), full[2], full[3],
                     f"{err:.1e}" if err is not None else "-",
                     f"{t['solution']['median_ms']:.3f}" if t.get("solution") else "-",
                     f"{base['median_ms']:.3f}" if base else "-",
                     full[8].replace(" (vs fp32)", "").replace(" (vs strict)", ""), full[9],
                     ",".join(SHORT_FLAGS.get(f, f) for f in result.flags) or "-"])
    widths = [max([len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(TERMINAL_COLUMNS)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
             for cells in [TERMINAL_COLUMNS, ["-" * w for w in widths], *body]]
    title = precision_line(results)
    return "\n".join(([title] if title else []) + lines)


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


# The phase table: where each pair's own wall time went (results' `phases`, harness/core/results.py).
PHASE_COLUMNS = [("build", "build_s"), ("start-up", "startup_s"), ("reference", "reference_s"), ("load", "load_s"),
                 ("construct", "construct_s"), ("correctness", "correctness_s"), ("timing", "timing_s"),
                 ("profile", "profile_s"), ("truth", "truth_s"), ("judge", "judge_s"), ("store", "store_s"),
                 ("wall", "wall_s"), ("GPU", "gpu_s"), ("overhead", "overhead_s")]


def phase_rows(results: Iterable[EvalResult]) -> list[list[str]]:
    rows_ = []
    for r in sorted(results, key=lambda r: (order_key(r.problem["id"]), r.solution["name"])):
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


# -- the leaderboard across runs (harness/record/standings.py) -------------------------------------------
BOARD_COLUMNS = ["rank", "solution", "class", "ms", "ref ms", "speedup", "x floor", "flags", "run", "commit"]
OTHER_COLUMNS = ["solution", "status", "message", "run"]
SKIPPED_COLUMNS = ["solution", "why", "run"]
PAIR_CSV = ["gpu", "precision", "problem", "rank", "solution", "status", "class", "ms", "iqr_ms", "ref_ms", "speedup",
            "speedup_ci_low", "speedup_ci_high", "x_floor", "flags", "run_id", "commit", "message"]


def _short(text: str, limit: int = 140) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def pair_record(entry, rank: int | None) -> dict:
    """One board row as data (json, csv, html)."""
    from .standings import commit_of, gpu_of, precision_of, speedup_of
    r = entry.result
    t = r.timing or {}
    ci = t.get("speedup_ci") if speedup_of(r) is not None else None
    base = t.get(t.get("baseline", ""), {}) or {}
    sol = t.get("solution") or {}
    return {"gpu": gpu_of(r), "precision": r.precision, "problem": r.problem["id"], "rank": rank,
            "solution": r.solution["name"],
            "status": r.status.value, "class": precision_of(r), "ms": sol.get("median_ms"), "iqr_ms": sol.get("iqr_ms"),
            "ref_ms": base.get("median_ms"), "baseline": t.get("baseline"), "speedup": speedup_of(r),
            "speedup_ci_low": ci[0] if ci else None, "speedup_ci_high": ci[1] if ci else None,
            "x_floor": None if x_floor(r) is None else round(x_floor(r), 3), "flags": list(r.flags), "run_id": r.run_id, "commit": commit_of(r), "message": r.message,
            "path": str(entry.path)}


def board_data(boards_: list, summary_rows: list[dict]) -> dict:
    """Every board's problems: the ranked and the other records, and `aa`: the problem's A/A pair
    (its reference as its own solution, --solution reference) where one was run, the noise floor
    its speedups are read against."""
    def problem(slot: dict) -> dict:
        ranked = [pair_record(e, i + 1) for i, e in enumerate(slot["ranked"])]
        aa = next((rec for e, rec in zip(slot["ranked"], ranked) if e.result.solution.get("kind") == "reference"), None)
        return {"ranked": ranked, "others": [pair_record(e, None) for e in slot["others"]], "aa": aa}
    return {"boards": [{"gpu": b.gpu, "problems": {pid: problem(slot) for pid, slot in sorted(b.problems.items())}}
                       for b in boards_], "summary": summary_rows}


def aa_text(aa: dict | None) -> str:
    """' (A/A 1.01x [0.99-1.02])': the problem's noise floor, or ''."""
    if not aa or aa.get("speedup") is None:
        return ""
    interval = (aa["speedup_ci_low"], aa["speedup_ci_high"]) if aa.get("speedup_ci_low") is not None else None
    return f" (A/A {aa['speedup']:.2f}x{ci_text(interval)})"


def _fmt(value, spec: str = ".2f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _board_rows(slot: dict, wide: bool = True) -> tuple[list[list[str]], list[list[str]], list[list[str]]]:
    """(ranked, not correct, skipped) rows of a problem's slot; not `wide`: names and messages short
    enough for a terminal."""
    name = (lambda text: text) if wide else (lambda text: short_label(text, 16))
    ranked = []
    for rec in slot["ranked"]:
        ms = f"{rec['ms']:.3f} ±{rec['iqr_ms']:.3f}" if rec["ms"] is not None else "-"
        label = baseline_label(rec["baseline"] or "", rec["precision"], "cpu" if rec["gpu"] == "CPU" else "cuda")
        interval = (rec["speedup_ci_low"], rec["speedup_ci_high"]) if rec.get("speedup_ci_low") is not None else None
        vs = f" (vs {label})" if label and wide else ""  # in short, the class names its baseline (the note)
        cells = [str(rec["rank"]), name(rec["solution"]), rec["class"] or "-", ms, _fmt(rec["ref_ms"], ".3f"),
                 speedup_text(rec["speedup"], interval) + (vs if rec["speedup"] is not None else ""),
                 _fmt(rec.get("x_floor"), ".1f"),
                 ",".join(SHORT_FLAGS.get(f, f) if not wide else f for f in rec["flags"]) or "-", rec["run_id"]]
        ranked.append(cells + [rec["commit"] or "-"] if wide else cells)
    limit = 140 if wide else 60
    others = [[name(rec["solution"]), rec["status"], _short(rec["message"], limit), rec["run_id"]]
              for rec in slot["others"] if rec["status"] != "skipped"]
    skipped = [[name(rec["solution"]), _short(rec["message"], limit + 10), rec["run_id"]]
               for rec in slot["others"] if rec["status"] == "skipped"]
    return ranked, others, skipped


def shown_classes(summary_rows: list[dict]) -> list[str]:
    """The classes the summary has a column for: fp32 and tf32, and a half class any row earned."""
    return [c for c in CLASSES if c in ("fp32", "tf32") or any(s[c]["correct"] > 0 for s in summary_rows)]


def summary_columns(summary_rows: list[dict]) -> list[str]:
    return (["solution", "gpu", "attempted", "samples", "correct", "fast_1", "fast_1.5", "fast_2", "geomean"]
            + [f"{c}: correct / fast_1 / geomean" for c in shown_classes(summary_rows)])


def summary_table_rows(summary_rows: list[dict]) -> list[list[str]]:
    rows = []
    for s in summary_rows:
        per_class = [f"{s[c]['correct']:.0%} / {s[c]['fast_1']:.0%} / {_fmt(s[c]['geomean_speedup'], '.2f', 'x')}"
                     for c in shown_classes(summary_rows)]
        rows.append([s["solution"], s["gpu"], str(s["attempted"]), str(s["samples"]), f"{s['correct']:.0%}",
                     f"{s['fast_1']:.0%}", f"{s['fast_1.5']:.0%}", f"{s['fast_2']:.0%}",
                     _fmt(s["geomean_speedup"], ".2f", "x"), *per_class])
    return rows


def class_rows(summary_rows: list[dict]) -> list[list[str]]:
    """The summary's per-class figures, a row per (solution set, GPU, class) it earned."""
    return [[s["solution"], s["gpu"], c, f"{s[c]['correct']:.0%}", f"{s[c]['fast_1']:.0%}",
             _fmt(s[c]["geomean_speedup"], ".2f", "x")] for s in summary_rows for c in shown_classes(summary_rows)
            if s[c]["correct"] > 0]


def pass_at_k_rows(summary_rows: list[dict]) -> list[list[str]]:
    return [[s["solution"], s["gpu"], f"pass@{k}", f"{v['fast_0']:.0%}", f"{v['fast_1']:.0%}", f"{v['fast_1.5']:.0%}",
             f"{v['fast_2']:.0%}"] for s in summary_rows for k, v in sorted((s.get("pass_at_k") or {}).items())]


def board_text(data: dict, fmt: str = "text", wide: bool = True) -> str:
    """The leaderboard as text (tabulate) or markdown: one board per GPU, per problem the ranked
    correct solutions, the incorrect ones and the skipped ones apart, then the summary per
    solution set. Text not `wide` fits a terminal: short names and messages, the summary's
    per-class figures in a table of their own."""
    md = fmt == "md"
    wide = wide or md
    style = "github" if md else "simple"
    out: list[str] = []
    for board in data["boards"]:
        out.append(("## " if md else "== ") + board["gpu"] + ("" if md else " =="))
        for pid, slot in board["problems"].items():
            out.append(("### " if md else "-- ") + pid + aa_text(slot.get("aa")))
            ranked, others, skipped = _board_rows(slot, wide)
            if ranked:
                out.append(tabulate(ranked, headers=BOARD_COLUMNS if wide else BOARD_COLUMNS[:-1], tablefmt=style,
                                    disable_numparse=True))
            if others:
                out.append(("**not correct**\n\n" if md else "not correct:\n")
                           + tabulate(others, headers=OTHER_COLUMNS, tablefmt=style, disable_numparse=True))
            if skipped:
                out.append(("**skipped** (not run here)\n\n" if md else "skipped (not run here):\n")
                           + tabulate(skipped, headers=SKIPPED_COLUMNS, tablefmt=style, disable_numparse=True))
            out.append("")
    out.append(("## " if md else "== ") + "Summary per solution set and GPU" + ("" if md else " =="))
    if wide:
        out.append(tabulate(summary_table_rows(data["summary"]), headers=summary_columns(data["summary"]),
                            tablefmt=style, disable_numparse=True))
    else:
        out.append(tabulate([r[:9] for r in summary_table_rows(data["summary"])],
                            headers=summary_columns(data["summary"])[:9], tablefmt=style, disable_numparse=True))
        out.append("")
        out.append(tabulate(class_rows(data["summary"]), headers=["solution", "gpu", "class", "correct", "fast_1",
                                                                  "geomean"], tablefmt=style, disable_numparse=True))
    passk = pass_at_k_rows(data["summary"])
    if passk:
        out.append("")
        out.append(tabulate(passk, headers=["solution", "gpu", "k", "correct", "fast_1", "fast_1.5", "fast_2"],
                            tablefmt=style, disable_numparse=True))
        for s in data["summary"]:
            if s.get("best"):
                out.append(f"best samples of {s['solution']} on {s['gpu']}: "
                           + ", ".join(f"{p}: {name}" for p, name in s["best"].items()))
    out.append("")
    note = ("fast_p: the share of attempted problems where the solution is correct and faster than the class's "
            "baseline by more than p (fast_0 = correct); geomean over correct pairs. The baseline: PyTorch's "
            "defaults for the tf32 and half classes, TF32 off (the strict setting in a half run) for fp32."
            + ("" if wide else " `noisy`: an interval spanning more than 2x. --wide: every column."))
    out.append(note if wide else textwrap.fill(note, 120))
    return "\n".join(out)


def board_csv(data: dict) -> str:
    rows = [[rec[c] if not isinstance(rec[c], list) else ",".join(rec[c]) for c in PAIR_CSV]
            for board in data["boards"] for slot in board["problems"].values()
            for rec in slot["ranked"] + slot["others"]]
    return _csv(PAIR_CSV, [["" if v is None else v for v in r] for r in rows])


def summary_csv(data: dict) -> str:
    return _csv(summary_columns(data["summary"]), summary_table_rows(data["summary"]))
