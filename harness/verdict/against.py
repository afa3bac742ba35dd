"""One output against its ground truth: what judge.PairJudgement does with each output the screen
does not settle. The classes' tolerances for the output (the tf32 class's rel L2 bound set from the
reference's own rounding errors, numerics.rounded_tolerance; where the float32 reference's own
error on the output is above a class's bound, NOISE_FACTOR x that error), the comparison made out
of the device's memory if need be, and a failure explained where a typical mistake
(numerics.explain_by_variants) or the rounding classes can.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import torch

from ..isolate.sandbox import allocation_failed
from .numerics import NOISE_FACTOR, classify, explain_by_variants, rounded_tolerance
from .sample import Taken
from .screen import rounded_floor
from .truth import Truths


def rounding_note(name: str, tol) -> str:
    """Where an output failed the loosest class, whose rel L2 bound is set from the reference's
    own rounding errors (numerics.rounded_tolerance): where that bound lies among them."""
    low, high = tol.rounding["tf32"], tol.rounding["bf16"]
    if tol.rel_l2 < low:
        return (f"; the {name} class's rel L2 bound for this output, {tol.rel_l2:.3g} (its most), is below the "
                f"reference's own error with its operands rounded to TF32 ({low:.2g}): this output needs more "
                f"than TF32 arithmetic")
    return (f"; the {name} class's rel L2 bound for this output, {tol.rel_l2:.3g}, lies between the reference's "
            f"own error with its operands rounded to TF32 ({low:.2g}) and to bf16 ({high:.2g}): this error is not "
            f"TF32 arithmetic's")


class AgainstTruth:
    """A pair's outputs against their ground truth (`truths`), class by class (`tol`: the run's
    classes, strictest first). `precision`: the ground truth's (float64, or float32_strict where
    the reference cannot run in float64); `on_host`: outputs compared on the host. `noise`: whether
    an output of rounding noise is judged at NOISE_FACTOR x the reference's error (correctness.noise_bound)."""

    def __init__(self, judge, truths: Truths, tol: dict[str, Any], noise: bool = False):
        self.judge, self.truths, self.tol, self.noise = judge, truths, tol, noise
        self.precision: str | None = None
        self.explained = False  # one try per pair at explaining a failure
        self.on_host = 0

    def compare(self, out: torch.Tensor, truth: torch.Tensor, expected_dtype, tolerances: dict):
        """numerics.classify, which needs room on the device for its chunks (an output of 1.6 G
        elements takes 6 GiB per fp32 chunk buffer): out of memory there, once more with the
        lane's cached ground truth dropped, then on the host (the lane's own shortage is never
        the solution's fault; seen on an 80 GB H100 with KernelBench's 6.4 GB softmax)."""
        try:
            return classify(out, truth, expected_dtype, tolerances)
        except Exception as exc:  # noqa: BLE001 - out of memory only
            if not allocation_failed(exc):
                raise
            self.judge.cache.clear()
            self.judge.release(force=True)
        try:
            return classify(out, truth, expected_dtype, tolerances)
        except torch.OutOfMemoryError:
            self.judge.release(force=True)
            self.on_host += 1
            return classify(out.cpu(), truth.cpu(), expected_dtype, tolerances)

    def result(self, taken: Taken) -> dict[str, Any]:
        """An output's result against its float64 ground truth, class by class, a failure explained
        where a typical mistake (numerics.explain_by_variants) or the rounding classes can."""
        entry, computed = taken.entry, self.truths.computed
        truth, self.precision, expected_dtype = self.truths.truth(entry["shape"], entry["seed"], taken.inputs)
        if entry["kind"] == "trial" and self.precision == "float64" and self.truths.computed > computed:
            self.truths.reference_error(entry["shape"], entry["seed"], taken.inputs, truth)
        bounds: dict[str, Any] = {}
        tolerances = {name: (functools.partial(self._rounded, name, entry, taken.inputs, truth, bounds)
                             if getattr(tol, "between", None) is not None else tol)
                      for name, tol in self.tol.items()}
        cls, comparison = self.compare(taken.out, truth, expected_dtype, tolerances)
        noise = None
        if self.noise and cls is None and comparison.mismatched == 0 and self.precision == "float64":
            cls, comparison, noise = self._within_noise(entry, taken, truth, expected_dtype, tolerances, comparison)
        result = {**comparison.to_dict(), "ok": cls is not None, "precision": cls}
        if noise is not None:
            result["noise_rel_l2"] = noise
            result["message"] += (f"; the float32 reference's own error on this output, rel L2 {noise:.2g}, is "
                                  f"above the class's nominal bound (the output is rounding noise): its bound "
                                  f"was {NOISE_FACTOR:g}x that error")
        for name, tol in bounds.items():
            result.setdefault("rel_l2_bounds", {})[name] = tol.rel_l2
            if getattr(tol, "rounding", None):
                result["rounding"] = tol.rounding
                if cls is None and noise is None and name == list(self.tol)[-1]:
                    result["message"] += rounding_note(name, tol)
        if cls is None and not self.explained and comparison.max_abs_error is not None:
            self.explained = True  # one try per pair: each variant costs a float64 forward
            explanation = explain_by_variants(self.truths.reference(entry["shape"])["model"], taken.inputs,
                                              taken.out, self.truths.problem.device, list(self.tol.values())[-1])
            if explanation:
                result["message"] = f"{explanation}; {result['message']}"
        return result

    def _within_noise(self, entry: dict[str, Any], taken: Taken, truth: torch.Tensor, expected_dtype,
                      tolerances: dict[str, Any], comparison):
        """An output within every element's bound that failed only the rel L2 bound, judged again
        where the float32 reference's own error on it is above a class's bound: there the bound
        would reject the reference itself (KernelBench level 2's problem 41, a mean over a
        group-normalised tensor, whose truth is 0 to 1e-17 and every float32 output rounding noise
        of 1e-8), so it becomes NOISE_FACTOR x that error. (class or None, comparison, the
        reference's error where it set a bound, else None.) No class's bound is below the least
        nominal one (a rounded bound is at least the fp32 class's)."""
        noise = self.truths.own_error(entry["shape"], entry["seed"], taken.inputs, truth)
        if noise is None or noise <= min(tol.rel_l2 for tol in self.tol.values()):
            return None, comparison, None

        def at_noise(tol):
            tol = tol() if callable(tol) else tol
            return SimpleNamespace(**{**vars(tol), "rel_l2": NOISE_FACTOR * noise}) if tol.rel_l2 < noise else tol

        loosened = {name: functools.partial(at_noise, tol) for name, tol in tolerances.items()}
        cls, again = self.compare(taken.out, truth, expected_dtype, loosened)
        return cls, again, noise

    def _rounded(self, name: str, entry: dict[str, Any], inputs: list, truth: torch.Tensor,
                bounds: dict[str, Any]):
        """Class `name`'s tolerance for this output, its relative-L2 bound set from the reference's
        own rounding errors (Truths.rounding)."""
        errors = self.truths.rounding(entry["shape"], entry["seed"], inputs, truth)
        bounds[name] = rounded_tolerance(self.tol[name], errors, rounded_floor(self.tol, name))
        return bounds[name]
