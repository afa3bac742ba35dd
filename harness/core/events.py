"""The worker -> parent channel: JSON lines appended to a file (kept even if the worker dies)."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


class EventWriter:
    def __init__(self, path: Path | int):
        """`path`: the file, or a descriptor of it opened for appending."""
        self.file = open(path, "a", buffering=1)

    def mark(self, kind: bytes) -> None:
        """Timing marks go to a lane (harness/run/worker.py ChannelSink); a file has none to take."""

    def emit(self, event: str, **fields: Any) -> None:
        """`t` is time.monotonic(), one clock for every process of the host."""
        self.file.write(json.dumps({"event": event, "t": time.monotonic(), **fields}, default=str) + "\n")
        self.file.flush()


class EventReader:
    """Incremental reader: `poll()` returns the complete lines appended since the last call."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.offset = 0
        self.events: list[dict[str, Any]] = []

    def poll(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        new = []
        for line in data[:end].splitlines():
            try:
                new.append(json.loads(line))
            except json.JSONDecodeError:
                new.append({"event": "garbled", "raw": line[:200].decode(errors="replace")})
        self.events.extend(new)
        return new
