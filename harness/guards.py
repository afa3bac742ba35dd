"""Anti-cheat checks, each a small function. The verdict itself is always computed on the
trusted side (harness/judge.py); these helpers gather evidence in the worker (aliasing,
poisoned memory, profiler kernel names, event-vs-wall timing) or judge it (inputs unchanged).
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

# Kernel names of libraries that do the work for a "custom" solution: cuDNN, cuBLAS(Lt), CUTLASS,
# the xmma/nvjet GEMM families and ATen's own convolution kernels.
_LIBRARY_KERNEL = re.compile(
    r"cudnn|cutlass|cublas|xmma|nvjet|implicit_convolve|winograd|\bfft|"
    r"^(void )?(ampere|volta|turing|hopper|sm\d+)_|"
    r"at::native::(\w+::)*(im2col|col2im|vol2col|col2vol|\w*conv\w*)", re.IGNORECASE)
# ATen CPU ops that only allocate, view or move data (not the computation itself).
_NEUTRAL_CPU_OPS = {
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::zeros", "aten::zeros_like", "aten::zero_",
    "aten::fill_", "aten::contiguous", "aten::view", "aten::reshape", "aten::as_strided", "aten::resize_",
    "aten::to", "aten::_to_copy", "aten::copy_", "aten::detach", "aten::select", "aten::slice", "aten::t",
    "aten::transpose", "aten::permute", "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::clone",
    "aten::lift_fresh", "aten::alias", "aten::item", "aten::_local_scalar_dense", "aten::result_type",
}


def is_library_kernel(name: str) -> bool:
    return bool(_LIBRARY_KERNEL.search(name))


def library_share(kernels: Iterable[tuple[str, float]]) -> dict[str, Any]:
    """kernels: (name, device time in us) of one solution call. Share of time in library kernels."""
    totals: dict[str, float] = {}
    for name, us in kernels:
        totals[name] = totals.get(name, 0.0) + us
    total = sum(totals.values())
    library = sum(us for name, us in totals.items() if is_library_kernel(name))
    top = sorted(totals.items(), key=lambda kv: -kv[1])[:5]
    return {"share": library / total if total > 0 else 0.0, "total_us": total,
            "top": [{"name": n[:160], "us": round(us, 2), "library": is_library_kernel(n)} for n, us in top]}


def cpu_op_share(ops: Iterable[tuple[str, float]], wall_us: float) -> dict[str, Any]:
    """ops: (aten op name, self CPU time in us). Share of the call's wall time spent in ATen
    compute ops (a C++ extension function appears in no ATen op)."""
    compute = [(n, us) for n, us in ops if n.startswith("aten::") and n not in _NEUTRAL_CPU_OPS]
    used = sum(us for _, us in compute)
    top = sorted(compute, key=lambda kv: -kv[1])[:5]
    return {"share": min(1.0, used / wall_us) if wall_us > 0 else 0.0, "total_us": wall_us,
            "top": [{"name": n, "us": round(us, 2), "library": True} for n, us in top]}


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


def tensor_digest(t) -> str:
    """sha256 of a tensor's dtype, shape and bytes (for the inputs-unchanged check: the worker
    digests the inputs after the call, the judge digests the regenerated inputs)."""
    import ctypes
    import hashlib

    import torch
    if not isinstance(t, torch.Tensor):
        return repr(t)
    host = t.detach().to("cpu").contiguous()
    h = hashlib.sha256(f"{host.dtype}{tuple(host.shape)}".encode())
    nbytes = host.numel() * host.element_size()
    if nbytes:  # the bytes read in place through a ctypes view: no numpy needed
        h.update((ctypes.c_char * nbytes).from_address(host.data_ptr()))
    return h.hexdigest()
