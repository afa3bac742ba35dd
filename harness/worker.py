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

import functools
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from .blame import blame, for_solution
from .build import BuildError, InlineMisuse, NeedsCuda, install_hook
from .env import collect
from .events import EventWriter
from .isolation import die_with_parent
from .guards import aliased_input, cpu_op_share, library_share, poison_free_memory, tensor_digest
from .problems import _display, exception_location, load_module, make_inputs, construct
from .results import Status
# Bound before any solution is imported: a solution that patches harness.timing or
# harness.guards afterwards does not change what the worker calls.
from .timing import CudaEventTimer, HostTimer, StoppingRule, sample, summarize

_NO_CUDA_MARKERS = ("Torch not compiled with CUDA enabled", "Found no NVIDIA driver",
                    "No CUDA GPUs are available", "CUDA driver initialization failed")


# CUDA errors a kernel causes, and what they usually mean.
CUDA_ERRORS = (
    ("an illegal memory access was encountered", "illegal memory access",
     "a kernel read or wrote outside its buffers: check index bounds, and that every pointer is a "
     "CUDA tensor of the expected size"),
    ("misaligned address", "misaligned address",
     "a vector access (float2/float4, 16-byte loads) on a pointer not aligned to its size: check "
     "offsets and storage_offset, and that tensors are contiguous"),
    ("unspecified launch failure", "launch failure",
     "the kernel faulted (often an out-of-bounds access) or was killed"),
    ("an illegal instruction was encountered", "illegal instruction", "the kernel hit a trap or an invalid instruction"),
    ("device-side assert triggered", "device-side assert", "an assert in device code failed"),
    ("invalid configuration argument", "invalid launch configuration",
     "grid or block dimensions out of range or zero (more than 1024 threads per block? an empty grid?)"),
    ("too many resources requested for launch", "too many resources for launch",
     "too many registers or too much shared memory per block for this block size"),
    ("invalid device function", "invalid device function", "the kernel was not compiled for this GPU's architecture"),
    ("no kernel image is available", "no kernel image", "the kernel was not compiled for this GPU's architecture"),
)


def cuda_error(text: str) -> tuple[str, str] | None:
    """(short name, explanation) of a CUDA error named in an exception text."""
    lowered = text.lower()
    for needle, name, meaning in CUDA_ERRORS:
        if needle in lowered:
            return name, meaning
    return None


class Failure(Exception):
    def __init__(self, status: Status, message: str, detail: str = "", **fields: Any):
        self.status, self.message, self.detail, self.fields = status, message, detail, fields
        super().__init__(message)


def classify(exc: BaseException, phase: str, solution_path: Path, device: str,
             problem_path: Path | None = None) -> Failure:
    """Map an exception in `phase` to a status and one actionable line. An exception the harness
    or the problem file raised itself (harness/blame.py) is a harness_error naming that frame,
    never the solution's failure."""
    detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if isinstance(exc, Failure):
        return exc
    if isinstance(exc, NeedsCuda):
        return Failure(Status.SKIPPED, f"needs a CUDA device: {exc}")
    if isinstance(exc, BuildError):
        return Failure(Status.BUILD_ERROR, str(exc), exc.log)
    if isinstance(exc, InlineMisuse):
        return Failure(Status.BUILD_ERROR, str(exc), detail)
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
    named = cuda_error(text)
    if named:  # a kernel's fault surfaces at the next sync, often in the harness's own code
        return Failure(Status.RUNTIME_ERROR, f"{phase}: CUDA error: {named[0]} ({named[1]}), raised at {where}",
                       detail, cuda_error=named[0])
    owner = blame(exc, problem_path)
    if owner.owner == "harness":
        return Failure(Status.HARNESS_ERROR, f"harness error in phase '{phase}' (not the solution's fault): "
                       f"{first_line} at {owner.where or 'an unknown place'}", detail)
    if owner.owner == "problem":
        return Failure(Status.HARNESS_ERROR, f"the problem's reference code failed in phase '{phase}' (not the "
                       f"solution's fault): {first_line} at {owner.where}", detail)
    return Failure(Status.RUNTIME_ERROR, f"{phase}: {first_line} at {where}", detail)


