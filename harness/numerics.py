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
    margin: float | None = None             # how many times the error could grow before failing

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


def compare(out: Any, truth: torch.Tensor, expected_dtype: torch.dtype, tol) -> Comparison:
    """Check `out` against float64 `truth` with a tolerance (atol, rtol, rel_l2): shape, dtype,
    then elementwise allclose AND relative L2. NaN/Inf pass only where truth has the same value."""
    if not isinstance(out, torch.Tensor):
        return Comparison(False, f"output is {type(out).__name__}, expected a torch.Tensor")
    if tuple(out.shape) != tuple(truth.shape):
        return Comparison(False, f"shape mismatch: got {tuple(out.shape)}, expected {tuple(truth.shape)}")
    if out.dtype != expected_dtype:
        return Comparison(False, f"dtype mismatch: got {out.dtype}, expected {expected_dtype}")
    atol, rtol, rel_l2_tol = tol.atol, tol.rtol, tol.rel_l2
    got = out.to(truth.device, torch.float64)
    ref = truth.to(torch.float64)
    numel = ref.numel()
    if numel == 0:
        return Comparison(True, "empty output", 0.0, 0.0, 0.0, 0, 0, None, float("inf"))
    finite = torch.isfinite(ref)
    same_nonfinite = (~finite) & ((got == ref) | (torch.isnan(got) & torch.isnan(ref)))
    diff = (got - ref).abs()
    diff = torch.where(same_nonfinite, torch.zeros_like(diff), diff)
    diff = torch.nan_to_num(diff, nan=float("inf"))
    ref_abs = torch.where(finite, ref.abs(), torch.zeros_like(ref))
    allowed = atol + rtol * ref_abs
    ratio = torch.where(allowed > 0, diff / allowed.clamp(min=1e-300),
                        torch.where(diff > 0, torch.full_like(diff, float("inf")), torch.zeros_like(diff)))
    mismatched = int((ratio > 1).sum())
    worst_flat = int(torch.argmax(ratio.reshape(-1)))
    worst = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst_flat), ref.shape))
    max_ratio = float(ratio.reshape(-1)[worst_flat])
    max_abs = float(diff.max())
    max_rel = float((diff / torch.clamp(ref_abs, min=max(atol, 1e-30))).max())
    nonfinite_out = int((~torch.isfinite(got) & finite).sum())
    ref_norm = float(torch.linalg.vector_norm(ref[finite]))
    err_norm = float(torch.linalg.vector_norm(diff[finite])) if not nonfinite_out else float("inf")
    rel_l2 = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else float("inf"))
    margins = [1 / max_ratio if max_ratio > 0 else float("inf"),
               rel_l2_tol / rel_l2 if rel_l2 > 0 else float("inf")]
    margin = min(margins)
    ok = mismatched == 0 and rel_l2 <= rel_l2_tol
    summary = f"max abs error {max_abs:.3g}, rel L2 {rel_l2:.3g}"
    if ok:
        message = f"{summary} (margin {margin:.3g}x)"
    else:
        parts = []
        if mismatched:
            parts.append(f"{mismatched} of {numel} elements outside atol={atol:g} + rtol={rtol:g}*|truth|")
        if rel_l2 > rel_l2_tol:
            parts.append(f"rel L2 {rel_l2:.3g} > {rel_l2_tol:g}")
        message = (f"{'; '.join(parts)} ({summary}; worst at index {list(worst)}: got "
                   f"{float(got.reshape(-1)[worst_flat]):.6g}, expected {float(ref.reshape(-1)[worst_flat]):.6g})")
        if nonfinite_out:
            message += f"; {nonfinite_out} NaN/Inf where ground truth is finite"
    return Comparison(ok, message, max_abs, max_rel, rel_l2, mismatched, numel, worst, margin)


PRECISION_CLASSES = ("fp32", "tf32")  # strictest first


def classify(out: Any, truth: torch.Tensor, expected_dtype: torch.dtype, tolerances: dict) -> tuple[str | None, Comparison]:
    """The strictest precision class `out` falls in (None = incorrect), with the comparison that
    decided it (the tf32 comparison when it is in no class)."""
    comparison = None
    for name in PRECISION_CLASSES:
        comparison = compare(out, truth, expected_dtype, tolerances[name])
        if comparison.ok:
            return name, comparison
    return None, comparison


def _layout_hint(ref_model: torch.nn.Module | None, ref_name: str) -> str:
    if ref_model is None or "." not in ref_name and not hasattr(ref_model, ref_name):
        return ""
    owner_name = ref_name.rsplit(".", 1)[0] if "." in ref_name else ""
    owner = dict(ref_model.named_modules()).get(owner_name)
    if isinstance(owner, torch.nn.modules.conv._ConvTransposeNd) and ref_name.endswith("weight"):
        return "; nn.ConvTranspose2d weights are (in_channels, out_channels/groups, kh, kw)"
    if isinstance(owner, torch.nn.modules.conv._ConvNd) and ref_name.endswith("weight"):
        return "; nn.Conv2d weights are (out_channels, in_channels/groups, kh, kw)"
    return ""


def diagnose_parameters(new: dict[str, torch.Tensor], ref: dict[str, torch.Tensor],
                        ref_model: torch.nn.Module | None = None) -> list[str]:
    """Compare ModelNew's parameters/buffers (after matched-seed construction) with the
    reference's. Returns one line per difference: which parameter, and how it differs."""
    lines: list[str] = []
    if len(new) != len(ref):
        lines.append(f"ModelNew has {len(new)} parameters/buffers ({', '.join(new) or 'none'}); "
                     f"the reference has {len(ref)} ({', '.join(ref) or 'none'})")
    by_name = set(new) == set(ref)
    leaf = lambda name: name.rsplit(".", 1)[-1]  # noqa: E731
    new_leaves, ref_leaves = [leaf(n) for n in new], [leaf(n) for n in ref]
    by_leaf = not by_name and sorted(new_leaves) == sorted(ref_leaves) and len(set(ref_leaves)) == len(ref_leaves)
    if by_name:
        pairs, how_paired = [(n, n) for n in ref], ""
    elif by_leaf:
        pairs = [(next(n for n in new if leaf(n) == leaf(r)), r) for r in ref]
        how_paired = "name"
    else:
        pairs, how_paired = list(zip(new, ref)), "position"
    for new_name, ref_name in pairs:
        a, b = new[new_name], ref[ref_name]
        label = f"'{new_name}'" if by_name else f"'{new_name}' (paired with reference '{ref_name}' by {how_paired})"
        if tuple(a.shape) != tuple(b.shape):
            how = ""
            if sorted(a.shape) == sorted(b.shape):
                how = " (the same sizes in another order: a transposed layout?)"
            lines.append(f"parameter {label} has shape {tuple(a.shape)}, the reference's is {tuple(b.shape)}{how}"
                         f"{_layout_hint(ref_model, ref_name)}")
        elif a.dtype != b.dtype:
            lines.append(f"parameter {label} is {a.dtype}, the reference's is {b.dtype}")
        elif not torch.equal(a, b):
            diff = float((a.double() - b.double()).abs().max())
            if torch.equal(a.flatten().sort().values, b.flatten().sort().values):
                how = "the same values in another arrangement (a permuted layout?)"
            else:
                how = ("a different init order or init function (construct parameters as the reference "
                       "does, in the same order, after the same seed)")
            lines.append(f"parameter {label} has the reference's shape but different values "
                         f"(max difference {diff:.3g}): {how}")
    return lines
