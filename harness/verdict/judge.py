"""The trusted side of correctness, inside a lane (harness/run/lane.py), which never imports solution
code: the judgement of each output a worker hands over (against.AgainstTruth, numerics.classify)
against what the lane computed itself (truth: the reference per problem and shape, inputs regenerated from their seeds,
float64 ground truth computed once per (problem, shape, seed) and kept while it fits), of its inputs
after the call and of its parameters. The report has the same form for every device.
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from ..isolate.handoff import HandoffError, Imports, overlaps, snapshot
from .against import AgainstTruth
from .numerics import diagnose_parameters
from ..core.precision import casts, loosest
from .asked import checked, never_handed_over, unasked
from .sample import Taken, TimedSample, same_bits
from .screen import screened
from .truth import ProblemState, TruthCache, Truths


class PairJudgement:
    """The judgement of one pair's outputs, built up as the worker hands them over, against what
    `truths` (truth.Truths) computes on the lane's side."""

    def __init__(self, judge: "Judge", problem: ProblemState, seeds: dict[str, Any], tolerances: dict[str, Any],
                 run: str = "fp32", sample: int | None = None, asked: bool = True, noise: bool = False):
        """`sample`: judge a secret sample of this many timed calls (TimedSample); None: every
        timed output handed over, as it comes. `asked` (checks.trial_coverage): only outputs the lane
        asked for are taken, and every trial's must come (asked.py). `noise`: correctness.noise_bound
        (against.AgainstTruth)."""
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
        self.against = AgainstTruth(judge, self.truths, self.tol, noise)
        self.screened = 0     # timed outputs judged by the screen, without a float64 truth of their own
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
        if taken.problem or self.against.precision != "float64" or not self.tol:
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
            result = self.against.result(taken)
        result.update(kind=entry["kind"], shape=entry["shape"], trial=entry["trial"], seed=entry["seed"],
                      overrides=self.truths.overrides(entry["shape"]))
        self.results.append(result)
        return result

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
            "ground_truth": self.against.precision,
            "tolerances": self.tolerances,
            "max_abs_error": max((r["max_abs_error"] for r in numeric), default=None),
            "max_rel_error": max((r["max_rel_error"] for r in numeric), default=None),
            "rel_l2_error": max((r["rel_l2_error"] for r in numeric), default=None),
            "min_margin": min((r["margin"] for r in numeric), default=None),
            "checked": checked(results, self.sample),
            "truth": {"computed": self.truths.computed, "reused": self.truths.cached, "screened": self.screened,
                      **({"compared_on_host": self.against.on_host} if self.against.on_host else {})},
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
              run: str = "fp32", sample: int | None = None, asked: bool = True, noise: bool = False) -> PairJudgement:
        return PairJudgement(self, problem, seeds, tolerances, run, sample, asked, noise)

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
