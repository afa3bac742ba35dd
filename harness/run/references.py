"""The reference's side of a lane, once per problem: its first timings (an estimate, for the
per-call limits, the rounds' planning and the column of the role a pair is not compared with;
measured again when older than timing.reference_max_age_s, when the GPU's temperature moved more
than timing.reference_max_temp_delta_c or its application clock changed), the problem's checks
measured on it (its dependence on its inputs, its physical floor), and the reference worker that
times the reference's blocks in every pair's rounds (harness/run/rounds.py ReferenceRounds),
kept for the problem's later pairs and set up anew for the next problem."""
from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..isolate.channel import ChannelClosed
from .pool import Spare, kill, retire, signal_spare
from ..verdict.checks import dependence, floor
from ..core.precision import casts, classes, strict_backends, strict_role
from ..core.problems import declaration
from ..core.config import noise_bound


class References:
    """A lane's references: `timings` per problem (kept in `entries`), and its reference worker."""

    def __init__(self, lane):
        self.lane = lane
        self.entries: dict[tuple, dict[str, Any]] = {}
        self.worker: tuple[str, Spare] | None = None   # (what it times, the worker): worker_for

    def timings(self, problem, job: dict[str, Any], gpu: dict[str, Any]) -> tuple[dict, float, dict, bool]:
        """({"reference": stats, <the strict role>: stats} ({} with timing disabled), GPU seconds spent
        measuring them now, the entry (its `io_bytes` and `out_bytes` at the benchmark shape),
        whether it was measured for this pair)."""
        t = job["config"]["timing"]
        key = (problem.sha256, json.dumps(t, sort_keys=True), json.dumps(job["seeds"]["timing"]), job["seeds"]["init"],
               job["config"]["precision"])
        entry = self.entries.get(key)
        now, temp = time.monotonic(), gpu.get("temperature_c")
        warmed = temp is not None and entry is not None and entry["temp"] is not None \
            and abs(temp - entry["temp"]) > t["reference_max_temp_delta_c"]
        fresh = (entry is not None and now - entry["at"] <= t["reference_max_age_s"] and not warmed
                 and entry["clock"] == gpu.get("app_sm_clock_mhz"))
        if not fresh:
            self.lane.pool.freeze()
            try:
                entry = self._measure_reference(problem, job, temp, gpu.get("app_sm_clock_mhz"))
            finally:
                self.lane.pool.thaw()
            self.entries[key] = entry
        stats = {role: {**s, "measured_at": entry["iso"], "age_s": round(now - entry["at"], 1), "reused": fresh}
                 for role, s in entry["stats"].items()}
        for role, (at, latest) in entry["latest"].items():  # an earlier pair's rounds, this entry's age
            stats[role] = {**latest, "age_s": round(now - at, 1), "reused": True}
        return stats, 0.0 if fresh else entry["gpu_s"], entry, not fresh

    @staticmethod
    def remember(entry: dict[str, Any], timed: dict[str, dict]) -> None:
        """A pair's interleaved measurement of a role (rounds.ReferenceRounds.timing): shown for that
        role to the problem's later pairs that compare with the other one, while the entry is fresh;
        and the harness's cost per timed call measured in its blocks, which vouches
        for a later pair's times where its reference worker fails (`overhead`: harness/verdict/vouch.py)."""
        from ..verdict.vouch import overheads
        for role, stats in timed.items():
            entry["latest"][role] = (time.monotonic(), stats)
            for key in ("ms", "inner", "gap"):  # the harness's cost per timed call, for a pair whose reference worker
                cost = overheads(stats.get("rounds") or [], stats.get("lane_blocks") or [], key)  # times no block
                if cost:
                    entry.setdefault("overhead", {})[key] = sorted(cost)[len(cost) // 2]

    # calls timed per role when a problem's reference is first measured: an estimate of its time,
    # for the per-call limits, the rounds' planning and the column of the role a pair is not
    # compared with (each pair times the role it is compared with in its own rounds)
    ESTIMATE_SAMPLES = 5

    def _measure_reference(self, problem, job: dict[str, Any], temp: float | None,
                           clock: float | None) -> dict[str, Any]:
        import torch

        from .pipeline import now
        from ..verdict.timing import InputPool, StoppingRule, make_timer, sample, stats_of
        t = job["config"]["timing"]
        run = job["config"]["precision"]
        model = problem.reference({}, job["seeds"]["init"], casts(run))["model"]
        pool = InputPool([problem.inputs({}, seed, casts(run)) for seed in job["seeds"]["timing"]])
        gpu_s, stats = 0.0, {}
        strict = strict_role(run)
        modes = [("reference", False)] + ([(strict, True)] if self.lane.device == "cuda" else [])
        if not t.get("enabled", True):
            modes = []  # correctness only: the sizes below, no timing
        with torch.no_grad():
            for role, strictest in modes:
                with strict_backends(run, strictest):
                    timer, warmup_ms = make_timer(self.lane.device, t["flush_l2"]), []
                    estimate = StoppingRule(min(self.ESTIMATE_SAMPLES, t["min_samples"]),
                                            min(self.ESTIMATE_SAMPLES, t["max_samples"]), 0.0, t["max_time_s"])
                    samples = sample(lambda: model(*pool.live), timer, estimate, t["warmup"],
                                     before=pool.refresh, warmup_ms=warmup_ms)
                stats[role] = {**stats_of(samples, timer), "estimate": True}
                gpu_s += (sum(samples) + sum(warmup_ms)) / 1e3
            out = model(*pool.live)
            out_bytes = out.numel() * out.element_size() if isinstance(out, torch.Tensor) else 0
            out = None
            depends = self._dependence(model, pool, job)
        if stats and strict not in stats:  # on the CPU there is no stricter setting
            stats[strict] = stats["reference"]
        in_bytes = sum(x.numel() * x.element_size() for x in pool.live if isinstance(x, torch.Tensor))
        pool = None  # the inputs' and output's memory goes back before any worker runs
        self.lane.judge.release(force=True)
        declared = declaration(Path(job["problem_path"]), problem.sha256)
        return {"stats": stats, "at": time.monotonic(), "iso": now(), "temp": temp, "clock": clock, "gpu_s": gpu_s,
                "out_bytes": out_bytes, "io_bytes": in_bytes + out_bytes, "latest": {},
                "checks": {"dependence": depends, "floor": self.floor(out_bytes, in_bytes, declared)}}

    def _dependence(self, model, pool, job: dict[str, Any]) -> dict[str, Any]:
        """The problem's dependence on its inputs (checks.dependence): the reference's outputs for
        the timing pool's two independent draws, in the run's loosest class."""
        if len(pool.pool) < 2:
            return {"measured": False}
        loosest = job["config"]["correctness"][classes(job["config"]["precision"])[-1]]
        tolerance = SimpleNamespace(atol=loosest["atol"], rtol=loosest["rtol"], rel_l2=loosest["rel_l2"])

        def exact():  # the two draws' outputs in float64 (checks.dependence: only for an output near zero)
            import torch

            from ..verdict.numerics import float64_copy
            try:
                model64 = float64_copy(model, self.lane.device)
                outs = [model64(*[x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                                  for x in draw]) for draw in pool.pool[:2]]
            except Exception:  # noqa: BLE001 - no float64 forward (an op without one, no room): not measured
                return None
            return outs if all(isinstance(o, torch.Tensor) and o.shape == first.shape for o in outs) else None

        try:
            first = model(*pool.pool[0])
            return dependence((first, model(*pool.pool[1])), tolerance,
                              exact if noise_bound(job["config"]["correctness"]) else None)
        except Exception as exc:  # noqa: BLE001 - not measured (e.g. no room): no flag
            return {"measured": False, "why": f"{type(exc).__name__}: {exc}".splitlines()[0][:200]}

    def floor(self, out_bytes: int, in_bytes: int = 0, declared: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The least time a call of this problem can take on this lane's device (checks.floor)."""
        if self.lane.device != "cuda":
            return None
        try:
            import torch
            return floor(out_bytes, torch.cuda.get_device_properties(0), in_bytes, declared)
        except Exception:  # noqa: BLE001 - a device that does not say: no floor
            return None

    def worker_for(self, job: dict[str, Any], request_of) -> Spare:
        """The worker that times the reference's rounds (harness/run/rounds.py ReferenceRounds) for the
        problem of `job`: the one kept from the previous pair, as it is where it times the same
        thing (problem file, seeds, timing, precision and checks), else sent the new request
        (`request_of(spare)`, {"op": "problem"}); a fresh one from the pool where there is none
        (or it is gone), sent its request. Either way at once, so that it sets itself up while the
        pair's solution runs its trials. It is stopped between blocks."""
        key = json.dumps([job["problem"]["sha256"], job["problem_path"], job["seeds"]["init"], job["seeds"]["timing"],
                          job["config"]["timing"], job["config"]["precision"], job["config"]["checks"]],
                         sort_keys=True, default=str)
        if self.worker is not None and self.worker[1].proc.poll() is None:
            kept, spare = self.worker
            if kept == key:
                return spare
            try:
                signal_spare(spare, signal.SIGCONT)
                spare.channel.send({"op": "problem", "request": request_of(spare)})
                spare.state = "starting"
                spare.problems += 1
                self.worker = (key, spare)
                return spare
            except (ChannelClosed, OSError):
                pass
        self.end_worker()
        spare = self.lane.pool.take()
        spare.state = "starting"
        spare.channel.send({"op": "run", "request": request_of(spare)})
        spare.problems = 1
        self.worker = (key, spare)
        return spare

    def end_worker(self) -> None:
        if self.worker is None:
            return
        spare = self.worker[1]
        self.worker = None
        try:
            spare.channel.send({"op": "end"})
        except ChannelClosed:
            pass
        kill(spare)
        spare.channel.close()
        retire(spare)
