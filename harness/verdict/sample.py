"""What the lane took from a worker while it was stopped (Taken), bitwise equality (same_bits), and
the secret sample of timed calls the lane judges when every timed call is handed over alike
(TimedSample, checks.secret_timed_checks)."""
from __future__ import annotations

import ctypes
import math
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch



@dataclass
class Taken:
    """What the lane took from a worker while it was stopped."""
    entry: dict[str, Any]
    out: torch.Tensor | None = None
    problem: str | None = None    # why the output is refused before any comparison
    inputs: list = field(default_factory=list)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN payloads and signed zeros included)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.contiguous(), b.contiguous()
    if a.is_floating_point() or a.is_complex():
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    return bool(torch.equal(a, b))


class TimedSample:
    """Which timed calls are judged when every timed call is handed over alike
    (checks.secret_timed_checks): a uniform sample of `k` of them, by reservoir sampling from the
    operating system's randomness, drawn here in the lane once a call has returned; the worker
    never holds it, and the result names the calls only after the last one. A call the sample
    keeps is taken (the worker stopped, the output checked for aliasing and written inputs,
    copied into one of k buffers); one it does not keep is only acknowledged. The worker may tell
    afterwards, from how long it waited, whether a call was kept; that says nothing of the next
    call: call i is kept with chance k/i whatever became of the calls before it.

    With `spill_dir` (CPU lanes), the k buffers are files there, and a kept output is read back
    only when it is judged: k copies of an output of hundreds of megabytes would otherwise take the
    memory the float64 truth needs (problem 69 on a 24 GB machine was skipped for it).

    On CUDA, buffers that would take more than `device_bytes` in all are made in host memory
    (KernelBench's softmax: six copies of a 6.4 GB output), and a kept output goes back to the
    device, one at a time, to be judged.

    `keep=False`: the same draws and the same work for each call it would keep, into one buffer,
    nothing kept (a reference worker's outputs: harness/run/rounds.py ReferenceRounds)."""

    def __init__(self, k: int, spill_dir: Path | None = None, keep: bool = True, device_bytes: int | None = None):
        self.k, self.seen, self.keep = k, 0, keep
        self.rng = secrets.SystemRandom()
        self.spill_dir = spill_dir
        self.device_bytes = device_bytes  # buffers larger than this in all go to host memory (CUDA)
        self.home: torch.device | None = None  # the outputs' device, where a kept one is judged
        self.buffers: list[torch.Tensor] = []
        self.spilled: dict[int, tuple[Path, tuple, torch.dtype]] = {}  # slot -> its file, shape and dtype
        self.kept: dict[int, "Taken"] = {}        # slot -> the call's Taken (its `out` is that slot's buffer)

    def draw(self) -> int | None:
        """For the call that has just returned: the slot the sample keeps it in, or None."""
        self.seen += 1
        if self.seen <= self.k:
            return self.seen - 1
        j = self.rng.randrange(self.seen)
        return j if j < self.k else None

    def store(self, taken: "Taken", view: torch.Tensor, slot: int) -> None:
        slot = slot if self.keep else 0
        if self.spill_dir is not None and view.device.type == "cpu":
            self._spill(slot, taken, view)
            return
        count = self.k if self.keep else 1
        if not self.buffers or self.buffers[0].shape != view.shape or self.buffers[0].dtype != view.dtype \
                or self.home != view.device:
            where = view.device
            if where.type == "cuda" and self.device_bytes is not None \
                    and count * view.numel() * view.element_size() > self.device_bytes:
                where = torch.device("cpu")
            self.buffers = [torch.empty(view.shape, dtype=view.dtype, device=where) for _ in range(count)]
            self.home = view.device
            self.kept.clear()  # another shape: the calls before it are not comparable (they were not kept)
        self.buffers[slot].copy_(view)
        if self.keep:
            taken.out = self.buffers[slot]
            taken.inputs = []  # drawn again from its seed when it is judged
            self.kept[slot] = taken

    def _spill(self, slot: int, taken: "Taken", view: torch.Tensor) -> None:
        shape = (tuple(view.shape), view.dtype)
        if any(known[1:] != shape for known in self.spilled.values()):
            self.kept.clear()  # another shape: the calls before it are not comparable (they were not kept)
            self.spilled.clear()
        self.spill_dir.mkdir(parents=True, exist_ok=True)
        path = self.spill_dir / f"slot-{slot}.bin"
        data = view.detach().contiguous()
        with open(path, "wb") as f:
            if data.numel():  # the tensor's own bytes, without numpy (the harness does not need it)
                f.write(memoryview((ctypes.c_char * (data.numel() * data.element_size())).from_address(data.data_ptr())))
        self.spilled[slot] = (path, *shape)
        if self.keep:
            taken.out = None
            taken.inputs = []
            self.kept[slot] = taken

    @property
    def on_host(self) -> bool:
        """Whether kept outputs wait away from their device (files, or host buffers)."""
        return self.spill_dir is not None or bool(self.buffers) and self.buffers[0].device != self.home

    def output_of(self, taken: "Taken") -> torch.Tensor:
        """A kept call's output: its buffer (back on its device), or its file read back."""
        if taken.out is not None:
            return taken.out.to(self.home) if self.home is not None and taken.out.device != self.home else taken.out
        slot = next(s for s, t in self.kept.items() if t is taken)
        path, shape, dtype = self.spilled[slot]
        numel = math.prod(shape)
        if not numel:
            return torch.empty(shape, dtype=dtype)
        return torch.from_file(str(path), shared=False, size=numel, dtype=dtype).view(shape)

    def release(self) -> None:
        self.buffers, self.kept = [], {}
        for path, *_ in self.spilled.values():
            path.unlink(missing_ok=True)
        self.spilled = {}
