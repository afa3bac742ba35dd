"""The lane's own clock on a worker's timed blocks (harness/verdict/vouch.py says what it vouches for).

A block opens when the lane lets it start (its "ack" to the solution's worker's "round"; the
"block" op to a block worker, or its "ack" to that worker's "warmed" where the block began with
warm-up calls: always the lane's own send, never a message it may read late) and closes when the
worker ends it (its next "round" or its "rounds_end", which the lane answers only after the GPU is
idle; a block worker's "block" event). Inside, the lane counts the timed calls announced and
takes out its own time (taking outputs while the worker waits, stopped): `ms`, the block's wall,
by the lane's time.monotonic().

Each timed call's own interval, `inner` (ms), is from the worker's mark as it begins to its mark
once its timer has it: two one-byte messages the kernel stamps as they are sent
(harness/isolate/channel.py Marks), so that how late the lane reads them does not matter (on a
2-core machine the lane read a worker's messages up to milliseconds late, behind the worker's
threads or builds). The worker chooses when it sends a mark, never the time it carries: a mark
sent early moves work out of the call's interval, and into the block's.

Each cycle, `gap` (ms): from a timed call's mark as it begins to the next one's, less the lane's own
work in between (taking the output, while the worker waits), on the same stamps: the call and the
harness's procedure that follows it (its output handed over, the next inputs). Work a solution
moves out of its calls into that procedure (its worker's handoff, say) lengthens every cycle, and a
median over the calls sees it where the whole block's wall, a mean that carries every stall of a
busy host, may not (harness/verdict/vouch.py). Where the block hands its outputs over, each must be
handed over before the next timed call is announced, as the harness's worker does: outputs held
back to the block's end would move their work out of every cycle (`disorder`)."""
from __future__ import annotations

from typing import Any

from ..isolate.channel import Marks


class BlockClock:
    def __init__(self, cycle: bool = True) -> None:
        """`cycle`: checks.timing_cycle (harness/verdict/vouch.py cycle_clock): the lane's work read up
        to its acknowledgement, and `disorder` noted; off, as before 2026-12-06 (each cycle recorded)."""
        self.blocks: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None
        self.cycle = cycle

    @property
    def is_open(self) -> bool:
        return self._open is not None

    def open(self, at: float) -> None:
        """A block starts at `at` (a block already open is started over: a block worker's warm-up)."""
        self._open = {"at": at, "calls": 0, "returns": 0, "taken_s": 0.0, "began": None, "inner": [],
                      "gap": [], "last": None, "work_s": 0.0, "outputs": 0, "owed": 0}

    def call(self, what: str | None) -> None:
        """A call announced on the channel (a timed one counts)."""
        if self._open is not None and what == "timed":
            block = self._open
            if block["outputs"] < block["calls"]:   # the previous timed call's output not handed over yet
                block["owed"] += 1
            block["calls"] += 1

    def output(self) -> None:
        """A timed call's output handed over (the lane took it or passed it)."""
        if self._open is not None:
            self._open["outputs"] += 1

    def marks(self, marks: list[tuple[bytes, float]]) -> None:
        """The worker's marks, as drained (kind, the kernel's stamp of its sending)."""
        block = self._open
        if block is None:
            return
        for kind, stamp in marks:
            if kind == Marks.CALL:
                block["began"] = stamp
                if block["last"] is not None:
                    block["gap"].append(round((stamp - block["last"] - block["work_s"]) * 1e3, 5))
                block["last"], block["work_s"] = stamp, 0.0
            elif kind == Marks.RETURNED:
                block["returns"] += 1
                if block["began"] is not None:
                    block["inner"].append(round((stamp - block["began"]) * 1e3, 5))
                    block["began"] = None

    def lane_work(self, seconds: float, to_ack: float | None = None) -> None:
        """The lane's own work inside the block (the worker waited for it): not the worker's.
        `seconds`: to when the lane went on; `to_ack`: to its acknowledgement, which lets the worker go
        on (the worker's time after it is the worker's), taken where `cycle` is on."""
        if self._open is not None:
            spent = to_ack if self.cycle and to_ack is not None else seconds
            self._open["taken_s"] += spent
            self._open["work_s"] += spent

    def close(self, at: float, idle_s: float = 0.0, unended: str = "") -> None:
        """The block ends at `at`; `idle_s`: the lane's wait, after that, for the GPU to go idle (work
        the worker left running, counted as the block's); `unended`: the message that ended the block
        where the worker did not close it."""
        block, self._open = self._open, None
        if block is None:
            return
        ms = (at - block["at"] - block["taken_s"] + idle_s) * 1e3
        entry = {"ms": round(ms, 5), "calls": block["calls"], "returns": block["returns"], "inner": block["inner"],
                 "gap": block["gap"], "taken_ms": round(block["taken_s"] * 1e3, 3), "idle_ms": round(idle_s * 1e3, 3)}
        if unended:
            entry["unended"] = unended
        if self.cycle and block["outputs"] and (block["owed"] or block["outputs"] != block["calls"]):
            entry["disorder"] = (f"{block['outputs']} output(s) handed over for {block['calls']} timed call(s), "
                                 + (f"{block['owed']} call(s) announced before the previous one's output" if block["owed"]
                                    else "not one after each call"))
        self.blocks.append(entry)


def in_block(event: str | None, message: dict[str, Any]) -> bool:
    """Whether a worker's message is part of a timed block: a timed call's announcement or output."""
    return ((event == "call" and message.get("what") == "timed")
            or (event == "output" and message.get("kind") == "timed"))
