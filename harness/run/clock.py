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
sent early moves work out of the call's interval, and into the block's."""
from __future__ import annotations

from typing import Any

from ..isolate.channel import Marks


class BlockClock:
    def __init__(self) -> None:
        self.blocks: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None

    @property
    def is_open(self) -> bool:
        return self._open is not None

    def open(self, at: float) -> None:
        """A block starts at `at` (a block already open is started over: a block worker's warm-up)."""
        self._open = {"at": at, "calls": 0, "returns": 0, "taken_s": 0.0, "began": None, "inner": []}

    def call(self, what: str | None) -> None:
        """A call announced on the channel (a timed one counts)."""
        if self._open is not None and what == "timed":
            self._open["calls"] += 1

    def marks(self, marks: list[tuple[bytes, float]]) -> None:
        """The worker's marks, as drained (kind, the kernel's stamp of its sending)."""
        block = self._open
        if block is None:
            return
        for kind, stamp in marks:
            if kind == Marks.CALL:
                block["began"] = stamp
            elif kind == Marks.RETURNED:
                block["returns"] += 1
                if block["began"] is not None:
                    block["inner"].append(round((stamp - block["began"]) * 1e3, 5))
                    block["began"] = None

    def lane_work(self, seconds: float) -> None:
        """The lane's own work inside the block (the worker waited for it): not the worker's."""
        if self._open is not None:
            self._open["taken_s"] += seconds

    def close(self, at: float, idle_s: float = 0.0, unended: str = "") -> None:
        """The block ends at `at`; `idle_s`: the lane's wait, after that, for the GPU to go idle (work
        the worker left running, counted as the block's); `unended`: the message that ended the block
        where the worker did not close it."""
        block, self._open = self._open, None
        if block is None:
            return
        ms = (at - block["at"] - block["taken_s"] + idle_s) * 1e3
        entry = {"ms": round(ms, 5), "calls": block["calls"], "returns": block["returns"], "inner": block["inner"],
                 "taken_ms": round(block["taken_s"] * 1e3, 3), "idle_ms": round(idle_s * 1e3, 3)}
        if unended:
            entry["unended"] = unended
        self.blocks.append(entry)


def in_block(event: str | None, message: dict[str, Any]) -> bool:
    """Whether a worker's message is part of a timed block: a timed call's announcement or output."""
    return ((event == "call" and message.get("what") == "timed")
            or (event == "output" and message.get("kind") == "timed"))
