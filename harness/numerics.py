"""Ground truth and output comparison. Runs on the trusted side only (harness/judge.py).

The comparison is one replaceable function, `compare(out, truth, expected, tol)`.
"""
from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import torch


@dataclass(frozen=True)
class Comparison:
    ok: bool
    message: str
    max_abs_error: float | None = None
    max_rel_error: float | None = None      # max |out - truth| / max(|truth|, atol)
    rel_l2_error: float | None = None       # ||out - truth|| / ||truth||
    mismatched: int | None = None           # elements outside atol + rtol * |truth|
    numel: int | None = None
    worst_index: tuple[int, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _to(x: Any, device, dtype=None):
    if isinstance(x, torch.Tensor):
        x = x.to(device)
        if dtype is not None and x.is_floating_point():
            x = x.to(dtype)
    return x


@torch.no_grad()
def ground_truth(model: torch.nn.Module, inputs: Sequence[Any], device) -> tuple[torch.Tensor, str]:
    """Evaluate the reference in float64 (weights and inputs cast); fall back to float32 with
    TF32 disabled if the model cannot run in float64. Returns (output, precision used)."""
    try:
        m64 = copy.deepcopy(model).to(device).double()
        out = m64(*[_to(x, device, torch.float64) for x in inputs])
        return out, "float64"
    except (RuntimeError, TypeError, NotImplementedError):
        pass
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        out = copy.deepcopy(model).to(device)(*[_to(x, device) for x in inputs])
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    return out, "float32_strict"


def compare(out: Any, truth: torch.Tensor, expected_dtype: torch.dtype, atol: float, rtol: float) -> Comparison:
    if not isinstance(out, torch.Tensor):
        return Comparison(False, f"output is {type(out).__name__}, expected a torch.Tensor")
    if tuple(out.shape) != tuple(truth.shape):
        return Comparison(False, f"shape mismatch: got {tuple(out.shape)}, expected {tuple(truth.shape)}")
    if out.dtype != expected_dtype:
        return Comparison(False, f"dtype mismatch: got {out.dtype}, expected {expected_dtype}")
    got = out.to(truth.device, torch.float64)
    ref = truth.to(torch.float64)
    numel = ref.numel()
    if numel == 0:
        return Comparison(True, "empty output", 0.0, 0.0, 0.0, 0, 0)
    # NaN/Inf in the output are errors unless ground truth has the same value at the same place
    same_nonfinite = (~torch.isfinite(ref)) & ((got == ref) | (torch.isnan(got) & torch.isnan(ref)))
    diff = (got - ref).abs()
    diff = torch.where(same_nonfinite, torch.zeros_like(diff), diff)
    diff = torch.nan_to_num(diff, nan=float("inf"))
    ref_abs = torch.where(torch.isfinite(ref), ref.abs(), torch.zeros_like(ref))
    allowed = atol + rtol * ref_abs
    excess = diff - allowed
    mismatched = int((excess > 0).sum())
    worst_flat = int(torch.argmax(excess.reshape(-1)))
    worst = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst_flat), ref.shape))
    max_abs = float(diff.max())
    max_rel = float((diff / torch.clamp(ref_abs, min=max(atol, 1e-30))).max())
    finite = torch.isfinite(ref)
    ref_norm = float(torch.linalg.vector_norm(ref[finite]))
    err_norm = float(torch.linalg.vector_norm(diff[finite & torch.isfinite(diff)]))
    nonfinite_out = int((~torch.isfinite(got) & finite).sum())
    rel_l2 = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else float("inf"))
    if nonfinite_out:
        rel_l2 = float("inf")
    ok = mismatched == 0
    if ok:
        message = f"max abs error {max_abs:.3g}, rel L2 {rel_l2:.3g}"
    else:
        message = (f"{mismatched} of {numel} elements outside atol={atol:g} + rtol={rtol:g}*|truth| "
                   f"(max abs error {max_abs:.3g}, rel L2 {rel_l2:.3g}; worst at index {list(worst)}: "
                   f"got {float(got.reshape(-1)[worst_flat]):.6g}, expected {float(ref.reshape(-1)[worst_flat]):.6g})")
        if nonfinite_out:
            message += f"; {nonfinite_out} NaN/Inf where ground truth is finite"
    return Comparison(ok, message, max_abs, max_rel, rel_l2, mismatched, numel, worst)
