"""What the lane asked a worker to run, against what the worker says it ran. The worker is the
solution's process, so the kind, shape, trial and seed it gives an output are its word: an output
is taken only where they are one the lane asked for (`unasked`), and a trial whose output never
came fails the pair (`unjudged_trials`), so that a solution cannot leave out a shape or a trial
(tests/fixtures/solutions/cheat_skip_shapes.py); and what was judged, for the result (`checked`)."""
from __future__ import annotations

from typing import Any


def on_for(checks: dict[str, Any], device: str) -> bool:
    """Whether checks.trial_coverage is on for a run on `device` (auto: on, every device alike)."""
    return checks.get("trial_coverage", "auto") != "off"


def unasked(seeds: dict[str, Any], entry: dict[str, Any]) -> str | None:
    """Why an output's kind, shape, trial and seed are not what the lane asked for (None where they
    are): a trial's seed is its shape's trial's; a timed or profiled call's inputs are the benchmark
    shape's (their seed is not checked here: on CUDA each timed call has its own,
    timing.call_seed(the first timing seed, its number), and every output's inputs are drawn again
    from the seed it came with and compared bit for bit)."""
    kind, shape, trial, seed = (entry.get(k) for k in ("kind", "shape", "trial", "seed"))
    shapes = seeds["shapes"]
    if kind in ("timed", "profile"):
        if shape == 0:
            return None
        return f"a {kind} call's output came as one of shape {shape!r}; the lane times the benchmark shape (0)"
    if kind != "trial":
        return f"an output of kind {kind!r} came from the worker, which the lane does not ask for"
    if not (type(shape) is int and 0 <= shape < len(shapes) and type(trial) is int
            and 0 <= trial < len(shapes[shape]["trials"])):
        return f"an output came as trial {trial!r} of shape {shape!r}, which the lane did not ask for"
    expected = shapes[shape]["trials"][trial]
    if seed != expected:
        return f"trial {trial} of shape {shape} came with seed {seed!r}, not the lane's {expected}"
    return None


def unjudged_trials(seeds: dict[str, Any], results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trials the lane asked for that no result judged (their output never handed over), in order."""
    judged = {(r.get("shape"), r.get("trial")) for r in results if r.get("kind") == "trial"}
    return [{"shape": s, "trial": t, "seed": seed} for s, shape in enumerate(seeds["shapes"])
            for t, seed in enumerate(shape["trials"]) if (s, t) not in judged]


def never_handed_over(seeds: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A failing result for the first trial whose output never came (None where every one did)."""
    missing = unjudged_trials(seeds, results)
    if not missing:
        return None
    first, asked = missing[0], sum(len(shape["trials"]) for shape in seeds["shapes"])
    return {**first, "ok": False, "precision": None, "kind": "trial",
            "overrides": seeds["shapes"][first["shape"]]["overrides"],
            "message": f"its output was never handed over ({len(missing)} of the {asked} trials the lane asked for "
                       f"were not, this the first): every trial's output goes to the lane"}


def checked(results: list[dict[str, Any]], sample) -> dict[str, Any]:
    """What was judged: outputs by kind, the shapes whose trials were, and how the timed calls were
    chosen (`sample`: the secret sample, sample.TimedSample, or None: the last calls after the timed ones)."""
    kinds = [r["kind"] for r in results]
    if sample is not None:
        rule = {"timed_calls": sample.seen,
                "timed_rule": f"a uniform sample of {sample.k} of the timed calls, drawn in secret by the lane "
                              f"(every timed call handed over alike)"}
    else:
        rule = {"timed_rule": "the last checks.timed_output_checks calls after the timed ones"}
    shapes = {r.get("shape") for r in results if r["kind"] == "trial"}
    return {"trials": kinds.count("trial"), "profiled": kinds.count("profile"), "timed": kinds.count("timed"),
            "shapes": len(shapes), **rule, **({"confirm": kinds.count("confirm")} if "confirm" in kinds else {})}
