"""The CI gate's yardstick in a pair's timing rounds (run_eval.py check --timing --baseline-rev;
job["yardstick"]): a worker of the lane's pool (worker.run_yardstick, served by a rounds.BlockWorker)
that holds the solution as it was at the revision ("then") and as it is ("now"), timed in
timing.gate_rounds of the pair's rounds (spread evenly: every third of 30), each block with the
calls of the pair's rounds it stands for, then and now in turns (then first in the yardstick's even
rounds, now first in its odd ones), after the reference's block (rounds.ReferenceRounds). The gate's
now/then ratio is a bootstrap over those rounds (harness/record/gate.py): two models of one
process, in the same rounds, which neither an offset between two processes nor the machine's drift
can bias. Where "now" could not be imported beside "then", "then" alone is timed and compared with
the solution's own blocks. Should the worker fail, the pair is judged as ever and says why.
"""
from __future__ import annotations

import math
from typing import Any, Callable


class Yardstick:
    """The yardstick's rounds in one pair: `worker` serves its blocks (a rounds.BlockWorker),
    `wait_idle` waits for the GPU to be idle before each, `end` ends the worker where it failed."""

    # A yardstick block lasts at least this long (at most MOST_CALLS calls): a launch-bound
    # solution's round of 10 calls of 0.14 ms (902 / fast on the H200) gave each block a median
    # of 10 noisy calls, and the gate's interval a width of 5-40% (docs/harness-perf.md). The
    # yardstick's blocks serve the gate only; the pair's own timing is unchanged.
    BLOCK_MS = 20.0
    MOST_CALLS = 1000
    SETTLE_STEP = 5    # settle(): the rounds added between two looks at the gate's interval

    def __init__(self, worker, timing: dict[str, Any], cpus, wait_idle: Callable[[], float],
                 end: Callable[[Any], None]):
        self.worker, self.t, self.cpus, self.wait_idle, self.end = worker, timing, cpus, wait_idle, end
        self.calls = 1               # the calls of the pair's rounds its next block stands for
        self.settled = 0             # the rounds added after the solution's (settle)
        self.pair_rounds: list[int] = []   # the solution's rounds the yardstick timed a round in

    def in_round(self, message: dict[str, Any]) -> None:
        """Its blocks in the solution's round `message` (its "round" event), where that round is one
        of its turns (gate_turn)."""
        n, of, most = int(message.get("n", 0)), int(message.get("of", 1)), int(self.t.get("gate_rounds", 10))
        self.calls = int(message.get("calls", 1)) * gate_step(of, most)   # the calls of the rounds it stands for
        if not self.worker.failed and gate_turn(n, of, most):
            done = len(self.worker.by_role.get("then", []))
            self.round(done)
            if len(self.worker.by_role.get("then", [])) > done:
                self.pair_rounds.append(n)

    def round(self, n: int) -> None:
        """Its round `n` (its own count): "then" and "now" in turns (then first in even rounds)."""
        y = self.worker
        if y.failed:
            return
        calls = yardstick_calls(self.calls, y.by_role.get("then", []), self.BLOCK_MS, self.MOST_CALLS)
        for role in ("then", "now") if n % 2 == 0 else ("now", "then"):
            if role == "now" and "now" not in y.versions.get("roles", ()):
                continue
            self.wait_idle()
            if not y.serve(role, calls, self.cpus):
                self.end(y)
                break

    def settle(self) -> int:
        """After the solution's rounds (its worker ended): where the gate's now/then interval of
        the rounds so far could still change the gate's call (it holds 1 - timing.gate_max_regression,
        the threshold of a regression) and is wider than timing.gate_precision at either end, more
        rounds of the yardstick alone, then and now in turns as before, until it is not or
        timing.gate_max_rounds rounds are done (looked at every SETTLE_STEP rounds). The interval
        looked at is the gate's own (timing.same_rounds_ratio of the rounds as recorded), so the
        rounds stop only where the call is made. A launch-bound solution's blocks vary by several
        percent from round to round, and ten rounds could not tell a 10% slowdown from none; a
        problem whose ten rounds decide pays nothing. Returns the rounds added (also counted in
        `settled`)."""
        y = self.worker
        most, share = int(self.t.get("gate_max_rounds", 0)), float(self.t.get("gate_precision", 0.025))
        added = 0
        while not y.failed and y.by_role.get("now"):
            then, now = y.by_role.get("then", []), y.by_role["now"]
            done = min(len(then), len(now))
            if done >= most or done < 2:
                break
            if added % self.SETTLE_STEP == 0 and self.can_stop(then, now, share):
                break
            self.round(done)
            added += 1
        self.settled += added
        return added

    def can_stop(self, then: list[list[float]], now: list[list[float]], share: float) -> bool:
        """Whether the gate's interval of these rounds (as the result records them: rounds to 1e-5
        ms) decides the call, or is within `share` of the ratio at both ends."""
        from ..verdict.timing import gate_can_stop
        recorded = [[[round(x, 5) for x in b] for b in blocks] for blocks in (then, now)]
        return gate_can_stop(*recorded, float(self.t.get("confidence", 0.95)),
                             float(self.t.get("gate_max_regression", 0.05)), share)[0]

    @property
    def failed(self) -> str:
        """Why it has no timing ('' where it has)."""
        y = self.worker
        if y.by_role.get("then") and not y.failed:
            return ""
        return y.failed or "it timed no round"

    def timing(self, timer_name: str, job: dict[str, Any]) -> dict[str, Any]:
        """Its part of the pair's timing block: {"yardstick": then's stats with its rounds, the
        solution it timed, whether its sources were now's, and "now": now's stats in the same
        process and rounds (or "now_failed": why now could not be imported beside then)}; {}
        where it failed."""
        y = self.worker
        if self.failed:
            return {}
        then = {**y.stats(timer_name, "then"), "measured_in": "yardstick worker",
                "solution": job["yardstick"].get("name", ""), "same_sources": bool(job["yardstick"].get("same_sources"))}
        if y.by_role.get("now"):
            then["now"] = y.stats(timer_name, "now")
        elif y.versions.get("now_failed"):
            then["now_failed"] = y.versions["now_failed"]
        then["pair_rounds"] = list(self.pair_rounds)
        # where the gate's time went: the lane's time in its blocks, of it taking outputs, the calls' own
        then["cost"] = {"blocks_s": round(y.wall_s, 3), "handoff_s": round(y.handoff_s, 3), "calls_s": round(y.gpu_s, 3),
                        "handed_over": not y.versions.get("quiet", False)}
        if self.settled:
            then["settled_rounds"] = self.settled
        return {"yardstick": then}


def gate_step(of: int, gate_rounds: int) -> int:
    """Of the solution's `of` rounds, every how many the yardstick times a round in (1 where
    of <= gate_rounds); each of its blocks then has the calls of that many of the solution's rounds."""
    return max(1, of // max(1, gate_rounds))


def gate_turn(n: int, of: int, gate_rounds: int) -> bool:
    """Whether the yardstick times a round in the solution's round `n` of `of`: in `gate_rounds`
    of them, spread evenly (every gate_step-th from the first; all where of <= gate_rounds)."""
    step = gate_step(of, gate_rounds)
    return n % step == 0 and n // step < gate_rounds


def yardstick_calls(calls: int, blocks: list[list[float]], block_ms: float, most: int) -> int:
    """The calls of each of a round's yardstick blocks: the solution's round's `calls`, or where
    then's last block says a call is short, enough for `block_ms` (at most `most`)."""
    calls = max(1, calls)
    if not blocks or not blocks[-1]:
        return calls
    per_call = sorted(blocks[-1])[len(blocks[-1]) // 2]
    return max(calls, min(most, math.ceil(block_ms / max(per_call, 1e-6))))
