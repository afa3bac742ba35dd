"""How much of one call of a solution library operators did: convolutions, matrix products,
attention and FFTs through PyTorch (cuDNN, cuBLAS, CUTLASS behind them), the evidence behind the
`library_passthrough` flag. Runs in the worker, on the profiled call only.

Every PyTorch operator the call dispatches, from Python or from an extension's C++, passes a
dispatch mode that times it: on CUDA with events on the stream it runs on, on the CPU with the
host clock. The call itself is timed as the timer does (CUDA: the whole device synchronized before
the end event), from when its first kernel can start. No profiler is started: CUDA's profiling
interface (CUPTI), once initialized, stays in the process and slows every kernel launch on the
GPU by about 30%, from any process (measured on an H200; see docs/harness-perf.md), and its
first session costs about 5 s.

What it cannot see: library routines an extension calls directly (cublasSgemm on raw pointers),
not through a PyTorch operator.
"""
from __future__ import annotations

import re
import time
from typing import Any, Callable

# PyTorch operators whose work is done by a vendor library on CUDA (cuDNN, cuBLAS(Lt), CUTLASS,
# cuFFT, flash/memory-efficient attention).
_LIBRARY_OP = re.compile(
    r"conv|cudnn|miopen|mkldnn|(^|_)(mm|addmm|bmm|baddbmm|addbmm|matmul|linear|mv|addmv|dot|scaled_mm)$|"
    r"scaled_dot_product|flash_attention|efficient_attention|cudnn_attention|fft", re.IGNORECASE)
# CPU: every ATen compute operator is library work (a C++ extension function is no ATen operator);
# these only allocate, view or move data.
NEUTRAL_OPS = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "zero_", "fill_", "contiguous", "view",
    "reshape", "as_strided", "resize_", "to", "_to_copy", "copy_", "detach", "select", "slice", "t", "transpose",
    "permute", "expand", "unsqueeze", "squeeze", "clone", "lift_fresh", "alias", "item", "_local_scalar_dense",
    "result_type", "new_empty", "new_empty_strided", "new_zeros", "unbind", "split", "chunk", "narrow", "_unsafe_view",
}


def op_name(func: Any) -> str:
    """'aten::addmm' of an OpOverload (the overload name dropped)."""
    try:
        name = func.name()
    except Exception:  # noqa: BLE001
        name = str(func)
    return name.split(".")[0].replace("aten.", "aten::")


def is_library_op(name: str, device: str) -> bool:
    base = name.split("::")[-1]
    if device == "cuda":
        return bool(_LIBRARY_OP.search(base))
    return base not in NEUTRAL_OPS


def measure(call: Callable[[], Any], device: str, sync: Callable[[], None]) -> dict[str, Any]:
    """Run `call` with every operator timed (once to warm the dispatch path, then measured); the
    share of the call's time in library operators, the call's time (us) and the five operators
    that took longest."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    records: list[tuple[str, Any, Any]] = []
    cuda = device == "cuda"

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                out = func(*args, **kwargs)
                end.record()
                records.append((op_name(func), start, end))
            else:
                t0 = time.perf_counter()
                out = func(*args, **kwargs)
                records.append((op_name(func), t0, time.perf_counter()))
            return out

    begin, finish = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if cuda else (0, 0)
    with Ops():  # entered first: its set-up is not the call's time
        call()   # and one call first: the first dispatch of each operator through it is slow
        sync()
        records.clear()
        if cuda:
            # the device sleeps a little first, so the begin event is taken once the call's first
            # kernels are queued: the host's work before its first launch is not the call's time
            torch.cuda._sleep(2_000_000)
            begin.record()
        wall0 = time.perf_counter()
        call()
        sync()
        wall_us = (time.perf_counter() - wall0) * 1e6
    if cuda:
        finish.record()
        finish.synchronize()
        total_us = begin.elapsed_time(finish) * 1e3
        times = [(name, a.elapsed_time(b) * 1e3) for name, a, b in records]
    else:
        total_us = wall_us
        times = [(name, (b - a) * 1e6) for name, a, b in records]
    totals: dict[str, float] = {}
    for name, us in times:
        totals[name] = totals.get(name, 0.0) + us
    library = sum(us for name, us in totals.items() if is_library_op(name, device))
    top = sorted(totals.items(), key=lambda kv: -kv[1])[:5]
    return {"share": min(1.0, library / total_us) if total_us > 0 else 0.0, "total_us": total_us,
            "top": [{"name": n[:160], "us": round(us, 2), "library": is_library_op(n, device)} for n, us in top]}
