"""The trusted side of correctness, inside a lane (harness/run/lane.py), which never imports solution
code: the reference per problem and shape, inputs regenerated from their seeds, float64 ground
truth computed once per (problem, shape, seed) and kept while it fits, and the judgement of each
output a worker hands over (numerics.classify), of its inputs after the call and of its
parameters. The report has the same form for every device.
"""
from __future__ import annotations

import functools
import json
import time
from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from ..isolate.handoff import HandoffError, Imports, overlaps, snapshot
from .numerics import (classify, compare, diagnose_parameters, explain_by_variants, float64_copy, ground_truth,
                       rel_l2, rounded_tolerance, rounding_errors, strict_float32)
from ..core.precision import casts, loosest
from ..core.problems import construct, load_module, make_inputs
from ..isolate.sandbox import allocation_failed
from .sample import Taken, TimedSample, same_bits


SHARED_ROUNDING_NUMEL = 1 << 20

# The screen of a kept timed output (PairJudgement.screen): the float32 reference's own error on a
# new input is taken to be at most this many times the largest it made on the shape's trials, and
# the screen is used only where that leaves at least half of the strictest class's tolerance.
SCREEN_FACTOR = 4.0
SCREEN_MIN_TRIALS = 2


class TruthCache:
    """Ground truth kept across the pairs of a run, least recently used first out, within a byte
    budget (on the device it was computed on), and never where it would leave less than
    `keep_free` (a share of the device's memory) free for the next worker."""

    def __init__(self, budget_bytes: int, keep_free: float = 0.25):
        self.budget = budget_bytes
        self.keep_free = keep_free
        self.used = 0
        self.items: OrderedDict[tuple, tuple[torch.Tensor, str]] = OrderedDict()

    def get(self, key: tuple) -> tuple[torch.Tensor, str] | None:
        if key in self.items:
            self.items.move_to_end(key)
            return self.items[key]
        return None

    def put(self, key: tuple, value: tuple[torch.Tensor, str]) -> None:
        size = value[0].numel() * value[0].element_size()
        if size > self.budget:
            return
        if value[0].is_cuda:
            free, total = torch.cuda.mem_get_info()
            if free < self.keep_free * total:
                return
        while self.used + size > self.budget and self.items:
            _, (old, _) = self.items.popitem(last=False)
            self.used -= old.numel() * old.element_size()
        self.items[key] = value
        self.used += size

    def clear(self) -> None:
        self.items.clear()
        self.used = 0


class ProblemState:
    """One problem file, loaded once per lane: its module (module-level constants overridden per
    shape), and per shape the reference model, its float64 copy and the output dtype."""

    def __init__(self, path: Path, sha256: str, device: str):
        self.path, self.sha256, self.device = Path(path), sha256, device
        self.module = load_module(self.path)
        self.shapes: dict[str, dict[str, Any]] = {}

    def _set(self, overrides: dict[str, Any]) -> dict[str, Any]:
        saved = {k: getattr(self.module, k) for k in overrides}
        for k, v in overrides.items():
            setattr(self.module, k, v)
        return saved

    def reference(self, overrides: dict[str, Any], init_seed: int, dtype: str | None = None) -> dict[str, Any]:
        key = json.dumps([overrides, init_seed, dtype], sort_keys=True, default=str)
        if key not in self.shapes:
            saved = self._set(overrides)
            try:
                model = construct(self.module.Model, list(self.module.get_init_inputs()), init_seed, self.device,
                                  dtype=dtype)
            finally:
                self._set(saved)
            self.shapes[key] = {"model": model, "model64": None, "dtype": None}
        return self.shapes[key]

    def inputs(self, overrides: dict[str, Any], seed: int, dtype: str | None = None) -> list:
        saved = self._set(overrides)
        try:
            return make_inputs(self.module, seed, self.device, dtype)
        finally:
            self._set(saved)


