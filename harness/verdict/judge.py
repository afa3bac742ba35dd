"""The trusted side of correctness, inside a lane (harness/run/lane.py), which never imports solution
code: the judgement of each output a worker hands over (numerics.classify) against what the lane
computed itself (truth: the reference per problem and shape, inputs regenerated from their seeds,
float64 ground truth computed once per (problem, shape, seed) and kept while it fits), of its inputs
after the call and of its parameters. The report has the same form for every device.
"""
from __future__ import annotations

import functools
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from ..isolate.handoff import HandoffError, Imports, overlaps, snapshot
from .numerics import NOISE_FACTOR, classify, diagnose_parameters, explain_by_variants, rounded_tolerance
from ..core.precision import casts, loosest
from ..isolate.sandbox import allocation_failed
from .asked import checked, never_handed_over, unasked
from .sample import Taken, TimedSample, same_bits
from .screen import rounded_floor, screened
from .truth import ProblemState, TruthCache, Truths


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


class PairJudgement:
    """The judgement of one pair's outputs, built up as the worker hands them over, against what
    `truths` (truth.Truths) computes on the lane's side."""

    def __init__(self, judge: "Judge", problem: ProblemState, seeds: dict[str, Any], tolerances: dict[str, Any],
                 run: str = "fp32", sample: int | None = None, asked: bool = True):
        """`sample`: judge a secret sample of this many timed calls (TimedSample); None: every
        timed output handed over, as it comes. `asked` (checks.trial_coverage): only outputs the lane
        asked for are taken, and every trial's must come (asked.py)."""
        self.judge, self.problem, self.seeds, self.asked = judge, problem, seeds, asked
        self.sample = TimedSample(sample, judge.spill_dir, device_bytes=judge.cache.budget // 2) \
            if sample is not None else None
        self.slot = 0         # where the sample keeps the timed output being taken (passes)
        self.run = run        # the run's precision
        self.truths = judge.truths(problem, seeds, run)
        self.tol = {name: SimpleNamespace(**t) for name, t in tolerances.items()}
        self.tolerances = tolerances
        self.results: list[dict[str, Any]] = []
        self.weights: list[str] = []
        self.precision: str | None = None
        self.explained = False
        self.screened = 0     # timed outputs judged by the screen, without a float64 truth of their own
        self.on_host = 0      # outputs compared on the host: the device had no room (compare)
        self.near_bound: dict[str, Any] | None = None  # the more trials a pass near its bound ran (run/confirm.py)

    def take_output(self, entry: dict[str, Any], payload: bytes, device: str) -> Taken:
        """While the worker is stopped: copy its output into our own memory, and check that it is
        a plain new tensor on the right device and that the inputs are as they were generated."""
        taken = Taken(entry)
        taken.problem = unasked(self.seeds, entry) if self.asked else None
        if taken.problem:
            return taken
        if not entry.get("output"):
            taken.problem = f"forward returned {entry.get('type')}, expected a torch.Tensor"
            return taken
        if not entry.get("plain", True):
            taken.problem = f"output is a {entry.get('type')}, expected a plain torch.Tensor"
            return taken
        meta = entry["output"][0]
        if meta.get("device") != torch.device(device).type:
            taken.problem = f"output is on {meta.get('device')}, expected {device}"
            return taken
        with Imports(device) as imports:
            try:
                view = imports.tensor(meta, payload)
                inputs_after = [imports.tensor(m, payload) if m else None for m in entry.get("inputs") or []]
            except (HandoffError, RuntimeError, ValueError, KeyError, TypeError) as exc:
                taken.problem = f"the output could not be taken from the worker ({exc})"
                return taken
            alias = entry.get("alias")
            out_range = imports.byte_range(meta)
            for i, m in enumerate(entry.get("inputs") or []):
                if m and overlaps(out_range, imports.byte_range(m)):
                    alias = i
            if alias is not None:
                taken.problem = f"output shares memory with input {alias} (it must be a new tensor)"
                return taken
            fresh = self.truths.inputs(entry["shape"], entry["seed"])
            for i, (after, before) in enumerate(zip(inputs_after, fresh)):
                if isinstance(before, torch.Tensor) and (after is None or not same_bits(after, before)):
                    taken.problem = f"input {i} was modified by the call (forward must not write to its inputs)"
                    return taken
            taken.inputs = fresh
            if entry.get("kind") == "timed" and self.sample is not None:
                self.sample.store(taken, view, self.slot)
            else:
                taken.out = snapshot(view, device)
            del view, inputs_after
        return taken

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

    def passes(self, entry: dict[str, Any]) -> bool:
        """Whether a handed-over output is let go without being taken: a timed call the secret
        sample does not keep (drawn now, the call having returned), unless its own description
        already shows it wrong (not a plain tensor on the device), which take_output reports."""
        if self.sample is None or entry.get("kind") != "timed":
            return False
        slot = self.sample.draw()
        if slot is not None:
            self.slot = slot
            return False
        meta = (entry.get("output") or [None])[0]
        return bool(meta) and entry.get("plain", True) and meta.get("device") == torch.device(self.problem.device).type

    def deferred(self, taken: Taken) -> bool:
        """Whether `taken` waits for judge_sample (a timed output of the secret sample, refused
        for nothing on the way in)."""
        return self.sample is not None and taken.entry.get("kind") == "timed" and taken.problem is None

    def judge_sample(self) -> None:
        """After the last call: judge the timed outputs the sample kept, in call order, each by the
        screen where it settles the output, else against its own ground truth."""
        if self.sample is None:
            return
        for taken in sorted(self.sample.kept.values(), key=lambda t: t.entry["trial"]):
            taken.out = self.sample.output_of(taken)
            taken.inputs = self.truths.inputs(taken.entry["shape"], taken.entry["seed"])
            if not self.screen(taken):
                self.judge_output(taken)
            taken.inputs = []
            if self.sample.on_host:
                taken.out = None  # back on the device for its judgement only
            if not self.results[-1]["ok"]:
                break
        self.sample.release()

    def screen(self, taken: Taken) -> bool:
        """Judge a kept timed output (or the profiled call's) by the screen where it settles it
        (screen.screened: without a float64 truth of its own, where that cannot change its
        verdict), once the pair's outputs have a float64 truth. Returns whether it settled it."""
        if taken.problem or self.precision != "float64" or not self.tol:
            return False
        result = screened(self.truths, self.tol, taken)
        if result is None:
            return False
        self.screened += 1
        self.results.append(result)
        return True

    def judge_taken(self, taken: Taken) -> None:
        """An output taken while the worker was stopped and judged at once: the profiled call's by
        the screen where it settles it (a timed input, whose ground truth no trial shares), any
        other against its ground truth."""
        if taken.entry.get("kind") == "profile" and self.screen(taken):
            return
        self.judge_output(taken)

    def judge_output(self, taken: Taken) -> dict[str, Any]:
        entry = taken.entry
        if taken.problem:
            result = {"ok": False, "precision": None, "message": taken.problem}
        else:
            result = self._against_truth(taken)
        result.update(kind=entry["kind"], shape=entry["shape"], trial=entry["trial"], seed=entry["seed"],
                      overrides=self.truths.overrides(entry["shape"]))
        self.results.append(result)
        return result

    def _against_truth(self, taken: Taken) -> dict[str, Any]:
        """An output's result against its float64 ground truth, class by class, a failure explained
        where a typical mistake (numerics.explain_by_variants) or the rounding classes can."""
        entry, computed = taken.entry, self.truths.computed
        truth, self.precision, expected_dtype = self.truths.truth(entry["shape"], entry["seed"], taken.inputs)
        if entry["kind"] == "trial" and self.precision == "float64" and self.truths.computed > computed:
            self.truths.reference_error(entry["shape"], entry["seed"], taken.inputs, truth)
        bounds: dict[str, Any] = {}
        tolerances = {name: (functools.partial(self.rounded, name, entry, taken.inputs, truth, bounds)
                             if getattr(tol, "between", None) is not None else tol)
                      for name, tol in self.tol.items()}
        cls, comparison = self.compare(taken.out, truth, expected_dtype, tolerances)
        noise = None
        if cls is None and comparison.mismatched == 0 and self.precision == "float64":
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
                                              taken.out, self.problem.device, list(self.tol.values())[-1])
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

    def rounded(self, name: str, entry: dict[str, Any], inputs: list, truth: torch.Tensor,
                bounds: dict[str, Any]):
        """Class `name`'s tolerance for this output, its relative-L2 bound set from the reference's
        own rounding errors (Truths.rounding)."""
        errors = self.truths.rounding(entry["shape"], entry["seed"], inputs, truth)
        bounds[name] = rounded_tolerance(self.tol[name], errors, rounded_floor(self.tol, name))
        return bounds[name]

    def take_state(self, entry: dict[str, Any], payload: bytes, device: str) -> None:
        """ModelNew's parameters against the reference's, after matched-seed construction."""
        shape = self.truths.reference(0)
        reference, expected = shape["model"], shape["state"]
        try:
            with Imports(device) as imports:
                state = {name: snapshot(imports.tensor(m, payload), device)
                         for name, m in zip(entry.get("names") or [], entry.get("state") or []) if m}
        except (HandoffError, RuntimeError, ValueError, KeyError, TypeError) as exc:
            self.weights = [f"ModelNew's parameters could not be read ({exc})"]
            return
        self.weights = diagnose_parameters(state, expected, reference)

    def report(self) -> dict[str, Any]:
        results = self.results
        missing = self.asked and never_handed_over(self.seeds, results)
        failed = [r for r in results if not r["ok"]] or ([missing] if missing else [])
        classes = [r["precision"] for r in results]
        overall = None if failed or not results else loosest(classes, self.run)
        numeric = [r for r in results if r.get("max_abs_error") is not None]
        return {
            "ok": overall is not None,
            "precision": overall,
            "message": failed[0]["message"] if failed else (min(numeric, key=lambda r: r["margin"])["message"]
                                                             if numeric else "no outputs"),
            "failed": failed[0] if failed else None,
            "weight_diagnostics": self.weights,
            "ground_truth": self.precision,
            "tolerances": self.tolerances,
            "max_abs_error": max((r["max_abs_error"] for r in numeric), default=None),
            "max_rel_error": max((r["max_rel_error"] for r in numeric), default=None),
            "rel_l2_error": max((r["rel_l2_error"] for r in numeric), default=None),
            "min_margin": min((r["margin"] for r in numeric), default=None),
            "checked": checked(results, self.sample),
            "truth": {"computed": self.truths.computed, "reused": self.truths.cached, "screened": self.screened,
                      **({"compared_on_host": self.on_host} if self.on_host else {})},
            "outputs": results,
            **({"near_bound": self.near_bound} if self.near_bound else {}),
        }


