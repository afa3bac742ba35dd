"""The lane's own clock on a worker's timed blocks (harness/verdict/vouch.py says what it vouches for).

A block opens when the lane lets it start (its "ack" to the solution's worker's "round"; the
"block" op to a block worker, or its "ack" to that worker's "warmed" where the block began with
warm-up calls: always the lane's own send, never a message it may read late) and closes when the worker ends it (its next "round" or its "rounds_end", which the lane
answers only after the GPU is idle; a block worker's "block" event). Inside, the lane counts the
timed calls announced and the returns said, and takes out its own time (taking outputs while the
worker waits, stopped). Two intervals of each call are kept, in ms, both ending at its "returned"
(nothing of the handoff): `inner` from its announcement ("call"), the call and its
timer alone, small and steady where the lane reads promptly (a CUDA lane: the workers are pinned
to a CPU of their own while timed); and `cycle` from the lane's own last word to the worker
(its "ack" to the previous output, or where none is handed over the previous call's return; a
block's first call from its announcement, so that moving the inputs before it is the block's),
which adds the next inputs' refresh but does not depend on when the lane read the announcement (a CPU lane whose every core the worker's threads hold reads it late: on a
2-core machine, 0.8 ms late behind a CPU matrix product's threads). Every time here is the lane's
time.monotonic(), in a process the solution cannot reach."""
from __future__ import annotations

from typing import Any


class BlockClock:
    def __init__(self) -> None:
        self.blocks: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None

    @property
    def is_open(self) -> bool:
        return self._open is not None

    def open(self, at: float) -> None:
        """A block starts at `at` (a block already open is started over: a block worker's warm-up)."""
        self._open = {"at": at, "calls": 0, "returns": 0, "taken_s": 0.0, "called": None, "said": at,
                      "inner": [], "cycle": []}

    def call(self, what: str | None, at: float) -> None:
        """A call announced at `at` (a timed one counts, and its interval starts)."""
        if self._open is not None and what == "timed":
            self._open["calls"] += 1
            self._open["called"] = at
            if self._open["calls"] == 1:   # what a block does before its first call (moving the inputs) is not a call's
                self._open["said"] = at

    def returned(self, at: float) -> None:
        """A timed call's "returned" arrived at `at`: its interval ends (one return per announcement)."""
        block = self._open
        if block is not None:
            block["returns"] += 1
            block["cycle"].append(round((at - block["said"]) * 1e3, 5))
            block["said"] = at
            if block["called"] is not None:
                block["inner"].append(round((at - block["called"]) * 1e3, 5))
                block["called"] = None

    def lane_work(self, seconds: float, ended_at: float) -> None:
        """The lane's own work inside the block, ended at `ended_at` by its word to the worker (the
        ack it waited for): not the worker's; the next call's cycle starts there."""
        if self._open is not None:
            self._open["taken_s"] += seconds
            self._open["said"] = ended_at

    def close(self, at: float, idle_s: float = 0.0, unended: str = "") -> None:
        """The block ends at `at`; `idle_s`: the lane's wait, after that, for the GPU to go idle (work
        the worker left running, counted as the block's); `unended`: the message that ended the block
        where the worker did not close it."""
        block, self._open = self._open, None
        if block is None:
            return
        ms = (at - block["at"] - block["taken_s"] + idle_s) * 1e3
        entry = {"ms": round(ms, 5), "calls": block["calls"], "returns": block["returns"],
                 "inner": block["inner"], "cycle": block["cycle"], "taken_ms": round(block["taken_s"] * 1e3, 3),
                 "idle_ms": round(idle_s * 1e3, 3)}
        if unended:
            entry["unended"] = unended
        self.blocks.append(entry)


def in_block(event: str | None, message: dict[str, Any]) -> bool:
    """Whether a worker's message is part of a timed block: a timed call's announcement, its return, its output."""
    return ((event == "call" and message.get("what") == "timed") or event == "returned"
            or (event == "output" and message.get("kind") == "timed"))
