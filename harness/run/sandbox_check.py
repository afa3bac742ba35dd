"""The sandbox tried once, at a lane's start, the way a pair uses it (on CUDA runs).

Before its first pair, a lane sends one of its sandboxed spares a "probe": the spare starts CUDA
as a pair's worker does, runs a kernel from a thread made after CUDA started (the driver names
such threads through /proc), and hands the result to the lane by CUDA IPC, the handoff every
checked output takes. The lane compares it with its own. What fails there would fail every pair,
so it is found here, once: `sandbox: required` then stops the run (harness/run/runner.py, exit 2);
`auto` tries again without one part at a time (the unprivileged identity, then Landlock's file
rules, then both, then the sandbox) and runs with the first that works, naming in one warning
line what it left out and why.

KB_SANDBOX_PROBE=1 makes a CPU lane probe too; KB_SANDBOX_PROBE_FAULT=<part> makes the probe fail
while that part is active (a test's stand-in for a driver that refuses it).
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

PROBE_ELEMENTS = 1 << 16
PARTS = {"identity": "an unprivileged identity", "landlock": "Landlock's file rules", "sandbox": "the sandbox"}
_ACTIVE_MARKS = {"identity": "unprivileged uid", "landlock": "landlock-fs"}


def wanted(device: str) -> bool:
    return device == "cuda" or os.environ.get("KB_SANDBOX_PROBE") == "1"


def answer(sink, device: str) -> None:
    """In a spare (harness/run/worker.py serve): do what a pair's worker does first, and hand it over."""
    import torch
    report = json.loads(os.environ.get("KB_SANDBOX_REPORT") or '{"mode": "off", "active": []}')
    fault = os.environ.get("KB_SANDBOX_PROBE_FAULT", "")
    try:
        if fault in _ACTIVE_MARKS and any(_ACTIVE_MARKS[fault] in part for part in report.get("active", [])):
            raise RuntimeError(f"KB_SANDBOX_PROBE_FAULT: the probe fails while {PARTS[fault]} is active")
        if device == "cuda":
            torch.cuda.set_device(0)
        x = torch.arange(PROBE_ELEMENTS, dtype=torch.float32, device=device)
        done: dict[str, Any] = {}

        def later() -> None:
            try:
                done["y"] = x * 2 + 1
                if device == "cuda":
                    torch.cuda.synchronize()
            except BaseException as exc:  # noqa: BLE001 - reported by the thread that waits
                done["error"] = exc

        thread = threading.Thread(target=later)
        thread.start()
        thread.join()
        if "error" in done:
            raise done["error"]
        sink.handoff("probe", {"sandbox": report}, {"tensor": [done["y"]]})
    except Exception as exc:  # noqa: BLE001 - the lane decides what it means
        from ..isolate.channel import ChannelClosed
        if isinstance(exc, ChannelClosed):
            raise
        sink.emit("probe_failed", error=f"{type(exc).__name__}: {exc}".splitlines()[0][:500], sandbox=report)


def _try(pool, device: str, timeout_s: float = 180.0) -> str:
    """'' when a fresh spare of `pool` did the probe right; else what went wrong."""
    import torch

    from ..isolate.channel import ChannelClosed, ProtocolError
    from ..isolate.handoff import HandoffError, Imports
    from ..isolate.isolation import tail
    from .pool import kill
    spare = pool.take()
    try:
        spare.channel.send({"op": "probe", "device": device})
        deadline = time.monotonic() + timeout_s
        while True:
            got = spare.channel.recv(timeout=max(0.0, deadline - time.monotonic()))
            if got is None:
                return f"no answer within {timeout_s:g} s"
            message, payload = got
            if message.get("event") == "ready":
                continue
            if message.get("event") == "probe_failed":
                return str(message.get("error"))
            if message.get("event") != "probe":
                return f"an unexpected message {message.get('event')!r}"
            with Imports(device) as imports:
                view = imports.tensor(message["tensor"][0], payload)
                ok = bool(torch.equal(view, torch.arange(PROBE_ELEMENTS, dtype=torch.float32, device=device) * 2 + 1))
            spare.channel.send({"op": "ack"})
            return "" if ok else "the tensor it handed over did not hold its values"
    except (ChannelClosed, ProtocolError, HandoffError, OSError) as exc:
        spare.proc.poll()
        lines = [line for line in tail(spare.log_path).splitlines() if line.strip()]
        return f"{type(exc).__name__}: {exc}" + (f" (its log: {lines[-1][:300]})" if lines else "")
    finally:
        kill(spare)


def check_sandbox(pool, device: str) -> dict[str, Any]:
    """Probe the pool's sandbox; under `auto`, the first variant that works. Returns what the
    lane tells the runner: {"left_out": [words], "tries": [(parts left out, error)]}."""
    if not pool.sandboxed:
        return {}
    plan = pool.sandboxed["plan"]
    ladder = [()] if plan["mode"] == "required" else [(), ("identity",), ("landlock",), ("identity", "landlock"),
                                                       ("sandbox",)]
    if plan.get("identity", "same") == "same":
        ladder = [leave for leave in ladder if "identity" not in leave]
    tries: list[tuple[tuple[str, ...], str]] = []
    for leave in ladder:
        if leave != pool.leave_out:
            pool.restart(leave)
        error = _try(pool, device)
        if not error:
            why = tries[0][1] if tries else ""
            return {"left_out": [f"{PARTS[p]} (the lane's first sandboxed worker failed with it: {why})" for p in leave],
                    "tries": tries}
        tries.append((leave, error))
    if plan["mode"] == "required":
        return {"left_out": [f"the lane's first sandboxed worker failed: {tries[0][1]}"], "tries": tries}
    pool.restart(())  # nothing worked, the sandbox is not the cause: the pairs will say what is
    return {"left_out": [], "tries": tries, "failed": tries[-1][1]}
