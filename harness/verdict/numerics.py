"""Ground truth and output comparison. Runs on the trusted side only (harness/verdict/judge.py).

The comparison is one replaceable function, `compare(out, truth, expected, tol)`.
"""
from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass
from types import SimpleNamespace
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


def float64_copy(model: torch.nn.Module, device) -> torch.nn.Module:
    return copy.deepcopy(model).to(device).double()


@torch.no_grad()
def ground_truth(model: torch.nn.Module, inputs: Sequence[Any], device,
                 model64: torch.nn.Module | None = None) -> tuple[torch.Tensor, str]:
    """Evaluate the reference in float64 (weights and inputs cast; `model64`, when given, is that
    float64 copy of `model`, kept by the caller to be reused); fall back to float32 with TF32
    disabled if the model cannot run in float64. In a half-precision run `model` and the inputs
    are already in that dtype: the same values, upcast, so the error measured is the kernel's own.
    Returns (output, precision used)."""
    try:
        m64 = model64 if model64 is not None else float64_copy(model, device)
        out = m64(*[_to(x, device, torch.float64) for x in inputs])
        return out, "float64"
    except (RuntimeError, TypeError, NotImplementedError):
        pass
    return strict_float32(model, inputs, device), "float32_strict"


@torch.no_grad()
def strict_float32(model: torch.nn.Module, inputs: Sequence[Any], device) -> Any:
    """`model` run in float32 with TF32 off (half-precision parameters, buffers and inputs upcast):
    the ground truth of a model that cannot run in float64, and the reference a timed output is
    screened against (screen.screened)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    half = (torch.float16, torch.bfloat16)
    up = lambda x: _to(x, device, torch.float32) if isinstance(x, torch.Tensor) and x.dtype in half else _to(x, device)  # noqa: E731
    try:
        m32 = copy.deepcopy(model).to(device)
        if any(p.dtype in half for p in list(m32.parameters()) + list(m32.buffers())):
            m32 = m32.float()
        out = m32(*[up(x) for x in inputs])
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    return out


# Elements per comparison chunk: the float64 temporaries of a chunk take about 1 GB on the GPU
# (64 MB on the CPU), so a multi-GB output is never copied whole to float64.
CHUNK_ELEMENTS = {"cuda": 1 << 24, "cpu": 1 << 20}

# -- what rounding the operands costs: the tf32 class's bound per output ---------------------------
# A class that names an arithmetic has to tell it from a cheaper one. TF32 and bf16 tensor-core
# arithmetic both accumulate in fp32; they differ in how their operands are rounded (10 and 7
# significand bits), and for a sum of products that rounding is nearly all of the error. So the
# error the reference itself makes when its operands (inputs, parameters, buffers) are rounded to
# TF32 and to bf16 and it runs in fp32 (TF32 off) brackets the two arithmetics on this very output;
# the tf32 class's relative-L2 bound sits between them (correctness.tf32.between) and so lets TF32
# pass and bf16 fail whatever the problem's conditioning.
ROUNDINGS = ("tf32", "bf16")
# Where the float32 reference's own rel L2 error on an output is above a class's bound (the output
# is rounding noise: a mean over a normalised tensor, whose truth is 0 to 1e-17), that class's
# bound becomes NOISE_FACTOR x that error (judge.PairJudgement._within_noise): a correct kernel's
# error there is rounding noise of the same order as the reference's, larger by its summation
# order (a sequential sum of n terms errs up to n times a pairwise one's; a group of 128 here), and
# an output off by more than noise still fails.
NOISE_FACTOR = 100.0


def round_operand(x: torch.Tensor, kind: str) -> torch.Tensor:
    """`x` (floating point) as float32 with its significand rounded to nearest even: 10 bits for
    'tf32', 7 for 'bf16'."""
    x = x.float()
    if kind == "bf16":
        return x.to(torch.bfloat16).float()
    bits = x.contiguous().view(torch.int32)
    lsb = (bits >> 13) & 1
    return ((bits + 0xFFF + lsb) & ~0x1FFF).view(torch.float32).view(x.shape)


def _square_sums(out: torch.Tensor, truth: torch.Tensor) -> tuple[float, float, int]:
    """(sum of (out - truth)^2, sum of truth^2, how many elements) over the elements where truth is
    finite, in float64 chunks."""
    got_all, ref_all = out.reshape(-1), truth.reshape(-1)
    step = CHUNK_ELEMENTS.get(truth.device.type, 1 << 20)
    err_sq = ref_sq = 0.0
    count = 0
    for first in range(0, ref_all.numel(), step):
        ref = ref_all[first:first + step].to(torch.float64)
        got = got_all[first:first + step].to(truth.device, torch.float64)
        finite = torch.isfinite(ref)
        diff = torch.where(finite, got - ref, torch.zeros_like(ref))
        ref = torch.where(finite, ref, torch.zeros_like(ref))
        err_sq += float(torch.dot(diff, diff))
        ref_sq += float(torch.dot(ref, ref))
        count += int(finite.sum())
    return err_sq, ref_sq, count


def rel_l2(out: torch.Tensor, truth: torch.Tensor, sums: tuple[float, float, int] | None = None) -> float:
    """||out - truth|| / ||truth|| over the elements where truth is finite (`sums`: _square_sums's,
    where already computed)."""
    err_sq, ref_sq, _ = sums or _square_sums(out, truth)
    if not math.isfinite(err_sq):
        return float("inf")
    return math.sqrt(err_sq / ref_sq) if ref_sq > 0 else (0.0 if err_sq == 0 else float("inf"))


@torch.no_grad()
def rounding_errors(model: torch.nn.Module, inputs: Sequence[Any], truth: torch.Tensor, device,
                    seed: int = 0) -> dict[str, float] | None:
    """The relative L2 error against `truth` of `model` run in float32 with TF32 off and its
    floating-point inputs, parameters and buffers rounded (round_operand), per rounding, and the
    truth's RMS ('truth_rms'); None when the model cannot run so or gives no tensor. Each run starts
    from the same RNG state (`seed`)."""
    errors: dict[str, float] = {}
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        for kind in ROUNDINGS:
            rounded = copy.deepcopy(model).to(device).float()
            for t in list(rounded.parameters()) + list(rounded.buffers()):
                if t.is_floating_point():
                    t.copy_(round_operand(t, kind))
            xs = [round_operand(_to(x, device), kind) if isinstance(x, torch.Tensor) and x.is_floating_point()
                  else _to(x, device) for x in inputs]
            with torch.random.fork_rng(devices=[torch.device(device)] if torch.device(device).type == "cuda" else []):
                torch.manual_seed(seed)
                out = rounded(*xs)
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(truth.shape):
                return None
            sums = _square_sums(out, truth)
            errors[kind] = rel_l2(out, truth, sums)
            errors["truth_rms"] = math.sqrt(sums[1] / sums[2]) if sums[2] else 0.0
            del rounded, xs, out
    except (RuntimeError, TypeError, NotImplementedError):
        return None
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    return errors


def rounded_tolerance(tol, errors: dict[str, float] | None, floor: float):
    """The tolerance `tol` (a class with `between`) for one output whose rounding errors are
    `errors`: rel_l2 = e_tf32^(1 - between) * e_bf16^between, at least `floor` (the fp32 class's
    bound) and at most tol.rel_l2; atol at least tol.atol_rms * e_tf32 * the truth's RMS (TF32
    arithmetic's own RMS error on this output, where the errors say the truth's RMS); `tol` as it
    is where the errors are unknown."""
    if errors is None or getattr(tol, "between", None) is None:
        return tol
    w = tol.between
    low, high = errors["tf32"], errors["bf16"]
    point = low ** (1 - w) * high ** w if low > 0 and high > 0 else max(low, high)
    bound = min(tol.rel_l2, max(floor, point))
    atol, scale = tol.atol, errors.get("truth_rms", 0.0)
    if getattr(tol, "atol_rms", None) and math.isfinite(low) and math.isfinite(scale):
        atol = max(atol, tol.atol_rms * low * scale)
    return SimpleNamespace(atol=atol, rtol=tol.rtol, rel_l2=bound, between=w, atol_rms=getattr(tol, "atol_rms", None),
                           rounding=dict(errors))


def compare(out: Any, truth: torch.Tensor, expected_dtype: torch.dtype, tol, explain: bool = True) -> Comparison:
    """Check `out` against float64 `truth` with a tolerance (atol, rtol, rel_l2): shape, dtype,
    then elementwise allclose AND relative L2. NaN/Inf pass only where truth has the same value.
    Runs on truth's device in chunks; the whole-output diagnosis of a failure (its pattern, kept
    in float32) only where `explain` (classify skips it for a class that a looser one may pass)."""
    if not isinstance(out, torch.Tensor):
        return Comparison(False, f"output is {type(out).__name__}, expected a torch.Tensor")
    if tuple(out.shape) != tuple(truth.shape):
        return Comparison(False, shape_message(tuple(out.shape), tuple(truth.shape)))
    if out.dtype != expected_dtype:
        return Comparison(False, f"dtype mismatch: got {out.dtype}, expected {expected_dtype}"
                                 + ("" if out.is_floating_point() else " (integer output: was a result cast or "
                                    "an index tensor returned?)"))
    atol, rtol, rel_l2_tol = tol.atol, tol.rtol, tol.rel_l2
    numel = truth.numel()
    if numel == 0:
        return Comparison(True, "empty output", 0.0, 0.0, 0.0, 0, 0, None, float("inf"))
    got_all = out.to(truth.device).reshape(-1)
    ref_all = truth.reshape(-1)
    step = CHUNK_ELEMENTS.get(truth.device.type, 1 << 20)
    mismatched = nonfinite_out = 0
    max_ratio, worst_flat, max_abs, max_rel, err_sq, ref_sq = -1.0, 0, 0.0, 0.0, 0.0, 0.0
    keep = None  # (bad, diff, ref_abs) over the whole output, filled once a chunk fails
    for first in range(0, numel, step):
        got = got_all[first:first + step].to(torch.float64)
        ref = ref_all[first:first + step].to(torch.float64)
        diff, ref_abs, ratio, counts = _chunk(got, ref, atol, rtol)
        bad = ratio > 1
        chunk_bad = int(bad.sum())
        mismatched += chunk_bad
        index = int(torch.argmax(ratio))
        if float(ratio[index]) > max_ratio:  # strictly: the first of equal maxima wins, as argmax does
            max_ratio, worst_flat = float(ratio[index]), first + index
        max_abs = max(max_abs, float(diff.max()))
        max_rel = max(max_rel, float((diff / torch.clamp(ref_abs, min=max(atol, 1e-30))).max()))
        nonfinite_out += counts[0]
        err_sq += counts[1]
        ref_sq += counts[2]
        if chunk_bad and keep is None and explain:
            keep = (torch.zeros(numel, dtype=torch.bool, device=truth.device),
                    torch.zeros(numel, dtype=torch.float32, device=truth.device),
                    torch.zeros(numel, dtype=torch.float32, device=truth.device))
        if keep is not None:
            keep[0][first:first + step] = bad
            keep[1][first:first + step] = diff
            keep[2][first:first + step] = ref_abs
        del got, ref, diff, ref_abs, ratio, bad
    worst = unravel(worst_flat, tuple(truth.shape))
    ref_norm = math.sqrt(ref_sq)
    err_norm = math.sqrt(err_sq) if not nonfinite_out else float("inf")
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
                   f"{float(got_all[worst_flat]):.6g}, expected {float(ref_all[worst_flat]):.6g})")
        if nonfinite_out:
            message += f"; {nonfinite_out} NaN/Inf where ground truth is finite"
        if not explain:
            return Comparison(ok, message, max_abs, max_rel, rel_l2, mismatched, numel, worst, margin)
        if keep is None:  # no element outside the elementwise test: only the rel L2 failed
            keep = (torch.zeros(numel, dtype=torch.bool, device=truth.device), None, None)
        bad, diff, ref_abs = (t.view(truth.shape) if t is not None else None for t in keep)
        message += "; " + error_pattern(bad, diff, ref_abs, rel_l2, rel_l2_tol)
    return Comparison(ok, message, max_abs, max_rel, rel_l2, mismatched, numel, worst, margin)


def _chunk(got: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float):
    """For one chunk (float64): |got - truth| (NaN as inf, equal non-finite values as 0), |truth|
    where finite, the error over the allowed error, and (non-finite outputs where truth is
    finite, the squared error and squared truth summed where truth is finite)."""
    if atol > 0 and bool(torch.isfinite(ref).all()) and bool(torch.isfinite(got).all()):
        diff = (got - ref).abs()  # the usual case, in fewer passes: nothing to mask
        ref_abs = ref.abs()
        return diff, ref_abs, diff / (atol + rtol * ref_abs), (0, float(torch.dot(diff, diff)), float(torch.dot(ref, ref)))
    finite = torch.isfinite(ref)
    same_nonfinite = (~finite) & ((got == ref) | (torch.isnan(got) & torch.isnan(ref)))
    diff = (got - ref).abs()
    diff = torch.where(same_nonfinite, torch.zeros_like(diff), diff)
    diff = torch.nan_to_num(diff, nan=float("inf"))
    ref_abs = torch.where(finite, ref.abs(), torch.zeros_like(ref))
    allowed = atol + rtol * ref_abs
    ratio = torch.where(allowed > 0, diff / allowed.clamp(min=1e-300),
                        torch.where(diff > 0, torch.full_like(diff, float("inf")), torch.zeros_like(diff)))
    counts = (int((~torch.isfinite(got) & finite).sum()), float((diff[finite] ** 2).sum()),
              float((ref[finite] ** 2).sum()))
    return diff, ref_abs, ratio, counts


def unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The index of element `flat` of a contiguous tensor of `shape` (torch.unravel_index without
    the symbolic-shapes machinery its first call imports)."""
    index = []
    for size in reversed(shape):
        flat, i = divmod(flat, size) if size else (flat, 0)
        index.append(i)
    return tuple(reversed(index))


