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
import traceback
from pathlib import Path
from typing import Any

from .numerics import compare, ground_truth
from .problems import construct, load_module, make_inputs


def _load_output(entry: dict[str, Any]):
    import torch
    if entry.get("path") is None:
        return None, f"forward returned {entry.get('type')}, expected a torch.Tensor"
    try:
        out = torch.load(entry["path"], map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001
        return None, f"output could not be loaded as a plain tensor ({type(exc).__name__}: {exc})"
    finally:
        Path(entry["path"]).unlink(missing_ok=True)
    if type(out) is not torch.Tensor:
        return None, f"output is a {type(out).__name__}, expected a plain torch.Tensor"
    return out, None


def judge(req: dict[str, Any]) -> dict[str, Any]:
    import torch
    device = req["device"]
    tol = req["tolerance"]
    problem = load_module(Path(req["problem_path"]))
    init_inputs = list(problem.get_init_inputs())
    model = construct(problem.Model, init_inputs, req["seeds"]["init"], device)
    trials = []
    precision = None
    expected_dtype = None
    with torch.no_grad():
        for entry in req["outputs"]:
            inputs = make_inputs(problem, entry["seed"], device)
            if expected_dtype is None:
                native = model(*inputs)
                expected_dtype = native.dtype
                del native
            truth, precision = ground_truth(model, inputs, device)
            del inputs
            out, problem_text = _load_output(entry)
            if problem_text:
                result = {"ok": False, "message": problem_text}
            else:
                if entry.get("device") and torch.device(entry["device"]).type != torch.device(device).type:
                    result = {"ok": False, "message": f"output is on {entry['device']}, expected {device}"}
                else:
                    result = compare(out, truth, expected_dtype, tol["atol"], tol["rtol"]).to_dict()
            result.update(trial=entry["trial"], seed=entry["seed"])
            trials.append(result)
            del truth, out
            if device == "cuda":
                torch.cuda.empty_cache()
    failed = [t for t in trials if not t["ok"]]
    worst = max(trials, key=lambda t: t.get("max_abs_error") or 0.0) if trials else {}
    return {
        "ok": bool(trials) and not failed,
        "message": failed[0]["message"] if failed else (worst.get("message") or "no outputs"),
        "failed_trial": failed[0]["trial"] if failed else None,
        "ground_truth": precision,
        "atol": tol["atol"],
        "rtol": tol["rtol"],
        "max_abs_error": max((t.get("max_abs_error") or 0.0 for t in trials), default=None),
        "max_rel_error": max((t.get("max_rel_error") or 0.0 for t in trials), default=None),
        "rel_l2_error": max((t.get("rel_l2_error") or 0.0 for t in trials), default=None),
        "trials": trials,
    }


def main(argv: list[str]) -> None:
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