def argument_notes(args: list, device: str) -> list[str]:
    """What looks wrong about the tensors passed to an extension function."""
    import torch
    notes = []
    for i, arg in enumerate(args):
        if not isinstance(arg, torch.Tensor):
            continue
        what = f"argument {i} ({arg.dtype} {list(arg.shape)})"
        if device == "cuda" and arg.device.type != "cuda":
            notes.append(f"{what} is a {arg.device.type.upper()} tensor: CUDA code that dereferences it reads "
                         f"host memory (use None / an empty CUDA tensor, or check has_value / numel in C++)")
        elif arg.numel() and not arg.is_contiguous():
            notes.append(f"{what} is not contiguous (stride {list(arg.stride())}): call .contiguous() "
                         f"or index with its strides")
        elif arg.numel() and arg.data_ptr() % 16:
            notes.append(f"{what} is not 16-byte aligned (storage offset {arg.storage_offset()})")
    return notes


class Worker:
    def __init__(self, request: dict[str, Any]):
        self.req = request
        self.events = EventWriter(Path(request["events_path"]))
        self.solution_path = Path(request["solution_path"])
        self.device = request["device"]
        self.out_dir = Path(request["work_dir"])
        self.phase = "setup"
        self.saved = 0
        # seconds the device spent in calls, by kind (phases.gpu_s; harness/results.py PHASES)
        self.gpu = {"reference_s": 0.0, "checked_s": 0.0, "warmup_s": 0.0, "timed_s": 0.0, "profile_s": 0.0}
        self.hint_bytes = 0   # largest input/output seen: sizes the poisoned block
        self.last_call: dict[str, Any] | None = None  # diagnosis: the last extension call

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
        install_hook(Path(self.req["cache_dir"]), self.req["arch"], self.device == "cuda", self.on_build,
                     compile_only=self.req["mode"] == "compile", display=_display,
                     wrap=self.recording if self.req["mode"] == "diagnose" else None)
        self.set_phase("load")
        sys.path.insert(0, str(self.solution_path.parent))
        with torch.no_grad():
            module = for_solution(load_module, self.solution_path, prefix="kb_solution")
        model_new = getattr(module, "ModelNew", None)
        if model_new is None:
            raise Failure(Status.LOAD_ERROR, f"{self.solution_path}: defines no ModelNew")
        return model_new

    def run_build(self) -> None:
        self.load_solution()

    def run_compile(self) -> None:
        """Compile-only: the solution's extensions are compiled, not linked or loaded."""
        self.load_solution()

    # -- diagnosis of CUDA errors ----------------------------------------------------------------
    def recording(self, module, name: str):
        """Wrap an extension module so every call is recorded (function, caller line, notes on
        its tensor arguments) and followed by a device sync: a kernel fault then surfaces in the
        call that launched it."""
        worker = self

        class Recorded:
            def __getattr__(self, item: str):
                value = getattr(module, item)
                if item.startswith("__") or not callable(value):
                    return value

                def call(*args, **kwargs):
                    import torch
                    frame = sys._getframe(1)
                    worker.last_call = {"function": f"{name}.{item}",
                                        "where": f"{_display(Path(frame.f_code.co_filename))}:{frame.f_lineno}",
                                        "notes": argument_notes(list(args) + list(kwargs.values()), worker.device),
                                        "inside": True}
                    result = for_solution(value, *args, **kwargs)
                    if worker.device == "cuda":
                        torch.cuda.synchronize()
                    worker.last_call["inside"] = False
                    return result
                return call
        return Recorded()

    def run_diagnose(self) -> None:
        """Re-run construction and one correctness trial per shape (with CUDA_LAUNCH_BLOCKING=1
        set by the caller) to attribute a CUDA error to the extension call that caused it."""
        import torch
        seeds = self.req["seeds"]
        problem = load_module(Path(self.req["problem_path"]))
        self.last_call = None
        model_new = self.load_solution()
        try:
            for shape_index, shape in enumerate(seeds["shapes"]):
                for key, value in shape["overrides"].items():
                    setattr(problem, key, value)
                self.set_phase("construct", shape=shape_index)
                solution = construct(model_new, list(problem.get_init_inputs()), seeds["init"], self.device,
                                     call=for_solution)
                self.set_phase("correctness", shape=shape_index)
                with torch.no_grad():
                    for_solution(solution, *make_inputs(problem, shape["trials"][0], self.device))
                    self.sync()
        except Exception as exc:
            self.events.emit("diagnosis", reproduced=True, error=f"{type(exc).__name__}: {exc}".splitlines()[0],
                             where=exception_location(exc, self.solution_path), call=self.last_call)
            raise
        self.events.emit("diagnosis", reproduced=False, call=self.last_call)

    # -- timing ---------------------------------------------------------------------------
    def sync(self) -> None:
        import torch
        if self.device == "cuda":
            torch.cuda.synchronize()

    def time_model(self, model, problem, checked_calls: int = 0, role: str = "solution") -> tuple[dict, list]:
        """Time `model` on inputs refreshed IN PLACE before every call (untimed) from a pool of
        fresh input sets, so a cache keyed on pointer or shape returns stale results. The last
        `checked_calls` timed calls run on poisoned memory and their outputs are returned
        (with the pool seed and the inputs after the call) for the judge."""
        import torch
        t = self.req["timing"]
        seeds = self.req["seeds"]["timing"]
        pool = [make_inputs(problem, seed, self.device) for seed in seeds]
        live = [x.clone() if isinstance(x, torch.Tensor) else x for x in pool[0]]
        state = {"index": 0, "out": None}

        def refresh() -> None:
            state["index"] = (state["index"] + 1) % len(pool)
            for dst, src in zip(live, pool[state["index"]]):
                if isinstance(dst, torch.Tensor):
                    dst.copy_(src)

        def call() -> None:
            state["out"] = None
            state["out"] = model(*live)

        rule = StoppingRule(t["min_samples"], t["max_samples"], t["min_time_s"], t["max_time_s"])
        timer = CudaEventTimer(self.device, t["flush_l2"]) if self.device == "cuda" else HostTimer()
        warmup_ms: list[float] = []
        samples = sample(call, timer, rule, t["warmup"], before=refresh, warmup_ms=warmup_ms)
        if role == "reference":
            self.gpu["reference_s"] += (sum(samples) + sum(warmup_ms)) / 1e3
        else:
            self.gpu["timed_s"] += sum(samples) / 1e3
            self.gpu["warmup_s"] += sum(warmup_ms) / 1e3
        checked = []
        for _ in range(checked_calls):
            refresh()
            if self.req["checks"]["poison"]:
                state["out"] = None
                poison_free_memory(self.device, self.hint_bytes)
            samples.append(timer(call))
            self.gpu["checked_s"] += samples[-1] / 1e3
            checked.append({"seed": seeds[state["index"]], "out": state["out"],
                            "alias": aliased_input(state["out"], live),
                            "inputs": [tensor_digest(x) for x in live]})
        stats = summarize(samples, timer.name).__dict__
        if isinstance(timer, CudaEventTimer):
            walls = sorted(timer.wall_ms)
            stats["wall_median_ms"] = walls[len(walls) // 2]
        return stats, checked

    def time_reference(self, problem, init_inputs) -> None:
        import torch
        seeds = self.req["seeds"]
        reference = construct(problem.Model, init_inputs, seeds["init"], self.device)
        stats, _ = self.time_model(reference, problem, role="reference")
        self.events.emit("timing", role="reference", stats=stats)
        if self.device == "cuda":  # the strict-fp32 baseline: TF32 disabled everywhere
            saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
            try:
                stats, _ = self.time_model(reference, problem, role="reference")
            finally:
                torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
        self.events.emit("timing", role="reference_fp32", stats=stats)
        out = reference(*make_inputs(problem, seeds["timing"][0], self.device))
        self.hint_bytes = max(self.hint_bytes, out.numel() * out.element_size())

    # -- outputs ----------------------------------------------------------------------------
    def save_output(self, out: Any, inputs: list, alias: int | None = None, **fields: Any) -> None:
        """Save the output, and digests of the inputs as they are after the call, for the judge.
        `inputs` may be tensors or their digests (already taken)."""
        import torch
        self.saved += 1
        meta: dict[str, Any] = {"type": type(out).__name__, "plain": type(out) is torch.Tensor,
                                "device": None, "path": None,
                                "alias": alias if alias is not None else aliased_input(out, inputs)}
        if isinstance(out, torch.Tensor):
            path = self.out_dir / f"out_{self.saved}.pt"
            torch.save(out.detach().to("cpu", copy=True), path)
            meta.update(device=str(out.device), path=str(path))
            self.hint_bytes = max(self.hint_bytes, out.numel() * out.element_size())
        digests = [x if isinstance(x, str) else tensor_digest(x) if isinstance(x, torch.Tensor) else None
                   for x in inputs]
        self.events.emit("output", **fields, **meta, input_digests=digests)

    def save_state(self, model) -> None:
        import torch
        state = {k: v.detach().to("cpu", copy=True) for k, v in for_solution(model.state_dict).items()}
        path = self.out_dir / "state.pt"
        torch.save(state, path)
        self.events.emit("state", path=str(path))

    def profile(self, model, problem) -> None:
        """Profiled calls: which kernels (GPU) or ATen ops (CPU) did the work. On the GPU the share
        is a ratio of kernel times, so one call settles it; on the CPU it is a share of the call's
        wall time, which one preempted call can halve, so it is the median of 5 calls."""
        from torch.profiler import ProfilerActivity, profile
        inputs = make_inputs(problem, self.req["seeds"]["timing"][0], self.device)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device == "cuda" else [])
        summaries = []
        for _ in range(1 if self.device == "cuda" else 5):
            with profile(activities=activities) as prof:
                start = time.perf_counter()
                model(*inputs)
                self.sync()
                wall_us = (time.perf_counter() - start) * 1e6
            self.gpu["profile_s"] += wall_us / 1e6
            if self.device == "cuda":
                kernels = [(e.name, float(getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0)))
                           for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA")]
                summaries.append(library_share(kernels))
            else:
                ops = [(e.name, float(e.self_cpu_time_total)) for e in prof.events()]
                summaries.append(cpu_op_share(ops, wall_us))
        summary = sorted(summaries, key=lambda s: s["share"])[len(summaries) // 2]
        self.events.emit("profile", **summary)

    # -- the evaluation -----------------------------------------------------------------------
    def run_eval(self) -> None:
        import torch
        seeds = self.req["seeds"]
        problem = load_module(Path(self.req["problem_path"]))
        originals = {k: getattr(problem, k) for shape in seeds["shapes"] for k in shape["overrides"]}
        self.events.emit("env", env=collect(self.device))

        self.set_phase("reference")
        with torch.no_grad():
            self.time_reference(problem, list(problem.get_init_inputs()))
        self.empty_cache()

        model_new = self.load_solution()
        benchmark_model = None
        for shape_index, shape in enumerate(seeds["shapes"]):
            for key, value in {**originals, **shape["overrides"]}.items():
                setattr(problem, key, value)
            self.set_phase("construct", shape=shape_index)
            solution = construct(model_new, list(problem.get_init_inputs()), seeds["init"], self.device,
                                 call=for_solution)
            if shape_index == 0:
                self.save_state(solution)
            self.set_phase("correctness", shape=shape_index)
            with torch.no_grad():
                for trial, seed in enumerate(shape["trials"]):
                    inputs = make_inputs(problem, seed, self.device)
                    if self.req["checks"]["poison"]:
                        poison_free_memory(self.device, self.hint_bytes)
                    start = time.perf_counter()
                    out = for_solution(solution, *inputs)
                    self.sync()
                    self.gpu["checked_s"] += time.perf_counter() - start
                    self.save_output(out, inputs, kind="trial", shape=shape_index, trial=trial, seed=seed)
                    del out, inputs
            if shape_index == 0:
                benchmark_model = solution
            del solution
        for key, value in originals.items():
            setattr(problem, key, value)

        self.set_phase("timing")
        with torch.no_grad():
            solution = functools.partial(for_solution, benchmark_model)
            stats, checked = self.time_model(solution, problem, self.req["checks"]["timed_output_checks"])
            self.events.emit("timing", role="solution", stats=stats)
            for i, item in enumerate(checked):
                self.save_output(item["out"], item["inputs"], item["alias"], kind="timed", shape=0, trial=i,
                                 seed=item["seed"])
            del checked
            self.set_phase("profile")
            self.profile(solution, problem)
        self.events.emit("gpu_time", **self.gpu)

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
            failure = classify(exc, self.phase, self.solution_path, self.device,
                               Path(self.req["problem_path"]) if self.req.get("problem_path") else None)
            self.events.emit("error", status=failure.status.value, message=failure.message,
                             detail=failure.detail, phase=self.phase, **failure.fields)


def main(argv: list[str]) -> None:
    die_with_parent()
    request = json.loads(Path(argv[1]).read_text())
    Worker(request).main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: solution destructors or a broken CUDA context must not hang us.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
