"""The worker, the ONLY process that imports solution code (harness/run/importing.py does it; its
timed calls are harness/run/timed.py). One process per pair, run in one of two ways:

    python -m harness.run.worker --request-fd R --events-fd E
                                            modes build and compile (harness/isolate/isolation.py): import the
                                            solution, which builds its extension; events go to a file
    python -m harness.run.worker --serve FD MARKS   a warm spare of a lane's pool (harness/run/pool.py): torch and the
                                            harness are imported and primed before there is work; on the
                                            channel FD it gets one "run" (modes eval and diagnose; the
                                            block workers' reference and yardstick)

mode "eval": import the solution, construct it with the matched seed for each shape, run the
correctness trials and the timing, the profiled call. Each checked output, the inputs after the
call and ModelNew's parameters are handed to the lane, which is trusted: a CUDA tensor as an IPC
handle (harness/isolate/handoff.py), the worker blocked until the lane has taken its copy. The worker
never decides correctness. Before every call it tells the lane ("call"), which bounds each call.
"""
from __future__ import annotations

import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from ..core.blame import for_solution
from ..isolate.channel import Channel, ChannelClosed, Marks
from ..core.events import EventWriter
from ..compile.failures import classify
from ..verdict.guards import aliased_input, poison_free_memory
from ..isolate.handoff import export
from ..isolate.isolation import die_with_parent
from ..verdict.libshare import measure as measure_library_share
from ..core.precision import casts
from ..core.problems import construct, exception_location, load_module, make_inputs
# Bound before any solution is imported: a solution that patches harness.verdict.timing, harness.verdict.guards
# or torch.cuda.synchronize afterwards does not change what the worker calls (the timing's names are bound
# in harness/run/timed.py, imported here).
from .importing import SolutionImports
from .timed import TimedCalls

_SYNC = getattr(torch._C, "_cuda_synchronize", None)


class ChannelSink:
    """Events (and handoffs, which wait for the lane's "ack") over the lane's channel; timing marks
    (a timed call begins, it returned) over the marks socket, stamped by the kernel as sent
    (harness/isolate/channel.py Marks; the lane's clock: harness/run/clock.py)."""

    def __init__(self, channel: Channel, marks: Marks | None = None):
        self.channel, self.marks = channel, marks

    def mark(self, kind: bytes) -> None:
        if self.marks is not None:
            self.marks.send(kind)

    def emit(self, event: str, **fields: Any) -> None:
        self.channel.send({"event": event, "t": time.monotonic(), **fields})

    def handoff(self, event: str, fields: dict[str, Any], groups: dict[str, list]) -> None:
        """Send tensors (lists of tensors or None, per group) described by handoff.export."""
        payload: list[bytes] = []
        described = {name: [export(t, payload) if isinstance(t, torch.Tensor) else None for t in tensors]
                     for name, tensors in groups.items()}
        self.channel.send({"event": event, "t": time.monotonic(), **fields, **described}, b"".join(payload))
        self._acknowledged(event)

    def exchange(self, event: str, **fields: Any) -> None:
        """Tell the lane and wait until it has done its part (a round of the reference's timing)."""
        self.emit(event, **fields)
        self._acknowledged(event)

    def _acknowledged(self, event: str) -> None:
        got = self.channel.recv()
        if got is None or got[0].get("op") != "ack":
            raise ChannelClosed(f"the lane did not acknowledge the {event}")


def launches_block(cycles: int = 50_000_000) -> bool:
    """Whether this process's kernel launches wait for the kernel (CUDA_LAUNCH_BLOCKING=1 read as
    CUDA started): a spin of some tens of milliseconds returns at once from an asynchronous launch."""
    started = time.perf_counter()
    torch.cuda._sleep(cycles)
    returned = time.perf_counter() - started
    torch.cuda.synchronize()
    return returned > 0.005


