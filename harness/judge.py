"""The trusted side of correctness. Runs in its own process, which never imports solution code:

    python -m harness.judge REQUEST.json

It rebuilds the reference with the matched seed, regenerates each trial's inputs from its seed,
computes ground truth (numerics.ground_truth), loads the solution's saved outputs with
`weights_only=True` (no code runs on load) and compares (numerics.compare). It writes one JSON
report.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from types import SimpleNamespace

from .guards import tensor_digest
from .isolation import die_with_parent
from .numerics import classify, diagnose_parameters, explain_by_variants, ground_truth
from .problems import construct, load_module, make_inputs


def _load(path: str):
    import torch
    try:
        return torch.load(path, map_location="cpu", weights_only=True), None
    except Exception as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {exc}"
    finally:
        Path(path).unlink(missing_ok=True)


def _output_problem(entry: dict[str, Any], device: str) -> tuple[Any, str | None]:
    """The saved output, or why it cannot be accepted (not a plain tensor, wrong device, alias)."""
    import torch
    if entry.get("path") is None:
        return None, f"forward returned {entry.get('type')}, expected a torch.Tensor"
    out, error = _load(entry["path"])
    if error:
        return None, f"output could not be loaded as a plain tensor ({error})"
    if not entry.get("plain", True) or type(out) is not torch.Tensor:
        return None, f"output is a {entry.get('type')}, expected a plain torch.Tensor"
    if entry.get("device") and torch.device(entry["device"]).type != torch.device(device).type:
        return None, f"output is on {entry['device']}, expected {device}"
    if entry.get("alias") is not None:
        return None, f"output shares memory with input {entry['alias']} (it must be a new tensor)"
    return out, None


def _inputs_changed(entry: dict[str, Any], fresh: list) -> str | None:
    for i, (after, before) in enumerate(zip(entry.get("input_digests") or [], fresh)):
        if after is not None and after != tensor_digest(before):
            return f"input {i} was modified by the call (forward must not write to its inputs)"
    return None


def judge(req: dict[str, Any]) -> dict[str, Any]:
    import torch
    device = req["device"]
    tolerances = {name: SimpleNamespace(**tol) for name, tol in req["tolerances"].items()}
    problem = load_module(Path(req["problem_path"]))
    shapes = req["seeds"]["shapes"]
    originals = {k: getattr(problem, k) for shape in shapes for k in shape["overrides"]}
    results, precision, weights, explained = [], None, [], False
    truth_s = 0.0
    with torch.no_grad():
        for shape_index, shape in enumerate(shapes):
            for key, value in {**originals, **shape["overrides"]}.items():
                setattr(problem, key, value)
            model = construct(problem.Model, list(problem.get_init_inputs()), req["seeds"]["init"], device)
            if shape_index == 0 and req.get("state_path"):
                state, error = _load(req["state_path"])
                reference_state = {k: v.to("cpu") for k, v in model.state_dict().items()}
                weights = ([f"ModelNew's parameters could not be read ({error})"] if error
                           else diagnose_parameters(state, reference_state, model))
            expected_dtype = None
            for entry in [e for e in req["outputs"] if e["shape"] == shape_index]:
                inputs = make_inputs(problem, entry["seed"], device)
                if expected_dtype is None:
                    expected_dtype = model(*inputs).dtype
                start = time.monotonic()
                truth, precision = ground_truth(model, inputs, device)
                if device == "cuda":
                    torch.cuda.synchronize()
                truth_s += time.monotonic() - start
                out, problem_text = _output_problem(entry, device)
                problem_text = problem_text or _inputs_changed(entry, inputs)
                if problem_text:
                    result = {"ok": False, "precision": None, "message": problem_text}
                else:
                    cls, comparison = classify(out, truth, expected_dtype, tolerances)
                    result = {**comparison.to_dict(), "ok": cls is not None, "precision": cls}
                    if cls is None and not explained and comparison.max_abs_error is not None:
                        explained = True  # one try per pair: each variant costs a float64 forward
                        explanation = explain_by_variants(model, inputs, out, device, tolerances["tf32"])
                        if explanation:
                            result["message"] = f"{explanation}; {result['message']}"
                result.update(kind=entry["kind"], shape=shape_index, trial=entry["trial"], seed=entry["seed"],
                              overrides=shape["overrides"])
                results.append(result)
                del truth, out, inputs
                if device == "cuda":
                    torch.cuda.empty_cache()
    failed = [r for r in results if not r["ok"]]
    classes = [r["precision"] for r in results]
    overall = None if failed or not results else ("tf32" if "tf32" in classes else "fp32")
    numeric = [r for r in results if r.get("max_abs_error") is not None]
    return {
        "ok": overall is not None,
        "precision": overall,
        "message": failed[0]["message"] if failed else (min(numeric, key=lambda r: r["margin"])["message"]
                                                         if numeric else "no outputs"),
        "failed": failed[0] if failed else None,
        "weight_diagnostics": weights,
        "ground_truth": precision,
        "tolerances": req["tolerances"],
        "max_abs_error": max((r["max_abs_error"] for r in numeric), default=None),
        "max_rel_error": max((r["max_rel_error"] for r in numeric), default=None),
        "rel_l2_error": max((r["rel_l2_error"] for r in numeric), default=None),
        "min_margin": min((r["margin"] for r in numeric), default=None),
        "checked": {"trials": sum(r["kind"] == "trial" for r in results),
                    "timed": sum(r["kind"] == "timed" for r in results), "shapes": len(shapes)},
        "outputs": results,
        "truth_s": truth_s,
    }


def main(argv: list[str]) -> None:
    die_with_parent()
    req = json.loads(Path(argv[1]).read_text())
    try:
        if req["device"] == "cuda":
            import torch
            torch.cuda.set_device(0)
        report = judge(req)
    except BaseException as exc:  # noqa: BLE001
        report = {"error": f"{type(exc).__name__}: {exc}",
                  "detail": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))}
    Path(req["report_path"]).write_text(json.dumps(report, default=str))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