class Judge:
    """A lane's problems and ground-truth cache, for the whole run."""

    def __init__(self, device: str, cache_bytes: int, spill_dir: Path | None = None):
        """`spill_dir`: where a CPU lane keeps a secret sample's outputs (TimedSample)."""
        self.device = device
        self.spill_dir = spill_dir
        self.cache = TruthCache(cache_bytes)
        self.rounding: dict[tuple, dict[str, float] | None] = {}  # output key -> numerics.rounding_errors
        self.reference_errors: dict[tuple, dict[str, float] | None] = {}  # trial key -> Truths.reference_error
        self.problems: dict[str, ProblemState] = {}

    def problem(self, path: Path, sha256: str) -> ProblemState:
        if sha256 not in self.problems:
            self.problems[sha256] = ProblemState(path, sha256, self.device)
        return self.problems[sha256]

    def begin(self, problem: ProblemState, seeds: dict[str, Any], tolerances: dict[str, Any],
              run: str = "fp32", sample: int | None = None, asked: bool = True) -> PairJudgement:
        return PairJudgement(self, problem, seeds, tolerances, run, sample, asked)

    def truths(self, problem: ProblemState, seeds: dict[str, Any], run: str = "fp32") -> Truths:
        """What a pair's outputs are judged against, without judging any (truth.Truths)."""
        return Truths(self, problem, seeds, run, casts(run))

    def sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def release(self, force: bool = False) -> None:
        """Hand memory this lane holds but does not use back to the driver, so the worker has it:
        always when `force`, else once less than a quarter of the device's memory is free
        (releasing and allocating gigabytes again on every output costs more than it saves)."""
        if self.device == "cuda":
            free, total = torch.cuda.mem_get_info()
            if force or free < 0.25 * total:
                torch.cuda.empty_cache()
