"""Run precisions (`--precision`, config `precision`) and the precision classes each one accepts.

A run's precision is the dtype both models and the floating-point inputs are cast to, as
KernelBench casts them: fp32 (the default: inputs and parameters as the problem makes them, no
cast), fp16 or bf16. A class is a tolerance against float64 ground truth (correctness.<class> in
the config, calibrated in tests/test_calibration.py). A run accepts its own class and the classes
stricter than it that an output of its dtype can tell apart from its own; the first one an output
passes, strictest first, is the class it earns:

  fp32 run: fp32, then tf32 (TF32's 10-bit significand in the products)
  fp16 run: fp32, then fp16 (fp32 math rounded once to fp16 passes with >= 10x margin)
  bf16 run: fp32, then bf16

The fp16 class cannot be offered to a bf16 run, nor tf32 to either half run: fp16's tolerance
must let fp16's own rounding pass with a 10x margin, and bf16's rounding is only 8x larger, so
every bf16 output would earn "fp16" and the class would say nothing; tf32's relative L2 bound
(3e-3) is looser than fp16's, so it would let bf16 arithmetic pass in an fp16 run.

Each class is timed against one of two baselines: PyTorch's default ("reference"), or its
strictest setting: TF32 off in an fp32 run ("reference_fp32"), the reduced-precision reductions
(torch.backends.cuda.matmul.allow_fp16/bf16_reduced_precision_reduction) off in a half run
("reference_strict"). A run's own lowest class is timed against the default, a stricter class
against the strict setting. This module imports no torch: the runner uses it too.
"""
from __future__ import annotations

from contextlib import contextmanager

PRECISIONS = ("fp32", "fp16", "bf16")
TORCH_DTYPE = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
CLASSES = ("fp32", "tf32", "fp16", "bf16")          # every class the config holds a tolerance for
RUN_CLASSES = {"fp32": ("fp32", "tf32"), "fp16": ("fp32", "fp16"), "bf16": ("fp32", "bf16")}
STRICT_FLAG = {"fp16": "allow_fp16_reduced_precision_reduction", "bf16": "allow_bf16_reduced_precision_reduction"}


def classes(run: str) -> tuple[str, ...]:
    """The classes a run in `run` precision accepts, strictest first."""
    return RUN_CLASSES[run]


def strict_role(run: str) -> str:
    """The timing role of the run's strict baseline."""
    return "reference_fp32" if run == "fp32" else "reference_strict"


def baseline(run: str, cls: str) -> str:
    """The timing role a result of class `cls` is compared with."""
    return "reference" if cls == classes(run)[-1] else strict_role(run)


def baseline_label(role: str, run: str, device: str = "cuda") -> str:
    """How the table names a baseline other than PyTorch's default (the CPU has no stricter
    setting: both roles are the same there)."""
    if device == "cpu":
        return ""
    if role == "reference_fp32":
        return "TF32 off"
    if role == "reference_strict":
        return f"{run}, reduced-precision reduction off"
    return ""


def loosest(found: list[str], run: str) -> str:
    """The class of a pair: the loosest its outputs earned."""
    order = classes(run)
    return max(found, key=order.index)


def casts(run: str) -> str | None:
    """The torch dtype name inputs and models are cast to (None: an fp32 run casts nothing)."""
    return None if run == "fp32" else TORCH_DTYPE[run]


@contextmanager
def strict_backends(run: str, on: bool):
    """PyTorch's strictest setting for a run's precision while timing its strict baseline: TF32
    off everywhere (fp32), the reduced-precision reductions of fp16/bf16 GEMMs off as well (half
    runs). Restored afterwards."""
    import torch
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    names = [(matmul, "allow_tf32"), (cudnn, "allow_tf32")] + ([(matmul, STRICT_FLAG[run])] if run in STRICT_FLAG else [])
    saved = [getattr(owner, name) for owner, name in names]
    if on:
        for owner, name in names:
            setattr(owner, name, False)
    try:
        yield
    finally:
        for (owner, name), value in zip(names, saved):
            setattr(owner, name, value)
