"""The timed calls of a worker: the one procedure of a timed call, the same for the solution's
calls and the reference's (timed_calls), the solution's rounds (time_model), and the block
workers that time the other halves of each round: the reference worker (run_reference) and the
CI gate's yardstick worker, then and now in one process (run_yardstick). A mixin of
harness/run/worker.py Worker, which holds the request and the event sink."""
from __future__ import annotations

import functools
import gc
from statistics import median
from pathlib import Path
from typing import Any

import torch

from ..core.blame import for_solution
from ..isolate.channel import ChannelClosed
from ..verdict.guards import poison_free_memory
from ..core.precision import casts, strict_backends
from ..core.problems import construct, load_module, make_inputs, namespace_of
# Bound before any solution is imported (harness/run/worker.py imports this module first): a
# solution that patches harness.verdict.timing afterwards does not change what the worker calls.
from ..verdict.timing import FreshInputs, InputPool, make_timer, moves_inputs, per_round, planned_samples, rule_of, stats_of


class TimedCalls:
    def timed_calls(self, model, pool, timer, every: bool | None = None):
        """The one procedure of a timed call, the same for the solution's calls (time_model) and
        for the reference's in a reference worker (run_reference), so that the two are measured
        alike. Returns (timed, checked_call).

        With the request's `every_timed_call` (checks.secret_timed_checks), every timed call,
        warm-up included, hands its output to the lane, which judges a sample of them it draws
        in secret (harness/verdict/sample.py TimedSample): from here a checked call and an unchecked one
        are the same until each has returned. Otherwise a timed call is the next input set
        copied in place, the call announced and timed, and `checked_call` is for the
        `checks.timed_output_checks` calls after the timed ones (time_model). `every` False: no
        call handed over, whatever the checks say (a yardstick's blocks with timing.gate_handoff off).
        Each timed call is announced ("call") and marked as it begins and as soon as the timer has it
        (two marks the kernel stamps as sent): the lane's own clock on the call between the two
        (harness/run/clock.py)."""
        checks = self.req["checks"]
        every = bool(checks.get("every_timed_call")) if every is None else every
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
            self.events.mark(b"c")         # the lane's clock on the call (harness/run/clock.py) ...
            ms = timer(call)
            self.events.mark(b"r")         # ... from here to here, as the kernel stamped the two
            self.handoff_output(state["out"], pool.live, kind="timed", shape=0, trial=state["n"], seed=seed)
            state["out"] = None
            return ms

        def timed() -> float:
            if every:
                return checked_call("timed")
            pool.refresh()
            self.call("timed")
            self.events.mark(b"c")
            ms = timer(call)
            self.events.mark(b"r")
            return ms

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
        in the warm-up. Each call is made by timed_calls. These times are this process's word: the
        lane keeps its own clock on each block, between the exchanges that start and end it, and
        vouches for them only where the two agree (harness/verdict/vouch.py)."""
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
        # the last block ends as the others do, by an exchange: the lane closes it on its own clock
        # once the GPU is idle (harness/run/clock.py), before anything else of this process runs
        self.events.exchange("rounds_end", of=rounds)
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
        no offset between two processes can bias (harness/record/gate.py). Where the two versions' sources
        are the same (`same_sources`), one import serves both. Where "now" cannot be imported next
        to "then" (two versions that claim one registry, say), "then" alone is timed, and the gate
        compares it with the pair's own worker, within its process term ("now_failed"). With
        timing.gate_handoff off (the request's yardstick "quiet") and now beside then, no call's
        output is handed to the lane, then's and now's alike: they are compared with each other
        only, and their outputs are never judged; then alone keeps the solution's procedure, as it
        is compared with the solution's own blocks. It serves one pair and ends."""
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
        quiet = bool(yardstick.get("quiet")) and "now" in models
        self.events.emit("versions", roles=sorted(models), same_sources=same, now_failed=now_failed, quiet=quiet)
        self._serve_blocks(problem, models, lambda role: False, every=False if quiet else None)
        self.events.emit("gpu_time", **self.gpu)

    def _serve_blocks(self, problem, models: dict[str, Any], strict_of, every: bool | None = None) -> bool:
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
                    roles[role] = self.timed_calls(model, pool, timer, every)[0]
                    self.gpu["warmup_s"] += sum(roles[role]() for _ in range(max(1, t["warmup"]))) / 1e3
                    self.events.exchange("warmed", role=role)  # the lane's clock on the block starts at its ack
                block = [roles[role]() for _ in range(int(op["calls"]))]
            self.gpu["timed_s"] += sum(block) / 1e3
            self.events.emit("block", role=role, ms=block)
