"""What a lane compares a worker's outputs with, on the trusted side (harness/run/lane.py, which never
imports solution code): each problem's reference per shape (`ProblemState`), inputs regenerated
from their seeds, and for one pair (`Truths`) each output's float64 ground truth, the float32
reference's own error on the trials (the bound of judge.PairJudgement.screen) and the reference's
rounding errors (the tolerance of a class set from them). Each is computed once and kept in the
lane's caches (judge.Judge: the ground truth within a byte budget, `TruthCache`), and what that
cost is counted.
"""
from __future__ import annotations

import json
import time
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from .numerics import float64_copy, ground_truth, rel_l2, rounding_errors, strict_float32
from ..core.problems import construct, load_module, make_inputs
from ..isolate.sandbox import allocation_failed


SHARED_ROUNDING_NUMEL = 1 << 20

# The screen of a kept timed output (judge.PairJudgement.screen): the float32 reference's own error
# on a new input is taken to be at most this many times the largest it made on the shape's trials,
# and the screen is used only where that leaves at least half of the strictest class's tolerance.
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
            # "state": its parameters and buffers as constructed (the weight check's), the buffers
            # copied before a call of the run changes one (a BatchNorm in training mode updates
            # its running statistics); parameters are not copied (a forward leaves them as they are)
            buffers = {name for name, _ in model.named_buffers()}
            state = {k: v.detach().clone() if k in buffers else v.detach() for k, v in model.state_dict().items()}
            self.shapes[key] = {"model": model, "model64": None, "dtype": None, "state": state}
        return self.shapes[key]

    def inputs(self, overrides: dict[str, Any], seed: int, dtype: str | None = None) -> list:
        saved = self._set(overrides)
        try:
            return make_inputs(self.module, seed, self.device, dtype)
        finally:
            self._set(saved)


