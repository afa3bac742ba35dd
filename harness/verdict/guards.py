"""Anti-cheat checks, each a small function. The verdict itself is always computed on the
trusted side (harness/verdict/judge.py: outputs, inputs unchanged, aliasing of device memory); these
helpers gather evidence in the worker (aliasing, poisoned memory, event-vs-wall timing;
library operators: harness/verdict/libshare.py).
"""
from __future__ import annotations

from typing import Any, Sequence


def storage_span(t) -> tuple[int, int]:
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def aliased_input(out: Any, inputs: Sequence[Any]) -> int | None:
    """Index of the input whose memory the output shares, if any."""
    import torch
    if not isinstance(out, torch.Tensor) or out.numel() == 0:
        return None
    o0, o1 = storage_span(out)
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.numel() and x.device == out.device:
            x0, x1 = storage_span(x)
            if o0 < x1 and x0 < o1:
                return i
    return None


def poison_free_memory(device: str, hint_bytes: int) -> int:
    """Fill the CUDA caching allocator's free memory with NaN (all-ones bytes), so an output that is
    never written reads as NaN. Fully free segments are returned to the driver; every free block
    left (e.g. the rest of a segment an input lives in) is taken at its exact size, filled and
    freed; then one block of max(1 GiB, 4 x hint) bytes (at most 60% of free memory) is added.
    Returns the poisoned byte count (0 on the CPU, where this is not possible)."""
    if device != "cuda":
        return 0
    import torch
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    small = torch.empty(512, dtype=torch.uint8, device=device)  # opens a small-pool segment (<= 1 MB tensors)
    small.fill_(255)
    sizes = [block["size"] for segment in torch.cuda.memory_snapshot() for block in segment["blocks"]
             if block["state"] == "inactive"]
    free, _ = torch.cuda.mem_get_info()
    sizes.append(int(min(free * 0.6, max(1 << 30, 4 * hint_bytes))))
    held = []
    for size in sorted(sizes):
        block = torch.empty(size, dtype=torch.uint8, device=device)
        block.fill_(255)  # 0xFFFFFFFF is a NaN in float32 (and float16/bfloat16/float64)
        held.append(block)
    total = sum(b.numel() for b in held) + small.numel()
    del held, small
    return total


def timing_consistent(event_median_ms: float, wall_median_ms: float) -> bool:
    """CUDA-event time (device synchronized before the end event) should match the host's wall
    time of the same calls; far less means the event timing was tampered with."""
    return event_median_ms >= 0.7 * wall_median_ms - 0.02