class Worker(SolutionImports, TimedCalls):
    """One worker process: its request, its events, the phase and the calls it announces; importing
    the solution (importing.SolutionImports) and timing it (timed.TimedCalls) are its two other parts."""

    def __init__(self, request: dict[str, Any], sink):
        self.req = request
        self.events = sink
        self.solution_path = Path(request["solution_path"])
        self.device = request["device"]
        self.dtype = casts(request.get("precision", "fp32"))  # a half-precision run's dtype; None: as made
        self.phase = "setup"
        self.hint_bytes = int(request.get("hint_bytes", 0))  # largest input/output: sizes the poisoned block
        self.last_call: dict[str, Any] | None = None  # diagnosis: the last extension call
        self.calls = 0
        self.solution_ran = False  # the solution's import began: a CUDA error from here on is its kernels'
        # what harness/isolate/jail.py put in place before this process imported anything (harness/isolate/sandbox.py)
        self.sandbox = json.loads(os.environ.get("KB_SANDBOX_REPORT") or '{"mode": "off", "active": []}')
        # seconds the device spent in calls, by kind (phases.gpu_s; harness/core/results.py PHASES)
        self.gpu = {"checked_s": 0.0, "warmup_s": 0.0, "timed_s": 0.0, "profile_s": 0.0}

    def set_phase(self, phase: str, **fields: Any) -> None:
        self.phase = phase
        self.events.emit("phase", phase=phase, **fields)

    def call(self, what: str, **fields: Any) -> None:
        """Tell the lane a call into the solution starts now (it bounds the call's time)."""
        self.calls += 1
        self.events.emit("call", n=self.calls, what=what, **fields)

    def on_build(self, info: dict) -> None:
        if info["event"] == "build_start":
            self.set_phase("build", name=info["name"], cached=info["cached"])
        else:
            self.events.emit("build", **{k: v for k, v in info.items() if k != "event"})
            self.set_phase("load")

    def run_diagnose(self) -> None:
        """Re-run construction and one correctness trial per shape (with CUDA_LAUNCH_BLOCKING=1
        in the request's env, set before CUDA starts) to attribute a CUDA error to the extension call
        that caused it. Whether the launches did block is reported with the diagnosis."""
        seeds = self.req["seeds"]
        problem = load_module(Path(self.req["problem_path"]))
        self.last_call = None
        blocking = launches_block() if self.device == "cuda" else None
        model_new = self.load_solution(problem)
        try:
            for shape_index, shape in enumerate(seeds["shapes"]):
                for key, value in shape["overrides"].items():
                    setattr(problem, key, value)
                self.set_phase("construct", shape=shape_index)
                solution = construct(model_new, list(problem.get_init_inputs()), seeds["init"], self.device,
                                     call=for_solution, dtype=self.dtype)
                self.set_phase("correctness", shape=shape_index)
                with torch.no_grad():
                    for_solution(solution, *make_inputs(problem, shape["trials"][0], self.device, self.dtype))
                    self.sync()
        except Exception as exc:
            self.events.emit("diagnosis", reproduced=True, error=f"{type(exc).__name__}: {exc}".splitlines()[0],
                             where=exception_location(exc, self.solution_path), call=self.last_call,
                             launch_blocking=blocking)
            raise
        self.events.emit("diagnosis", reproduced=False, call=self.last_call, launch_blocking=blocking)

    # -- calls, timing, handoffs --------------------------------------------------------------
    def sync(self) -> None:
        if self.device == "cuda":
            _SYNC()

    def handoff_output(self, out: Any, inputs: list, **fields: Any) -> None:
        """Hand the output and the inputs as they are after the call to the lane (which stops this
        process while it copies them), and wait until it has."""
        self.sync()
        if self.device == "cuda" and torch.cuda.mem_get_info()[0] < 0.25 * torch.cuda.mem_get_info()[1]:
            torch.cuda.empty_cache()  # the poisoned blocks left over go back: the lane needs room to judge
        if isinstance(out, torch.Tensor):
            self.hint_bytes = max(self.hint_bytes, out.numel() * out.element_size())
        self.events.handoff("output", {**fields, "type": type(out).__name__, "plain": type(out) is torch.Tensor,
                                       "alias": aliased_input(out, inputs)},
                            {"output": [out] if isinstance(out, torch.Tensor) else [], "inputs": list(inputs)})

    def handoff_state(self, model) -> None:
        """ModelNew's parameters and buffers after matched-seed construction (the weight check)."""
        state = for_solution(model.state_dict)
        self.sync()
        self.events.handoff("state", {"names": list(state)}, {"state": [v.detach() for v in state.values()]})

    def profile(self, model, problem) -> None:
        """The profiled call: which share of its time PyTorch's library operators took
        (harness/verdict/libshare.py). On the GPU that is a ratio of device times, so one call settles it;
        on the CPU it is a share of the call's wall time, which one preempted call can halve, so
        it is the median of 5 calls."""
        seed = self.req["seeds"]["timing"][0]
        inputs = make_inputs(problem, seed, self.device, self.dtype)
        summaries, outs = [], []

        def call():
            outs[:] = [model(*inputs)]

        for _ in range(1 if self.device == "cuda" else 5):
            self.call("profile")
            summaries.append(measure_library_share(call, self.device, self.sync))
            self.gpu["profile_s"] += summaries[-1]["total_us"] / 1e6
        summary = sorted(summaries, key=lambda s: s["share"])[len(summaries) // 2]
        self.events.emit("profile", **summary)
        # its output is judged like any other: the profiled call is one a solution can recognize
        self.handoff_output(outs[0], inputs, kind="profile", shape=0, trial=0, seed=seed)

    # -- the evaluation -----------------------------------------------------------------------
    def run_eval(self) -> None:
        seeds = self.req["seeds"]
        problem = load_module(Path(self.req["problem_path"]))
        originals = {k: getattr(problem, k) for shape in seeds["shapes"] for k in shape["overrides"]}
        model_new = self.load_solution(problem)
        benchmark_model = None
        for shape_index, shape in enumerate(seeds["shapes"]):
            for key, value in {**originals, **shape["overrides"]}.items():
                setattr(problem, key, value)
            self.set_phase("construct", shape=shape_index)
            self.call("construct", shape=shape_index)
            solution = construct(model_new, list(problem.get_init_inputs()), seeds["init"], self.device,
                                 call=for_solution, dtype=self.dtype)
            if shape_index == 0:
                self.handoff_state(solution)
            self.set_phase("correctness", shape=shape_index)
            with torch.no_grad():
                for trial, seed in enumerate(shape["trials"]):
                    inputs = make_inputs(problem, seed, self.device, self.dtype)
                    if self.req["checks"]["poison"]:
                        poison_free_memory(self.device, self.hint_bytes)
                    self.call("trial", shape=shape_index, trial=trial)
                    start = time.perf_counter()
                    out = for_solution(solution, *inputs)
                    self.sync()
                    self.gpu["checked_s"] += time.perf_counter() - start
                    self.handoff_output(out, inputs, kind="trial", shape=shape_index, trial=trial, seed=seed)
                    del out, inputs
            if shape_index == 0:
                benchmark_model = solution
            del solution
        for key, value in originals.items():
            setattr(problem, key, value)

        if self.req["timing"].get("enabled", True):
            self.set_phase("timing")
            with torch.no_grad():
                solution = functools.partial(for_solution, benchmark_model)
                self.events.emit("timing", role="solution", stats=self.time_model(solution, problem))
                self.set_phase("profile")
                self.profile(solution, problem)
        self.events.emit("gpu_time", **self.gpu)

    def main(self) -> None:
        try:
            self.events.emit("sandbox", **self.sandbox)
            if self.device == "cuda" and self.req["mode"] in ("eval", "diagnose", "reference", "yardstick"):  # builds see no GPU
                torch.cuda.set_device(0)
            if self.req["mode"] in ("build", "compile"):
                os.nice(10)  # compiling yields the CPU to the lanes' timed calls
            getattr(self, f"run_{self.req['mode']}")()
            self.events.emit("done")
        except ChannelClosed:
            return  # the lane is gone: nobody to report to
        except BaseException as exc:  # noqa: BLE001 - every path ends in an outcome
            failure = classify(exc, self.phase, self.solution_path, self.device,
                               Path(self.req["problem_path"]) if self.req.get("problem_path") else None,
                               solution_ran=self.solution_ran, limits=self.sandbox.get("limits"))
            try:
                self.events.emit("error", status=failure.status.value, message=failure.message,
                                 detail=failure.detail, phase=self.phase, **failure.fields)
            except ChannelClosed:
                pass


def prime() -> None:
    """What a spare pays while it waits, so that no pair waits for it: the imports a pair needs and
    the dispatch mode's first use (libshare; its first entry costs most of a second). Host work
    only: a spare creates no CUDA context while it waits (other lanes' and this lane's pairs are
    timed meanwhile; an idle context stopped in the middle of its creation is no quiet neighbour),
    and starts no profiler (CUPTI, once started, slows every launch on the GPU: libshare)."""
    import torch.utils._python_dispatch  # noqa: F401
    import torch.utils.cpp_extension  # noqa: F401
    measure_library_share(lambda: torch.ones(2) * 2, "cpu", lambda: None)


def serve(fd: int, marks_fd: int | None = None) -> None:
    """A spare of a lane's pool: prime, say "ready", then serve one "run" (or the lane's "probe")."""
    channel = Channel.from_fd(fd)
    marks = Marks.from_fd(marks_fd) if marks_fd is not None else None
    prime()
    channel.send({"event": "ready", "t": time.monotonic(), "pid": os.getpid()})
    got = channel.recv()
    message = got[0] if got else {}
    if message.get("op") == "run":
        request = message["request"]
        os.environ.update(request.get("env", {}))  # before CUDA starts (CUDA_LAUNCH_BLOCKING for a diagnosis)
        Worker(request, ChannelSink(channel, marks)).main()
    elif message.get("op") == "probe":  # the lane tries the sandbox before its first pair
        from .sandbox_check import answer
        answer(ChannelSink(channel), message.get("device", "cpu"))


def main(argv: list[str]) -> None:
    die_with_parent()
    try:
        if argv[1] == "--serve":
            serve(int(argv[2]), int(argv[3]) if len(argv) > 3 else None)
        else:  # --request-fd R --events-fd E (harness/isolate/isolation.py run_module)
            with os.fdopen(int(argv[2])) as f:
                request = json.loads(f.read())
            Worker(request, EventWriter(int(argv[4]))).main()
    except ChannelClosed:
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: solution destructors or a broken CUDA context must not hang us.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