class Truths:
    """One pair's view of the lane's references (its problem, seeds and run precision): the reference
    and the inputs of an output, and what that output is judged against, through the lane's caches
    (`judge`: a judge.Judge's `cache`, `rounding` and `reference_errors`). `seconds` is the time
    spent computing (the device synchronized), `computed` and `cached` count the ground truths."""

    def __init__(self, judge, problem: ProblemState, seeds: dict[str, Any], run: str, dtype: str | None):
        self.judge, self.problem, self.seeds, self.run, self.dtype = judge, problem, seeds, run, dtype
        self.seconds = 0.0
        self.computed = 0
        self.cached = 0

    def overrides(self, shape_index: int) -> dict[str, Any]:
        return dict(self.seeds["shapes"][shape_index]["overrides"])

    def reference(self, shape_index: int) -> dict[str, Any]:
        """The shape's reference: {"model", "model64" (its float64 copy, False where none can be
        made), "dtype" (its output's, once known)}."""
        return self.problem.reference(self.overrides(shape_index), self.seeds["init"], self.dtype)

    def inputs(self, shape_index: int, seed: int) -> list:
        return self.problem.inputs(self.overrides(shape_index), seed, self.dtype)

    def key(self, shape_index: int, seed: int | None) -> tuple:
        """What ground truth (and the rounding errors) of one output depend on."""
        return (self.problem.sha256, json.dumps(self.overrides(shape_index), sort_keys=True, default=str),
                self.seeds["init"], seed, self.run)

    @contextmanager
    def counted(self):
        """The body's time, the device synchronized after it, added to `seconds` (not where it raised)."""
        start = time.monotonic()
        yield
        self.judge.sync()
        self.seconds += time.monotonic() - start

    def truth(self, shape_index: int, seed: int, inputs: list) -> tuple[torch.Tensor, str, torch.dtype]:
        """(the output's ground truth, its precision, the dtype the reference's output has)."""
        ref = self.reference(shape_index)
        if ref["dtype"] is None:
            ref["dtype"] = ref["model"](*inputs).dtype
        key = self.key(shape_index, seed)
        cached = self.judge.cache.get(key)
        if cached is not None:
            self.cached += 1
            return cached[0], cached[1], ref["dtype"]
        with self.counted():
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
        self.computed += 1
        self.judge.cache.put(key, (truth, precision))
        return truth, precision, ref["dtype"]

    def reference_error(self, shape_index: int, seed: int, inputs: list, truth: torch.Tensor) -> None:
        """On a trial whose float64 truth was just computed: the float32 reference's own error on
        it (max |r - truth| and rel L2), kept for the run per output key. The screen's bound for
        a shape is the largest over its trials' seeds."""
        key = self.key(shape_index, seed)
        if key not in self.judge.reference_errors:
            self.judge.reference_errors[key] = self._strict_errors(shape_index, inputs, truth)

    def own_error(self, shape_index: int, seed: int, inputs: list, truth: torch.Tensor) -> float | None:
        """The float32 reference's own rel L2 error on this output: its trial's, where kept, else
        computed now and not kept (the screen's bound is over the shape's trials only)."""
        key = self.key(shape_index, seed)
        errors = (self.judge.reference_errors[key] if key in self.judge.reference_errors
                  else self._strict_errors(shape_index, inputs, truth))
        return errors["rel_l2"] if errors else None

    def _strict_errors(self, shape_index: int, inputs: list, truth: torch.Tensor) -> dict[str, float] | None:
        """{max |r - truth|, rel L2} of r, the reference run in float32 with TF32 off on `inputs`;
        None where r cannot be made or is not finite."""
        errors = None
        with self.counted():
            try:
                r = strict_float32(self.reference(shape_index)["model"], inputs, self.problem.device)
                if (isinstance(r, torch.Tensor) and r.is_floating_point() and tuple(r.shape) == tuple(truth.shape)
                        and bool(torch.isfinite(truth).all()) and bool(torch.isfinite(r).all())):
                    max_abs = float((r.to(torch.float64) - truth).abs().max()) if r.numel() else 0.0
                    errors = {"max_abs": max_abs, "rel_l2": rel_l2(r, truth)}
                del r
            except (RuntimeError, TypeError, NotImplementedError):
                errors = None
        return errors

    def screen_bound(self, shape_index: int) -> dict[str, Any] | None:
        """The float32 reference's error bound on a new input of this shape: SCREEN_FACTOR times
        the largest it made on the shape's trials (at least SCREEN_MIN_TRIALS of them, none of
        them unmeasurable); None where there is no such bound."""
        shape_key = self.key(shape_index, 0)[:3]
        errors = [e for k, e in self.judge.reference_errors.items() if k[:3] == shape_key and k[4] == self.run]
        if len(errors) < SCREEN_MIN_TRIALS or any(e is None for e in errors):
            return None
        return {"max_abs": SCREEN_FACTOR * max(e["max_abs"] for e in errors),
                "rel_l2": SCREEN_FACTOR * max(e["rel_l2"] for e in errors), "trials": len(errors)}

    def rounding(self, shape_index: int, seed: int, inputs: list, truth: torch.Tensor) -> dict[str, float] | None:
        """The reference's own rounding errors on this output (numerics.rounding_errors), computed
        once in a run per output's key, or per shape where outputs have a million elements or more
        (the errors of such an output are those of its shape's input distribution to a fraction of
        a percent, whatever the seed)."""
        key = self.key(shape_index, seed if truth.numel() < SHARED_ROUNDING_NUMEL else None)
        if key not in self.judge.rounding:
            with self.counted():
                self.judge.rounding[key] = rounding_errors(self.reference(shape_index)["model"], inputs, truth,
                                                           self.problem.device, seed)
        return self.judge.rounding[key]

    def shape_rounding(self, shape_index: int, numel: int) -> tuple[bool, dict[str, float] | None]:
        """(whether they are known, the rounding errors) of the shape's outputs of `numel` elements:
        known only where they are kept per shape (a million elements or more) and computed already."""
        key = self.key(shape_index, None)
        if numel < SHARED_ROUNDING_NUMEL or key not in self.judge.rounding:
            return False, None
        return True, self.judge.rounding[key]
