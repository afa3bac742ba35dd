"""The ONLY module that imports solution code. Runs in its own spawned process:

    python -m harness.worker REQUEST.json

mode "build": install the load_inline hook, import the solution (which builds its extension),
check it defines ModelNew.
mode "eval": time the reference BEFORE the solution is imported (so solution code cannot touch
it), then import, construct with the matched seed, run the correctness trials (outputs are saved
for the trusted judge, never compared here), and time the solution.

Everything is reported as events (harness/events.py); a failure is an "error" event with a
status. The worker never decides correctness.
"""
from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from .build import BuildError, NeedsCuda, install_hook
from .events import EventWriter
from .problems import exception_location, load_module, make_inputs, construct
from .results import Status

_NO_CUDA_MARKERS = ("Torch not compiled with CUDA enabled", "Found no NVIDIA driver",
                    "No CUDA GPUs are available", "CUDA driver initialization failed")


class Failure(Exception):
    def __init__(self, status: Status, message: str, detail: str = ""):
        self.status, self.message, self.detail = status, message, detail
        super().__init__(message)


def classify(exc: BaseException, phase: str, solution_path: Path, device: str) -> Failure:
    """Map an exception in `phase` to a status and one actionable line."""
    detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if isinstance(exc, Failure):
        return exc
    if isinstance(exc, NeedsCuda):
        return Failure(Status.SKIPPED, f"needs a CUDA device: {exc}")
    if isinstance(exc, BuildError):
        return Failure(Status.BUILD_ERROR, str(exc), exc.log)
    text = f"{type(exc).__name__}: {exc}".strip()
    first_line = text.splitlines()[0] if text else type(exc).__name__
    where = exception_location(exc, solution_path)
    if device == "cpu" and any(m in text for m in _NO_CUDA_MARKERS):
        return Failure(Status.SKIPPED, f"needs a CUDA device ({first_line}) at {where}", detail)
    import torch
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in text.lower():
        return Failure(Status.OOM, f"out of memory during {phase}: {first_line} at {where}", detail)
    if phase in ("load", "build"):
        return Failure(Status.LOAD_ERROR, f"{where}: {first_line}", detail)
    return Failure(Status.RUNTIME_ERROR, f"{phase}: {first_line} at {where}", detail)


class Worker:
    def __init__(self, request: dict[str, Any]):
        self.req = request
        self.events = EventWriter(Path(request["events_path"]))
        self.solution_path = Path(request["solution_path"])
        self.device = request["device"]
        self.phase = "setup"

    def set_phase(self, phase: str, **fields: Any) -> None:
        self.phase = phase
        self.events.emit("phase", phase=phase, **fields)

    def on_build(self, info: dict) -> None:
        if info["event"] == "build_start":
            self.set_phase("build", name=info["name"], cached=info["cached"])
        else:
            self.events.emit("build", **{k: v for k, v in info.items() if k != "event"})
            self.set_phase("load")

    def load_solution(self):
        import torch
        install_hook(Path(self.req["cache_dir"]), self.req["arch"], self.device == "cuda", self.on_build)
        self.set_phase("load")
        sys.path.insert(0, str(self.solution_path.parent))
        with torch.no_grad():
            module = load_module(self.solution_path, prefix="kb_solution")
        model_new = getattr(module, "ModelNew", None)
        if model_new is None:
            raise Failure(Status.LOAD_ERROR, f"{self.solution_path}: defines no ModelNew")
        return model_new

    def time_fn(self, fn) -> dict:
        from .timing import CudaEventTimer, HostTimer, StoppingRule, sample, summarize
        t = self.req["timing"]
        rule = StoppingRule(t["min_samples"], t["max_samples"], t["min_time_s"], t["max_time_s"])
        timer = CudaEventTimer(self.device, t["flush_l2"]) if self.device == "cuda" else HostTimer()
        samples = sample(fn, timer, rule, t["warmup"])
        stats = summarize(samples, timer.name).__dict__
        if isinstance(timer, CudaEventTimer):
            stats["wall_median_ms"] = sorted(timer.wall_ms)[len(timer.wall_ms) // 2]
        return stats

    def run_build(self) -> None:
        self.load_solution()

    def run_eval(self) -> None:
        import torch
        from .env import collect
        seeds = self.req["seeds"]
        problem = load_module(Path(self.req["problem_path"]))
        init_inputs = list(problem.get_init_inputs())
        self.events.emit("env", env=collect(self.device))

        self.set_phase("reference")
        with torch.no_grad():
            inputs = make_inputs(problem, seeds["trials"][0], self.device)
            reference = construct(problem.Model, init_inputs, seeds["init"], self.device)
            stats = self.time_fn(lambda: reference(*inputs))
        self.events.emit("timing", role="reference", stats=stats)
        del reference, inputs
        self.empty_cache()

        model_new = self.load_solution()
        self.set_phase("construct")
        solution = construct(model_new, init_inputs, seeds["init"], self.device)

        self.set_phase("correctness")
        out_dir = Path(self.req["work_dir"])
        with torch.no_grad():
            for i, seed in enumerate(seeds["trials"]):
                inputs = make_inputs(problem, seed, self.device)
                out = solution(*inputs)
                if self.device == "cuda":
                    torch.cuda.synchronize()
                self.save_output(out, out_dir / f"out_{i}.pt", trial=i, seed=seed)
                del out, inputs

            self.set_phase("timing")
            inputs = make_inputs(problem, seeds["trials"][0], self.device)
            stats = self.time_fn(lambda: solution(*inputs))
        self.events.emit("timing", role="solution", stats=stats)

    def save_output(self, out: Any, path: Path, **fields: Any) -> None:
        import torch
        if isinstance(out, torch.Tensor):
            torch.save(out.detach().to("cpu").clone(), path)
            meta = {"type": type(out).__name__, "device": str(out.device), "path": str(path)}
        else:
            meta = {"type": type(out).__name__, "device": None, "path": None}
        self.events.emit("output", **fields, **meta)

    def empty_cache(self) -> None:
        import torch
        if self.device == "cuda":
            torch.cuda.empty_cache()

    def main(self) -> None:
        try:
            if self.device == "cuda":
                import torch
                torch.cuda.set_device(0)
            getattr(self, f"run_{self.req['mode']}")()
            self.events.emit("done")
        except BaseException as exc:  # noqa: BLE001 - every path ends in an outcome
            failure = classify(exc, self.phase, self.solution_path, self.device)
            self.events.emit("error", status=failure.status.value, message=failure.message,
                             detail=failure.detail, phase=self.phase)


def main(argv: list[str]) -> None:
    request = json.loads(Path(argv[1]).read_text())
    Worker(request).main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: solution destructors or a broken CUDA context must not hang us.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
