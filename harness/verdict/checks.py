"""What the lane measures of a problem and of its device, for every pair of it (issue 45):

  - `dependence`: whether the reference's output depends on its inputs enough that a right output
    can be told from a cheap one. Its outputs for two independent input draws are compared as a
    solution's output is, in the loosest class of the run: where the second would pass for the
    first, where one fixed output (their expected value) would lie within the class's rel L2 bound
    of both, where an output is constant or zero, or where it is rounding noise around zero (41: a
    mean over a group-normalised tensor), the problem is `degenerate_problem` (KernelBench's
    level-2 problems 80 and 83 always output zero; 36 outputs its bias whatever the input; on
    10, 42, 44 and 91 another input's output passes KernelBench's own check). Every result of it
    is flagged, and its speedups are left out of geometric means by default.
  - `floor`: the least time a call can take on this device: its output written at the device's
    peak memory bandwidth (from its properties: memory clock x bus width x 2), the part that can
    sit in L2 left out; where the problem declares it (floors.yaml beside its file:
    problems.declaration), its inputs read as well and its least arithmetic at the device's
    fastest dense tensor-core rate. A solution measured faster is `below_floor`
    (checks.below_floor: flag|fail).

Both are plain data in each result's `problem_checks`.
"""
from __future__ import annotations

import math
from typing import Any


def dependence(outputs: tuple[Any, Any], tolerance, exact=None) -> dict[str, Any]:
    """The reference's outputs for two independent input draws: their relative L2 difference,
    whether either is constant or zero, whether the second passes for the first at `tolerance`
    (the run's loosest class), whether they are rounding noise around zero, and the verdict
    `degenerate`. `exact`: a function giving the two draws' outputs in float64, called only where
    both outputs lie within atol of zero: where the reference's own error on them is above the rel
    L2 bound, the bound is NOISE_FACTOR x that error (judge.PairJudgement._within_noise), and
    where that is 1 or more a zero output passes for every input."""
    import torch

    from .numerics import NOISE_FACTOR, compare, rel_l2 as relative
    a, b = outputs
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != b.shape or not a.numel():
        return {"measured": False}
    a64, b64 = a.detach().double(), b.detach().double()
    norm = float(torch.linalg.vector_norm(a64))
    rel_l2 = float(torch.linalg.vector_norm(a64 - b64)) / norm if norm else float("inf") if (a64 != b64).any() else 0.0
    zero = bool((a64 == 0).all() and (b64 == 0).all())
    constant = bool(a64.min() == a64.max() and b64.min() == b64.max())
    passes = bool(compare(b, a64, b.dtype, tolerance, explain=False).ok)
    # one fixed output, the reference's expected output, lies rel_l2 / sqrt(2) from each draw's
    # (two independent draws differ by sqrt(2) x their spread): within the class's bound, a
    # solution that ignores its inputs could pass
    fixed = rel_l2 / math.sqrt(2) <= tolerance.rel_l2
    noise = None
    if not zero and exact is not None and bool((a64.abs() <= tolerance.atol).all() and (b64.abs() <= tolerance.atol).all()):
        truths = exact()
        if truths is not None:
            noise = min(relative(out, truth) for out, truth in zip((a, b), truths))
    # a zero output's rel L2 is 1: it passes where the bound is NOISE_FACTOR x the noise
    noisy = noise is not None and noise > tolerance.rel_l2 and NOISE_FACTOR * noise >= 1
    why = ("its output is zero for both inputs" if zero else "its output is constant for both inputs" if constant
           else f"its output is rounding noise around zero (within atol of it for both inputs, the float32 "
                f"reference's own error on them rel L2 {noise:.2g}): a zero output passes" if noisy
           else f"its output for another input passes for this one (rel L2 {rel_l2:.2g})" if passes
           else f"one fixed output would lie within the class's rel L2 bound of every input's (two inputs' outputs "
                f"differ by rel L2 {rel_l2:.2g}, {rel_l2 / math.sqrt(2):.2g} from their mean; bound "
                f"{tolerance.rel_l2:.2g})" if fixed else "")
    return {"measured": True, "rel_l2": rel_l2, "zero": zero, "constant": constant, "another_input_passes": passes,
            "fixed_output_passes": fixed, **({"noise_rel_l2": noise} if noise is not None else {}),
            "degenerate": bool(why), "why": why}


def peak_bandwidth(properties) -> float | None:
    """Bytes per second the device's memory can move at most, from its properties (CUDA:
    memory_clock_rate in kHz, memory_bus_width in bits, double data rate); None where unknown."""
    clock = getattr(properties, "memory_clock_rate", None)
    width = getattr(properties, "memory_bus_width", None)
    if not clock or not width:
        return None
    return 2.0 * float(clock) * 1e3 * float(width) / 8.0