def shape_message(got: tuple[int, ...], expected: tuple[int, ...]) -> str:
    message = f"shape mismatch: got {got}, expected {expected}"
    if math.prod(got) == 0:
        return (message + ": the output is empty. If forward passes an output tensor into C++ and the C++ "
                "function assigns a new tensor to it (out = ...), the caller's tensor does not change "
                "(torch::Tensor is a handle passed by value): write into it or return the new tensor")
    if math.prod(got) == math.prod(expected):
        return message + ": the same number of elements in another shape (a view or reshape mistake?)"
    if len(got) == len(expected):
        names = DIM_NAMES.get(len(got), ())
        diffs = [f"{names[i] if names else f'dim {i}'} {g} vs {e}"
                 for i, (g, e) in enumerate(zip(got, expected)) if g != e]
        message += f" (differs in {', '.join(diffs)})"
        if len(got) == 4 and got[:2] == expected[:2]:
            message += ("; for ConvTranspose2d, H_out = (H_in - 1)*stride - 2*padding + dilation*(kernel - 1) "
                        "+ output_padding + 1")
    return message


DIM_NAMES = {4: ("batch", "channel", "row", "column"), 3: ("channel", "row", "column"), 2: ("row", "column")}


def _ranges(indices: list[int], limit: int = 6) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    spans: list[list[int]] = []
    for i in indices:
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans[:limit])
    return text + (", ..." if len(spans) > limit else "")


