"""The ONLY module that imports solution code. One process per pair, run in one of two ways:

    python -m harness.worker --request-fd R --events-fd E
                                            modes build and compile (harness/isolation.py): import the
                                            solution, which builds its extension; events go to a file
    python -m harness.worker --serve FD     a warm spare of a lane's pool (harness/pool.py): torch and the
                                            harness are imported and primed before there is work; on the
                                            channel FD it gets one "run" (modes eval and diagnose; the
                                            block workers' reference and yardstick)

mode "eval": import the solution, construct it with the matched seed for each shape, run the
correctness trials and the timing, the profiled call. Each checked output, the inputs after the
call and ModelNew's parameters are handed to the lane, which is trusted: a CUDA tensor as an IPC
handle (harness/handoff.py), the worker blocked until the lane has taken its copy. The worker
never decides correctness. Before every call it tells the lane ("call"), which bounds each call.
"""
from __future__ import annotations

import functools
import gc
import json
import os
import sys
import time
from statistics import median
from pathlib import Path
from typing import Any

import torch

from .blame import for_solution
from .build import ExtensionDeferred, install_hook
from .channel import Channel, ChannelClosed
from .events import EventWriter
from .failures import Failure, argument_notes, classify, exception_chain
from .guards import aliased_input, poison_free_memory
from .handoff import export
from .isolation import die_with_parent
from .libshare import measure as measure_library_share
from .precision import casts, strict_backends
from .problems import _display, construct, exception_location, load_module, make_inputs, namespace_of
from .results import Status
# Bound before any solution is imported: a solution that patches harness.timing, harness.guards
# or torch.cuda.synchronize afterwards does not change what the worker calls.
from .timing import FreshInputs, InputPool, make_timer, moves_inputs, per_round, planned_samples, rule_of, stats_of

_SYNC = getattr(torch._C, "_cuda_synchronize", None)


class ChannelSink:
    """Events (and handoffs, which wait for the lane's "ack") over the lane's channel."""

    def __init__(self, channel: Channel):
        self.channel = channel

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