# Dense tensor-core arithmetic per SM and clock, in FLOP (a multiply-add is 2), at the fastest
# operand type of 8 bits or more each architecture has (int8 or fp8; 4-bit products are left out:
# meeting a class of fp16 or wider from them takes more products than their rate gains). From
# NVIDIA's datasheets, over SMs x boost clock: V100 fp16, T4/A10/L40S int8 or fp8, A100 int8,
# H100/H200 fp8 and int8 (1979 TFLOP/s at 1.83 GHz x 132 SMs), B200 fp8.
TENSOR_FLOP_PER_SM_CLOCK = {(7, 0): 1024, (7, 2): 1024, (7, 5): 2048, (8, 0): 4096, (8, 6): 2048, (8, 7): 2048,
                            (8, 9): 2048, (9, 0): 8192, (10, 0): 16384}


def peak_flops(properties) -> float | None:
    """FLOP per second the device can do at most in any arithmetic a class can be met with: the
    fastest dense tensor-core rate (TENSOR_FLOP_PER_SM_CLOCK) x SMs x the SM clock (clock_rate,
    kHz, the boost clock); None for an architecture not in the table or a device that does not say."""
    per = TENSOR_FLOP_PER_SM_CLOCK.get((getattr(properties, "major", None), getattr(properties, "minor", None)))
    sms = getattr(properties, "multi_processor_count", None)
    clock = getattr(properties, "clock_rate", None)
    if not per or not sms or not clock:
        return None
    return float(per) * float(sms) * float(clock) * 1e3


def floor(out_bytes: int, properties, in_bytes: int = 0, declared: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The least time (ms) a call takes on a device with these properties, or None where it
    cannot be told. Always: its output written at the device's peak memory bandwidth, the part
    that can stay in L2 left out. Where the problem declares it (problems.declaration): every
    input byte read as well (`reads_inputs`: after the L2 flush they come from memory), and its
    least arithmetic (`min_flop`) at the fastest rate of peak_flops. The floor is the larger."""
    bandwidth = peak_bandwidth(properties)
    l2 = int(getattr(properties, "L2_cache_size", 0) or 0)
    declared = declared or {}
    reads = int(in_bytes) if declared.get("reads_inputs") else 0
    moved = reads + max(0, int(out_bytes) - l2)
    bytes_ms = moved / bandwidth * 1e3 if bandwidth and moved > 0 else None
    flops = peak_flops(properties)
    flop = declared.get("min_flop")
    flop_ms = flop / flops * 1e3 if flop and flops else None
    if bytes_ms is None and flop_ms is None:
        return None
    found: dict[str, Any] = {"ms": max(bytes_ms or 0.0, flop_ms or 0.0),
                             "bound": "flop" if (flop_ms or 0.0) > (bytes_ms or 0.0) else "bytes",
                             "out_bytes": int(out_bytes), "l2_bytes": l2}
    if bandwidth:
        found.update(bytes_ms=bytes_ms or 0.0, peak_bandwidth_tb_s=round(bandwidth / 1e12, 3))
    if declared:
        found.update(declared=declared.get("file", ""), in_bytes=reads)
    if flop_ms is not None:
        found.update(flop_ms=flop_ms, min_flop=int(flop), peak_tflops=round(flops / 1e12, 1))
    return found


def below_floor(timing: dict[str, Any], floor_: dict[str, Any] | None) -> str:
    """'' or the line that says a measured time lies below the physical floor."""
    if not floor_ or "solution" not in timing:
        return ""
    ms = timing["solution"]["median_ms"]
    if ms >= floor_["ms"]:
        return ""
    if floor_.get("bound") == "flop":
        gflop = floor_["min_flop"] / 1e9
        why = (f"the {f'{gflop:,.0f}' if gflop >= 100 else f'{gflop:.3g}'} GFLOP its problem declares it needs at least "
               f"({floor_.get('declared') or 'declared'}) cannot be done that fast at the device's fastest "
               f"dense tensor-core rate ({floor_['peak_tflops']} TFLOP/s)")
    else:
        reads = floor_.get("in_bytes") or 0
        why = (f"its output ({floor_['out_bytes'] / 1e6:.1f} MB, {floor_['l2_bytes'] / 1e6:.0f} MB of it allowed "
               f"for in L2)" + (f" and its inputs ({reads / 1e6:.1f} MB, each byte needed: "
                                f"{floor_.get('declared') or 'declared'})" if reads else "")
               + f" cannot be moved that fast at the device's peak memory bandwidth "
                 f"({floor_['peak_bandwidth_tb_s']} TB/s)")
    return f"measured {ms:.4g} ms a call, below the floor of {floor_['ms']:.4g} ms: {why}"
