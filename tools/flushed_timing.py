"""The decision-aid benches' timer (bench_strided.py, bench_means.py, bench_tails.py, ablate_sp.py):
the median CUDA-event time of a call, L2 flushed (256 MiB written) before each, and their common
arguments. Not the harness's timing (harness/verdict/timing.py), which a solution's speed is."""
from __future__ import annotations

import argparse
import statistics


def bench_arguments(doc: str, calls: int, rounds: int) -> argparse.ArgumentParser:
    """A bench's parser: its docstring's first line, --calls (per median) and --rounds (alternating)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--calls", type=int, default=calls)
    p.add_argument("--rounds", type=int, default=rounds)
    return p


class FlushedTimer:
    def __init__(self, calls: int):
        import torch
        self.calls = calls
        self.flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")

    def __call__(self, fn, *args) -> float:
        """Median ms of fn(*args) over self.calls calls."""
        import torch
        times = []
        for _ in range(self.calls):
            self.flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*args)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)