class Worker:
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
        # what harness/jail.py put in place before this process imported anything (harness/sandbox.py)
        self.sandbox = json.loads(os.environ.get("KB_SANDBOX_REPORT") or '{"mode": "off", "active": []}')
        # seconds the device spent in calls, by kind (phases.gpu_s; harness/results.py PHASES)
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

    def load_solution(self, problem=None):
        """The solution's ModelNew, its module run with a copy of its problem's names (`problem`, or
        the request's problem file, loaded here), as KernelBench's eval does."""
        if problem is None and self.req.get("problem_path"):
            problem = load_module(Path(self.req["problem_path"]))
        return self._load_solution(namespace_of(problem))

    @property
    def records(self) -> bool:
        """A build step or compile-only's: load_inline calls are recorded, not built."""
        return self.req["mode"] in ("build", "compile")

    def _load_solution(self, names: dict):
        self._install_hook()
        return self._import_solution(self.solution_path, names)

    def _install_hook(self) -> None:
        # A build step (and compile-only's) compiles nothing: it records each load_inline call for
        # the runner's compile steps (harness/recipes.py). A worker imports the libraries the lane
        # staged for it (copies in its scratch; with the sandbox off, the cache's folders) and builds
        # anything else in a folder of its own, never shared: its scratch, or with the sandbox off
        # the cache's `unshared` folder.
        cache_root = Path(self.sandbox["scratch"]) / "builds" if self.sandbox["mode"] != "off" \
            else Path(self.req["cache_dir"]) / "unshared"
        install_hook(cache_root, self.req["arch"], self.device == "cuda", self.on_build,
                     compile_only=self.req["mode"] == "compile", display=_display,
                     wrap=self.recording if self.req["mode"] == "diagnose" else None,
                     prebuilt=self.req.get("prebuilt") or {},
                     record=(lambda recipe: self.events.emit("recipe", recipe=recipe)) if self.records else None)

    def _import_solution(self, path: Path, names: dict):
        """The ModelNew of the solution file `path`, its folder first on sys.path."""
        self.solution_path = path
        self.set_phase("load")
        sys.path.insert(0, str(path.parent))
        self.solution_ran = True
        try:
            with torch.no_grad():
                module = for_solution(load_module, path, prefix="kb_solution", names=names)
        except BaseException as exc:
            deferred = next((e for e in exception_chain(exc) if isinstance(e, ExtensionDeferred)), None)
            if self.records and deferred is not None:  # its worker imports it once the recipes are built
                self.events.emit("deferred", message=str(deferred))
                return None
            raise
        model_new = getattr(module, "ModelNew", None)
        if model_new is None:
            raise Failure(Status.LOAD_ERROR, f"{path}: defines no ModelNew")
        return model_new

    def import_version(self, path: Path, names: dict, *, last: bool):
        """The ModelNew of `path`, one version of a solution of which this process imports several
        (a yardstick worker), after _install_hook: its import hook's staged libraries are every
        version's (their build folders are named by their sources). Unless it is the `last`, what
        it brought from its own family's folders leaves sys.modules and sys.path after its import,
        so that the next version imports its own helper modules; the classes already made keep
        theirs."""
        path_before, modules_before = list(sys.path), set(sys.modules)
        model_new = self._import_solution(path, names)
        if not last:
            tree = path.resolve().parent.parent
            for name in set(sys.modules) - modules_before:
                where = getattr(sys.modules[name], "__file__", None) or ""
                if where and Path(where).resolve().is_relative_to(tree):
                    del sys.modules[name]
            sys.path[:] = path_before
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
                    frame = sys._getframe(1)
                    worker.last_call = {"function": f"{name}.{item}",
                                        "where": f"{_display(Path(frame.f_code.co_filename))}:{frame.f_lineno}",
                                        "notes": argument_notes(list(args) + list(kwargs.values()), worker.device),
                                        "inside": True}
                    result = for_solution(value, *args, **kwargs)
                    worker.sync()
                    worker.last_call["inside"] = False
                    return result
                return call
        return Recorded()

    def run_diagnose(self) -> None:
        """Re-run construction and one correctness trial per shape (with CUDA_LAUNCH_BLOCKING=1
        set by the caller) to attribute a CUDA error to the extension call that caused it."""
        seeds = self.req["seeds"]
        problem = load_module(Path(self.req["problem_path"]))
        self.last_call = None
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
                             where=exception_location(exc, self.solution_path), call=self.last_call)
            raise
        self.events.emit("diagnosis", reproduced=False, call=self.last_call)

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

    def timed_calls(self, model, pool, timer):
        """The one procedure of a timed call, the same for the solution's calls (time_model) and
        for the reference's in a reference worker (run_reference), so that the two are measured
        alike. Returns (timed, checked_call).

        With the request's `every_timed_call` (checks.secret_timed_checks), every timed call,
        warm-up included, hands its output to the lane, which judges a sample of them it draws
        in secret (harness/judge.py TimedSample): from here a checked call and an unchecked one
        are the same until each has returned. Otherwise a timed call is the next input set
        copied in place, the call announced and timed, and `checked_call` is for the
        `checks.timed_output_checks` calls after the timed ones (time_model)."""
        checks = self.req["checks"]
        every = bool(checks.get("every_timed_call"))
        state: dict[str, Any] = {"out": None, "n": 0}

        def call() -> None:
            state["out"] = None
            state["out"] = model(*pool.live)

        def checked_call(what: str) -> float:
            """One call as the lane may check it: its output handed over after. A fixed check after
            the timed calls (secret checks off) runs on poisoned memory; with every timed call
            handed over, none is poisoned: a call alike for all, and an output left unwritten holds
            the previous call's result, for the other input set of the pool (wrong if checked)."""
            seed = pool.refresh()
            state["out"] = None
            if checks["poison"] and not every:
                poison_free_memory(self.device, self.hint_bytes)
            state["n"] += 1
            self.call(what, trial=state["n"])
            ms = timer(call)
            self.handoff_output(state["out"], pool.live, kind="timed", shape=0, trial=state["n"], seed=seed)
            state["out"] = None
            return ms

        def timed() -> float:
            if every:
                return checked_call("timed")
            pool.refresh()
            self.call("timed")
            return timer(call)

        return timed, checked_call

    def fresh_inputs(self, problem):
        """The timed calls' inputs: on CUDA a new set for each call (timing.FreshInputs); on the
        CPU the two sets of the timing seeds, in turn (timing.InputPool)."""
        seeds = self.req["seeds"]["timing"]
        if self.device == "cuda":
            return FreshInputs(lambda seed: make_inputs(problem, seed, self.device, self.dtype), seeds[0])
        return InputPool([make_inputs(problem, seed, self.device, self.dtype) for seed in seeds], seeds)

    def time_model(self, model, problem) -> dict:
        """Time `model` on inputs drawn anew for each call and copied in place, in rounds:
        before each round the lane has a reference worker time a block of the reference (this
        process waits, stopped), then this process times a block of the solution, so that both
        see the same machine. The number of calls follows the stopping rule for the call's time
        in the warm-up. Each call is made by timed_calls."""
        t = self.req["timing"]
        every = bool(self.req["checks"].get("every_timed_call"))
        pool = self.fresh_inputs(problem)
        timer = make_timer(self.device, t["flush_l2"])
        timed, checked_call = self.timed_calls(model, pool, timer)
        warmup_ms = [timed() for _ in range(t["warmup"])] or [timed()]
        rounds, each = per_round(planned_samples(rule_of(t), median(warmup_ms)), t.get("rounds", 1))
        moving = moves_inputs(t.get("move_inputs", "off"), self.device)
        blocks: list[list[float]] = []
        for r in range(rounds):
            self.events.exchange("round", n=r, of=rounds, calls=each)
            if moving:
                pool.move()
            blocks.append([timed() for _ in range(each)])
        samples = [x for block in blocks for x in block]
        self.gpu["timed_s"] += sum(samples) / 1e3
        self.gpu["warmup_s"] += sum(warmup_ms) / 1e3
        if not every:
            for _ in range(self.req["checks"]["timed_output_checks"]):
                self.gpu["checked_s"] += checked_call("timed_check") / 1e3
        return {**stats_of(samples, timer), "rounds": [[round(x, 5) for x in block] for block in blocks]}

    def run_reference(self) -> None:
        """A reference worker (mode "reference"): no solution is imported. The problem's Model is
        made and called once as soon as the request comes (the lane sends it while the pair's
        solution runs its trials), then timed in the blocks the lane asks for ({"op": "block",
        "role", "calls"}), each call made by timed_calls exactly as a solution's timed calls are,
        in a process of the same kind: so the speedup compares like with like (the per-process
        cost of launching work, the procedure of the secret checks). A role's first block is
        preceded by its warm-up calls. Each block's times go back as a "block" event. The lane
        keeps the worker for the problem's later pairs and for its later problems: {"op":
        "problem", "request"} sets it up for another (the previous model and inputs freed first),
        which saves each problem a process start and a CUDA context."""
        while self._serve_reference():
            gc.collect()
            if self.device == "cuda":
                torch.cuda.empty_cache()
        self.events.emit("gpu_time", **self.gpu)

    def _serve_reference(self) -> bool:
        """One problem's reference: set up, then blocks until "end" (False) or "problem" (True,
        the request replaced)."""
        problem = load_module(Path(self.req["problem_path"]))
        with torch.no_grad():
            model = construct(problem.Model, list(problem.get_init_inputs()), self.req["seeds"]["init"], self.device,
                              dtype=self.dtype)
        return self._serve_blocks(problem, {"": model}, lambda role: role != "reference")

    def run_yardstick(self) -> None:
        """A yardstick worker (mode "yardstick"; run_eval.py check --baseline-rev): the pair's
        solution as it was at the revision ("then": the request's yardstick solution_path, its
        libraries staged as any solution's) and as it is ("now": the pair's own file and
        libraries), both imported in this one process (import_version), each made with the pair's
        matched seed, and timed in the blocks the lane asks for, roles "then" and "now" in turns,
        each call made by timed_calls like the solution's own timed calls, with PyTorch's defaults.
        The gate's now/then ratio then compares two models of one process in the same rounds, which
        no offset between two processes can bias (harness/gate.py). Where the two versions' sources
        are the same (`same_sources`), one import serves both. Where "now" cannot be imported next
        to "then" (two versions that claim one registry, say), "then" alone is timed, and the gate
        compares it with the pair's own worker, within its process term ("now_failed"). It serves
        one pair and ends."""
        problem = load_module(Path(self.req["problem_path"]))
        yardstick = self.req["yardstick"]
        then_path, now_path = Path(yardstick["then"]), Path(self.req["solution_path"])
        same = bool(yardstick.get("same_sources"))
        names, now_failed = namespace_of(problem), ""
        self._install_hook()
        if same:
            then_new = now_new = self.import_version(now_path, names, last=True)
        else:
            then_new, now_new = self.import_version(then_path, names, last=False), None
            try:
                now_new = self.import_version(now_path, names, last=True)
            except Exception as exc:  # noqa: BLE001 - said, and "then" timed without it
                now_failed = f"{type(exc).__name__}: {exc}".splitlines()[0]
        models = {}
        for role, model_new in (("then", then_new), ("now", now_new)):
            if model_new is None:
                continue
            self.set_phase("construct", shape=0, role=role)
            with torch.no_grad():
                model = construct(model_new, list(problem.get_init_inputs()), self.req["seeds"]["init"],
                                  self.device, call=for_solution, dtype=self.dtype)
            models[role] = functools.partial(for_solution, model)
        self.events.emit("versions", roles=sorted(models), same_sources=same, now_failed=now_failed)
        self._serve_blocks(problem, models, lambda role: False)
        self.events.emit("gpu_time", **self.gpu)

    def _serve_blocks(self, problem, models: dict[str, Any], strict_of) -> bool:
        """Call each of `models` once on the timing inputs, then time the blocks the lane asks for
        ({"op": "block", "role", "calls"}; a role's first block after its warm-up calls, with the
        run's strictest backend settings where `strict_of(role)`), each role's calls into
        models[role] (a reference worker's one model, keyed "", serves every role), until "end"
        (False) or "problem" (True, the request replaced: a reference worker's next problem)."""
        t = self.req["timing"]
        run = self.req.get("precision", "fp32")
        pool = self.fresh_inputs(problem)
        moving = moves_inputs(t.get("move_inputs", "off"), self.device)
        timer = make_timer(self.device, t["flush_l2"])
        with torch.no_grad():
            for model in models.values():
                model(*pool.live)
            self.sync()
        roles: dict[str, Any] = {}
        self.set_phase("timing")
        while True:
            got = self.events.channel.recv()
            if got is None:
                raise ChannelClosed("the lane closed the block worker's channel")
            op = got[0]
            if op.get("op") == "end":
                return False
            if op.get("op") == "problem":
                self.req = op["request"]
                self.dtype = casts(self.req.get("precision", "fp32"))
                self.hint_bytes = int(self.req.get("hint_bytes", 0))
                return True
            if op.get("op") != "block":
                continue
            role = op["role"]
            if moving:
                pool.move()
            with torch.no_grad(), strict_backends(run, strict_of(role)):
                if role not in roles:
                    model = models[role] if role in models else models[""]
                    roles[role] = self.timed_calls(model, pool, timer)[0]
                    self.gpu["warmup_s"] += sum(roles[role]() for _ in range(max(1, t["warmup"]))) / 1e3
                block = [roles[role]() for _ in range(int(op["calls"]))]
            self.gpu["timed_s"] += sum(block) / 1e3
            self.events.emit("block", role=role, ms=block)

    def profile(self, model, problem) -> None:
        """The profiled call: which share of its time PyTorch's library operators took
        (harness/libshare.py). On the GPU that is a ratio of device times, so one call settles it;
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


def serve(fd: int) -> None:
    """A spare of a lane's pool: prime, say "ready", then serve one "run" (or the lane's "probe")."""
    channel = Channel.from_fd(fd)
    prime()
    channel.send({"event": "ready", "t": time.monotonic(), "pid": os.getpid()})
    got = channel.recv()
    message = got[0] if got else {}
    if message.get("op") == "run":
        request = message["request"]
        os.environ.update(request.get("env", {}))  # before CUDA starts (CUDA_LAUNCH_BLOCKING for a diagnosis)
        Worker(request, ChannelSink(channel)).main()
    elif message.get("op") == "probe":  # the lane tries the sandbox before its first pair
        from .sandbox_check import answer
        answer(ChannelSink(channel), message.get("device", "cpu"))


def main(argv: list[str]) -> None:
    die_with_parent()
    try:
        if argv[1] == "--serve":
            serve(int(argv[2]))
        else:  # --request-fd R --events-fd E (harness/isolation.py run_module)
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
