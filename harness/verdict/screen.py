"""The screen: a kept timed output (or the profiled call's) judged without a float64 truth of its
own, where that cannot change its verdict (judge.PairJudgement.screen), against the reference run
in float32 with TF32 off on the same inputs, whose own error is bounded from the shape's trials
(truth.Truths.screen_bound).
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from ..isolate.sandbox import allocation_failed
from .numerics import compare, rounded_tolerance, strict_float32
from .sample import Taken
from .truth import Truths


def rounded_floor(tol: dict[str, Any], name: str) -> float:
    """The least rel L2 bound of a class set from rounding errors: the fp32 class's."""
    return tol["fp32"].rel_l2 if "fp32" in tol and name != "fp32" else 0.0


def screened(truths: Truths, tol: dict[str, Any], taken: Taken) -> dict[str, Any] | None:
    """The output's result where the screen settles it, else None (it goes to its own float64
    truth, which also explains a failure). Against r, the reference in float32 (TF32 off) on the
    same inputs, whose own error on them is at most d elementwise and e in rel L2: class by class
    (`tol`, strictest first, as classify goes), within the class's tolerance narrowed by that
    error (atol - d(1 + rtol), (rel_l2 - e) / (1 + e)) of r, the output is within the class of the
    float64 truth (triangle inequality): settled, in that class. Outside the tolerance widened by
    it (atol + d(1 + rtol), (rel_l2 + e) / (1 - e)), it is outside the class of the truth too: on
    to the next class. In between, or for a class whose bound is not known yet (the tf32 class's,
    set from rounding errors kept per shape only for outputs of a million elements or more), or
    once every class has failed: None. The time it takes counts as the truth's."""
    entry = taken.entry
    bound = truths.screen_bound(entry["shape"])
    ref = truths.reference(entry["shape"])
    if bound is None or ref["dtype"] is None:
        return None
    d, e = bound["max_abs"], bound["rel_l2"]
    settled = None
    with truths.counted():
        try:
            r = strict_float32(ref["model"], taken.inputs, truths.problem.device)
            if isinstance(r, torch.Tensor) and bool(torch.isfinite(r).all()):
                settled = _settled(truths, tol, taken.out, r, ref["dtype"], entry["shape"], d, e)
        except Exception as exc:  # noqa: BLE001 - out of memory: the output goes to its own truth
            if not allocation_failed(exc):
                raise
        r = None
    if settled is None:
        return None
    name, narrowed = settled
    return {"ok": True, "precision": name, "kind": entry["kind"], "shape": entry["shape"], "trial": entry["trial"],
            "seed": entry["seed"], "overrides": truths.overrides(entry["shape"]),
            "message": f"within the {name} class: against the float32 reference (TF32 off) within "
                       f"atol {narrowed.atol:.3g}, rel L2 {narrowed.rel_l2:.3g}, that reference's "
                       f"own error bounded by {d:.3g} and {e:.3g}",
            "screened": {"against": "float32_strict", "reference_max_abs": d, "reference_rel_l2": e,
                         "trials": bound["trials"]}}


def _settled(truths: Truths, tol: dict[str, Any], out: torch.Tensor, r: torch.Tensor, dtype, shape_index: int,
             d: float, e: float) -> tuple[str, Any] | None:
    """(class, narrowed tolerance) the screen settles `out` in, or None (see screened)."""
    for name, t in tol.items():
        if getattr(t, "between", None) is not None:
            known, errors = truths.shape_rounding(shape_index, r.numel())
            if not known:
                return None
            t = rounded_tolerance(t, errors, rounded_floor(tol, name))
        narrowed = SimpleNamespace(atol=t.atol - d * (1 + t.rtol), rtol=t.rtol, rel_l2=(t.rel_l2 - e) / (1 + e))
        if (narrowed.atol >= t.atol / 2 and narrowed.rel_l2 >= t.rel_l2 / 2
                and compare(out, r, dtype, narrowed, explain=False).ok):
            return name, narrowed
        widened = SimpleNamespace(atol=t.atol + d * (1 + t.rtol), rtol=t.rtol,
                                  rel_l2=(t.rel_l2 + e) / (1 - e) if e < 1 else float("inf"))
        if compare(out, r, dtype, widened, explain=False).ok:
            return None  # within the uncertainty of r: its own truth decides
    return None
