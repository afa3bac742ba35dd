"""The leaderboard as a plot (matplotlib) and as one self-contained HTML page (tables and the plot
embedded). Pure: it draws from the leaderboard's data (leaderboard.board_data)."""
from __future__ import annotations

import base64
import html
import io
from typing import Any

from ..core.errors import BadInput
from .leaderboard import (BOARD_COLUMNS, OTHER_COLUMNS, SKIPPED_COLUMNS, _board_rows, aa_text, pass_at_k_rows, summary_columns,
                          summary_table_rows)
from .standings import sample_of


def _label(problem: str) -> str:
    head = problem.split("_", 1)[0]
    return head if head.isdigit() else problem[:18]


def plot_png(data: dict[str, Any]) -> bytes:
    """Speedup per problem per solution set (its best sample), one panel per GPU, log scale, a
    line at 1x."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise BadInput("--plot", "needs matplotlib: pip install matplotlib (it is in requirements.txt)") from None
    boards = data["boards"] or [{"gpu": "no results", "problems": {}}]
    fig, axes = plt.subplots(len(boards), 1, figsize=(max(6.0, 1.1 * max(len(b["problems"]) for b in boards) + 3),
                                                      3.6 * len(boards)), squeeze=False)
    for ax, board in zip(axes[:, 0], boards):
        problems = sorted(board["problems"], key=lambda p: (len(_label(p)), _label(p)))
        best: dict[str, dict[str, float]] = {}
        for pid in problems:
            for rec in board["problems"][pid]["ranked"]:
                if rec["speedup"] is not None:
                    name = sample_of(rec["solution"])[0]
                    best.setdefault(name, {})[pid] = max(best.get(name, {}).get(pid, 0.0), rec["speedup"])
        names = sorted(best)
        colors = {name: f"C{i % 10}" for i, name in enumerate(names)}
        width = 0.8 / max(1, max((sum(pid in best[n] for n in names) for pid in problems), default=1))
        for j, pid in enumerate(problems):  # each problem's bars centred on it
            present = [n for n in names if pid in best[n]]
            for i, name in enumerate(present):
                ax.bar(j + (i - (len(present) - 1) / 2) * width, best[name][pid], width=width, color=colors[name])
        for name in names:
            ax.bar([0], [0], width=0, color=colors[name], label=name)
        ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
        ax.set_yscale("log")
        ax.set_xticks(range(len(problems)))
        ax.set_xticklabels([_label(p) for p in problems])
        ax.set_ylabel("speedup vs PyTorch (class baseline)")
        ax.set_title(board["gpu"])
        if names:
            ax.legend(fontsize="small", ncol=min(4, len(names)))
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;font-size:.9em}th{background:#f2f2f2}
h2{margin-top:1.5em}h3{font-size:1em;margin:.8em 0 .2em}img{max-width:100%}.note{color:#666;font-size:.9em}"""


def page(data: dict[str, Any], sources: list[str], png: bytes | None) -> str:
    """One self-contained HTML file: the plot (embedded) and every table."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>Leaderboard</title><style>{STYLE}</style>"
             "</head><body><h1>Leaderboard</h1>",
             f"<p class='note'>From {html.escape(', '.join(sources))}. Speedups against the class's baseline "
             "(tf32 class: PyTorch defaults; fp32 class: PyTorch with TF32 off; in an fp16 or bf16 run, its own "
             "class: PyTorch's default in that dtype, fp32 class: its reduced-precision reductions off); one "
             "board per GPU and run precision.</p>"]
    if png:
        parts.append(f"<img alt='speedup per problem' src='data:image/png;base64,{base64.b64encode(png).decode()}'>")
    for board in data["boards"]:
        parts.append(f"<h2>{html.escape(board['gpu'])}</h2>")
        for pid, slot in board["problems"].items():
            parts.append(f"<h3>{html.escape(pid + aa_text(slot.get('aa')))}</h3>")
            ranked, others, skipped = _board_rows(slot)
            if ranked:
                parts.append(_table(BOARD_COLUMNS, ranked))
            if others:
                parts.append("<p>not correct</p>" + _table(OTHER_COLUMNS, others))
            if skipped:
                parts.append("<p>skipped (not run here)</p>" + _table(SKIPPED_COLUMNS, skipped))
    parts.append("<h2>Summary per solution set and GPU</h2>")
    parts.append(_table(summary_columns(data["summary"]), summary_table_rows(data["summary"])))
    passk = pass_at_k_rows(data["summary"])
    if passk:
        parts.append(_table(["solution", "gpu", "k", "correct", "fast_1", "fast_1.5", "fast_2"], passk))
    parts.append("<p class='note'>fast_p: the share of attempted problems where the solution is correct and "
                 "faster than its class's baseline by more than p (fast_0 = correct); geomean over correct "
                 "pairs.</p></body></html>")
    return "\n".join(parts)