def error_pattern(bad: torch.Tensor, diff: torch.Tensor | None, ref_abs: torch.Tensor | None, rel_l2: float,
                  rel_l2_tol: float) -> str:
    """Where the mismatches are, and whether they look structural (whole slices, borders, a
    periodic row/column pattern, everywhere) or like rounding (small, spread out). `diff` and
    `ref_abs` may be None where no element is outside the elementwise test (the output-phase
    test needs a phase with most of its elements wrong, so it cannot fire then)."""
    ndim = bad.dim()
    names = DIM_NAMES.get(ndim, tuple(f"dim {i}" for i in range(ndim)))
    fraction = float(bad.double().mean())
    findings: list[str] = []
    for d in range(ndim):
        if bad.shape[d] < 2:
            continue
        per = bad.double().mean(dim=[i for i in range(ndim) if i != d]) if ndim > 1 else bad.double()
        all_bad = [i for i, f in enumerate(per.tolist()) if f >= 0.99]
        clean = [i for i, f in enumerate(per.tolist()) if f == 0.0]
        if all_bad and clean and len(all_bad) + len(clean) >= 0.9 * bad.shape[d]:
            findings.append(f"whole {names[d]} slices wrong ({names[d]} {_ranges(all_bad)} wrong, "
                            f"{_ranges(clean)} right)")
    spatial = [d for d in range(max(0, ndim - 2), ndim) if bad.shape[d] >= 4]
    if spatial and 0 < fraction < 1:
        border = torch.zeros_like(bad)
        for d in spatial:
            b = max(1, min(4, bad.shape[d] // 8))
            index = torch.arange(bad.shape[d], device=bad.device)
            edge = (index < b) | (index >= bad.shape[d] - b)
            border |= edge.view([-1 if i == d else 1 for i in range(ndim)]).expand_as(bad)
        at_border = float(bad[border].double().mean())
        inside = float(bad[~border].double().mean()) if bool((~border).any()) else 0.0
        if at_border > 0.3 and inside < 0.1 * at_border:
            findings.append(f"errors at the borders ({at_border:.0%} of border elements wrong, {inside:.0%} "
                            f"inside): check boundary handling (padding, the last partial tile)")
        elif inside > 0.3 and at_border < 0.1 * inside:
            findings.append(f"errors inside, borders right ({inside:.0%} vs {at_border:.0%})")
    if len(spatial) == 2 and diff is not None:
        for s in (2, 3, 4):
            if any(bad.shape[d] < 2 * s for d in spatial):
                continue
            phases = {}
            for rh in range(s):
                for rw in range(s):
                    sl = [slice(None)] * (ndim - 2) + [slice(rh, None, s), slice(rw, None, s)]
                    num = float(torch.linalg.vector_norm(diff[tuple(sl)]))
                    den = float(torch.linalg.vector_norm(ref_abs[tuple(sl)]))
                    # a phase where ground truth is all zero (no tap reaches it) has no relative error
                    rel = num / den if den > 0 else (0.0 if num == 0 else float("inf"))
                    phases[(rh, rw)] = (float(bad[tuple(sl)].double().mean()), rel, num)
            fracs = [f for f, _, _ in phases.values()]
            errs = [e for _, e, _ in phases.values()]
            if max(fracs) > 0.5 and min(fracs) < 0.05 or (min(errs) > 0 and max(errs) > 3 * min(errs) and max(fracs) > 0.5):
                detail = ", ".join(f"({rh},{rw}): {e:.2g}" if math.isfinite(e)
                                   else f"({rh},{rw}): truth is 0 there, the output is not (L2 {num:.2g})"
                                   for (rh, rw), (_, e, num) in phases.items())
                findings.append(f"the error depends on the output phase (row mod {s}, column mod {s}); rel L2 "
                                f"by phase {detail}: output phases use different taps: check the "
                                f"tap index math (only taps with (o + padding - k*dilation) divisible by the "
                                f"stride contribute to output o)")
                break
    if fraction > 0.9:
        findings.append(f"wrong almost everywhere ({fraction:.0%} of elements)")
    if not findings and rel_l2 < max(100 * rel_l2_tol, 1e-3):
        return (f"pattern: rounding-like (small errors spread over {fraction:.2%} of the output, rel L2 "
                f"{rel_l2:.2g}): lower-precision arithmetic or a different summation order, not an indexing error")
    kind = "structural" if findings else "unclear"
    return f"pattern: {kind}" + (f" ({'; '.join(findings)})" if findings else f" ({fraction:.2%} of elements wrong)")


def classify(out: Any, truth: torch.Tensor, expected_dtype: torch.dtype, tolerances: dict) -> tuple[str | None, Comparison]:
    """The first precision class of `tolerances` (class -> tolerance, strictest first: the run's
    classes, harness/core/precision.py) that `out` falls in (None = incorrect), with the comparison
    that decided it (the loosest class's when it is in none). A tolerance may be a function that
    makes it, called only when that class is reached (the tf32 class's costs two forwards)."""
    comparison = None
    names = list(tolerances)
    for name in names:
        tol = tolerances[name]
        comparison = compare(out, truth, expected_dtype, tol() if callable(tol) else tol, explain=name == names[-1])
        if comparison.ok:
            return name, comparison
    return None, comparison


def _edit_variants(model: torch.nn.Module) -> list[tuple[str, Any]]:
    convs = [m for m in model.modules() if isinstance(m, torch.nn.modules.conv._ConvNd)]
    if not convs:
        return []

    def flip(m: torch.nn.Module) -> None:
        for c in [c for c in m.modules() if isinstance(c, torch.nn.modules.conv._ConvNd)]:
            c.weight.data = torch.flip(c.weight.data, dims=list(range(2, c.weight.dim())))

    def no_bias(m: torch.nn.Module) -> None:
        for c in [c for c in m.modules() if isinstance(c, torch.nn.modules.conv._ConvNd)]:
            if c.bias is not None:
                c.bias.data.zero_()

    variants = [("the convolution kernel flipped spatially (the kernel is flipped once too often, or not at all)", flip)]
    if any(c.bias is not None for c in convs):
        variants.append(("the bias left out", no_bias))
    return variants


@torch.no_grad()
def explain_by_variants(model: torch.nn.Module, inputs: Sequence[Any], out: torch.Tensor, device, tol) -> str | None:
    """For a wrong output of a convolution model: does it match the reference with a typical
    mistake applied (a flipped kernel, a missing bias)? Runs only when the output is wrong."""
    for text, edit in _edit_variants(model):
        variant = copy.deepcopy(model).to(device).double()
        edit(variant)
        truth = variant(*[_to(x, device, torch.float64) for x in inputs])
        if compare(out, truth, out.dtype, tol).ok:
            return f"the output matches the reference with {text}"
    return None


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