class PairJudgement:
    """The judgement of one pair's outputs, built up as the worker hands them over."""

    def __init__(self, judge: "Judge", problem: ProblemState, seeds: dict[str, Any], tolerances: dict[str, Any],
                 run: str = "fp32", sample: int | None = None):
        """`sample`: judge a secret sample of this many timed calls (TimedSample); None: every
        timed output handed over, as it comes."""
        self.judge, self.problem, self.seeds = judge, problem, seeds
        self.sample = TimedSample(sample, judge.spill_dir, device_bytes=judge.cache.budget // 2) \
            if sample is not None else None
        self.slot = 0         # where the sample keeps the timed output being taken (passes)
        self.run, self.dtype = run, casts(run)  # the run's precision; the dtype it casts to (None: none)
        self.tol = {name: SimpleNamespace(**t) for name, t in tolerances.items()}
        self.tolerances = tolerances
        self.results: list[dict[str, Any]] = []
        self.weights: list[str] = []
        self.precision: str | None = None
        self.explained = False
        self.truth_s = 0.0
        self.truth_cached = 0
        self.truth_computed = 0
        self.screened = 0     # timed outputs judged by the screen, without a float64 truth of their own
        self.on_host = 0      # outputs compared on the host: the device had no room (compare)

    def _overrides(self, shape_index: int) -> dict[str, Any]:
        return dict(self.seeds["shapes"][shape_index]["overrides"])

    def take_output(self, entry: dict[str, Any], payload: bytes, device: str) -> Taken:
        """While the worker is stopped: copy its output into our own memory, and check that it is
        a plain new tensor on the right device and that the inputs are as they were generated."""
        taken = Taken(entry)
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
            fresh = self.problem.inputs(self._overrides(entry["shape"]), entry["seed"], self.dtype)
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

    def _key(self, shape_index: int, seed: int) -> tuple:
        """What ground truth (and the rounding errors) of one output depend on."""
        return (self.problem.sha256, json.dumps(self._overrides(shape_index), sort_keys=True, default=str),
                self.seeds["init"], seed, self.run)

    def truth(self, shape_index: int, seed: int, inputs: list) -> tuple[torch.Tensor, str, torch.dtype]:
        overrides = self._overrides(shape_index)
        ref = self.problem.reference(overrides, self.seeds["init"], self.dtype)
        if ref["dtype"] is None:
            ref["dtype"] = ref["model"](*inputs).dtype
        key = self._key(shape_index, seed)
        cached = self.judge.cache.get(key)
        if cached is not None:
            self.truth_cached += 1
            return cached[0], cached[1], ref["dtype"]
        start = time.monotonic()
        if ref["model64"] is None:
            try:
                ref["model64"] = float64_copy(ref["model"], self.problem.device)
            except (RuntimeError, TypeError, NotImplementedError):
                ref["model64"] = False
        try:
            truth, precision = ground_truth(ref["model"], inputs, self.problem.device, ref["model64"] or None)
        except Exception as exc:  # out of memory (on the CPU: a failed allocation): once more without the cache
            if not allocation_failed(exc):
                raise
            self.judge.cache.clear()
            self.judge.release(force=True)
            truth, precision = ground_truth(ref["model"], inputs, self.problem.device, ref["model64"] or None)
        self.judge.sync()
        self.truth_s += time.monotonic() - start
        self.truth_computed += 1
        self.judge.cache.put(key, (truth, precision))
        return truth, precision, ref["dtype"]

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
            taken.inputs = self.problem.inputs(self._overrides(taken.entry["shape"]), taken.entry["seed"], self.dtype)
            if not self.screen(taken):
                self.judge_output(taken)
            taken.inputs = []
            if self.sample.on_host:
                taken.out = None  # back on the device for its judgement only
            if not self.results[-1]["ok"]:
                break
        self.sample.release()

    def reference_error(self, entry: dict[str, Any], inputs: list, truth: torch.Tensor) -> None:
        """On a trial whose float64 truth was just computed: the float32 reference's own error on
        it (max |r - truth| and rel L2), kept for the run per output key. The screen's bound for
        a shape is the largest over its trials' seeds."""
        key = self._key(entry["shape"], entry["seed"])
        if key in self.judge.reference_errors:
            return
        start = time.monotonic()
        errors = None
        try:
            model = self.problem.reference(self._overrides(entry["shape"]), self.seeds["init"], self.dtype)["model"]
            r = strict_float32(model, inputs, self.problem.device)
            if (isinstance(r, torch.Tensor) and r.is_floating_point() and tuple(r.shape) == tuple(truth.shape)
                    and bool(torch.isfinite(truth).all()) and bool(torch.isfinite(r).all())):
                max_abs = float((r.to(torch.float64) - truth).abs().max()) if r.numel() else 0.0
                errors = {"max_abs": max_abs, "rel_l2": rel_l2(r, truth)}
            del r
        except (RuntimeError, TypeError, NotImplementedError):
            errors = None
        self.judge.sync()
        self.truth_s += time.monotonic() - start
        self.judge.reference_errors[key] = errors

    def screen_bound(self, shape_index: int) -> dict[str, Any] | None:
        """The float32 reference's error bound on a new input of this shape: SCREEN_FACTOR times
        the largest it made on the shape's trials (at least SCREEN_MIN_TRIALS of them, none of
        them unmeasurable); None where there is no such bound."""
        shape_key = self._key(shape_index, 0)[:3]
        errors = [e for k, e in self.judge.reference_errors.items() if k[:3] == shape_key and k[4] == self.run]
        if len(errors) < SCREEN_MIN_TRIALS or any(e is None for e in errors):
            return None
        return {"max_abs": SCREEN_FACTOR * max(e["max_abs"] for e in errors),
                "rel_l2": SCREEN_FACTOR * max(e["rel_l2"] for e in errors), "trials": len(errors)}

    def screen(self, taken: Taken) -> bool:
        """Judge a kept timed output (or the profiled call's) without a float64 truth of its own
        where that cannot change its verdict: against the reference run in float32 (TF32 off) on
        the same inputs, r, whose own error on them is at most d elementwise and e in rel L2
        (screen_bound). Class by class, strictest first, as classify goes: within the class's
        tolerance narrowed by that error (atol - d(1 + rtol), (rel_l2 - e) / (1 + e)) of r, the
        output is within the class of the float64 truth (triangle inequality): settled, in that
        class. Outside the tolerance widened by it (atol + d(1 + rtol), (rel_l2 + e) / (1 - e)),
        it is outside the class of the truth too: on to the next class. In between, or for a
        class whose bound is not known yet (the tf32 class's, set from rounding errors kept per
        shape only for outputs of a million elements or more), or once every class has failed,
        the output goes to judge_output and its own float64 truth, which also explains a failure.
        Returns whether it settled the output."""
        entry = taken.entry
        if taken.problem or self.precision != "float64" or not self.tol:
            return False
        bound = self.screen_bound(entry["shape"])
        ref = self.problem.reference(self._overrides(entry["shape"]), self.seeds["init"], self.dtype)
        if bound is None or ref["dtype"] is None:
            return False
        d, e = bound["max_abs"], bound["rel_l2"]
        start = time.monotonic()
        settled = None
        try:
            r = strict_float32(ref["model"], taken.inputs, self.problem.device)
            if isinstance(r, torch.Tensor) and bool(torch.isfinite(r).all()):
                settled = self._screen_classes(taken.out, r, ref["dtype"], entry, d, e)
        except Exception as exc:  # noqa: BLE001 - out of memory: the output goes to judge_output
            if not allocation_failed(exc):
                raise
        r = None
        self.judge.sync()
        self.truth_s += time.monotonic() - start
        if settled is None:
            return False
        name, narrowed = settled
        self.screened += 1
        self.results.append({"ok": True, "precision": name, "kind": entry["kind"], "shape": entry["shape"],
                             "trial": entry["trial"], "seed": entry["seed"], "overrides": self._overrides(entry["shape"]),
                             "message": f"within the {name} class: against the float32 reference (TF32 off) within "
                                        f"atol {narrowed.atol:.3g}, rel L2 {narrowed.rel_l2:.3g}, that reference's "
                                        f"own error bounded by {d:.3g} and {e:.3g}",
                             "screened": {"against": "float32_strict", "reference_max_abs": d,
                                          "reference_rel_l2": e, "trials": bound["trials"]}})
        return True

    def _screen_classes(self, out: torch.Tensor, r: torch.Tensor, dtype, entry: dict[str, Any], d: float,
                        e: float) -> tuple[str, Any] | None:
        """(class, narrowed tolerance) the screen settles `out` in, or None (see screen)."""
        for name, tol in self.tol.items():
            if getattr(tol, "between", None) is not None:
                key = self._key(entry["shape"], None)
                if r.numel() < SHARED_ROUNDING_NUMEL or key not in self.judge.rounding:
                    return None
                tol = rounded_tolerance(tol, self.judge.rounding[key], self._rounded_floor(name))
            narrowed = SimpleNamespace(atol=tol.atol - d * (1 + tol.rtol), rtol=tol.rtol,
                                       rel_l2=(tol.rel_l2 - e) / (1 + e))
            if (narrowed.atol >= tol.atol / 2 and narrowed.rel_l2 >= tol.rel_l2 / 2
                    and compare(out, r, dtype, narrowed, explain=False).ok):
                return name, narrowed
            widened = SimpleNamespace(atol=tol.atol + d * (1 + tol.rtol), rtol=tol.rtol,
                                      rel_l2=(tol.rel_l2 + e) / (1 - e) if e < 1 else float("inf"))
            if compare(out, r, dtype, widened, explain=False).ok:
                return None  # within the uncertainty of r: its own truth decides
        return None

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
            computed = self.truth_computed
            truth, self.precision, expected_dtype = self.truth(entry["shape"], entry["seed"], taken.inputs)
            if entry["kind"] == "trial" and self.precision == "float64" and self.truth_computed > computed:
                self.reference_error(entry, taken.inputs, truth)
            bounds: dict[str, Any] = {}
            tolerances = {name: (functools.partial(self.rounded, name, entry, taken.inputs, truth, bounds)
                                 if getattr(tol, "between", None) is not None else tol)
                          for name, tol in self.tol.items()}
            cls, comparison = self.compare(taken.out, truth, expected_dtype, tolerances)
            result = {**comparison.to_dict(), "ok": cls is not None, "precision": cls}
            for name, tol in bounds.items():
                result.setdefault("rel_l2_bounds", {})[name] = tol.rel_l2
                if getattr(tol, "rounding", None):
                    result["rounding"] = tol.rounding
                    if cls is None and name == list(self.tol)[-1]:
                        result["message"] += (f"; the {name} class's rel L2 bound for this output, {tol.rel_l2:.3g}, "
                                              f"lies between the reference's own error with its operands rounded "
                                              f"to TF32 ({tol.rounding['tf32']:.2g}) and to bf16 "
                                              f"({tol.rounding['bf16']:.2g}): this error is not TF32 arithmetic's")
            if cls is None and not self.explained and comparison.max_abs_error is not None:
                self.explained = True  # one try per pair: each variant costs a float64 forward
                model = self.problem.reference(self._overrides(entry["shape"]), self.seeds["init"], self.dtype)["model"]
                loosest_tol = list(self.tol.values())[-1]
                explanation = explain_by_variants(model, taken.inputs, taken.out, self.problem.device, loosest_tol)
                if explanation:
                    result["message"] = f"{explanation}; {result['message']}"
        result.update(kind=entry["kind"], shape=entry["shape"], trial=entry["trial"], seed=entry["seed"],
                      overrides=self._overrides(entry["shape"]))
        self.results.append(result)
        return result

    def rounded(self, name: str, entry: dict[str, Any], inputs: list, truth: torch.Tensor,
                bounds: dict[str, Any]):
        """Class `name`'s tolerance for this output, its relative-L2 bound set from the reference's
        own rounding errors (numerics.rounding_errors), computed once in a run per output's key, or
        per shape where outputs have a million elements or more (the errors of such an output are
        those of its shape's input distribution to a fraction of a percent, whatever the seed)."""
        key = self._key(entry["shape"], entry["seed"] if truth.numel() < SHARED_ROUNDING_NUMEL else None)
        if key not in self.judge.rounding:
            start = time.monotonic()
            model = self.problem.reference(self._overrides(entry["shape"]), self.seeds["init"], self.dtype)["model"]
            self.judge.rounding[key] = rounding_errors(model, inputs, truth, self.problem.device, entry["seed"])
            self.judge.sync()
            self.truth_s += time.monotonic() - start
        bounds[name] = rounded_tolerance(self.tol[name], self.judge.rounding[key], self._rounded_floor(name))
        return bounds[name]

    def _rounded_floor(self, name: str) -> float:
        """The least rel L2 bound of a class set from rounding errors: the fp32 class's."""
        return self.tol["fp32"].rel_l2 if "fp32" in self.tol and name != "fp32" else 0.0

    def take_state(self, entry: dict[str, Any], payload: bytes, device: str) -> None:
        """ModelNew's parameters against the reference's, after matched-seed construction."""
        reference = self.problem.reference({**self._overrides(0)}, self.seeds["init"], self.dtype)["model"]
        expected = {k: v.detach() for k, v in reference.state_dict().items()}
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
        failed = [r for r in results if not r["ok"]]
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
            "checked": {"trials": sum(r["kind"] == "trial" for r in results),
                        "profiled": sum(r["kind"] == "profile" for r in results),
                        "timed": sum(r["kind"] == "timed" for r in results), "shapes": len(self.seeds["shapes"]),
                        **({"timed_calls": self.sample.seen,
                            "timed_rule": f"a uniform sample of {self.sample.k} of the timed calls, drawn in secret "
                                          f"by the lane (every timed call handed over alike)"}
                           if self.sample is not None else
                           {"timed_rule": "the last checks.timed_output_checks calls after the timed ones"})},
            "truth": {"computed": self.truth_computed, "reused": self.truth_cached, "screened": self.screened,
                      **({"compared_on_host": self.on_host} if self.on_host else {})},
            "outputs": results,
        }


class Judge:
    """A lane's problems and ground-truth cache, for the whole run."""

    def __init__(self, device: str, cache_bytes: int, spill_dir: Path | None = None):
        """`spill_dir`: where a CPU lane keeps a secret sample's outputs (TimedSample)."""
        self.device = device
        self.spill_dir = spill_dir
        self.cache = TruthCache(cache_bytes)
        self.rounding: dict[tuple, dict[str, float] | None] = {}  # output key -> numerics.rounding_errors
        self.reference_errors: dict[tuple, dict[str, float] | None] = {}  # trial key -> PairJudgement.reference_error
        self.problems: dict[str, ProblemState] = {}

    def problem(self, path: Path, sha256: str) -> ProblemState:
        if sha256 not in self.problems:
            self.problems[sha256] = ProblemState(path, sha256, self.device)
        return self.problems[sha256]

    def begin(self, problem: ProblemState, seeds: dict[str, Any], tolerances: dict[str, Any],
              run: str = "fp32", sample: int | None = None) -> PairJudgement:
        return PairJudgement(self, problem, seeds, tolerances, run, sample)

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
