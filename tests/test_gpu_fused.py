"""The fused family on a GPU (skipped without CUDA): the library's epilogues against PyTorch,
fused in the phase kernel's store or as a pass of their own, and plan() naming which; the tails'
BatchNorm updating the running statistics as PyTorch does. The family's verdicts and speed are
the main command's (`python run_eval.py --problem conv_transpose2d_fused`)."""
import re
import sys

import pytest

from harness import REPO_ROOT
from harness.core import problems, solutions
from harness.core.config import load_config, with_overrides
from harness.core.results import Status
from harness.run.runner import evaluate

pytestmark = pytest.mark.gpu

FUSED = REPO_ROOT / "solutions" / "conv_transpose2d_fused"


def _kernels_ran(prof):
    """The kernels a profile saw, named as plan() names them (no namespace, no arguments)."""
    return {re.sub(r"^void ", "", e.key.replace("(anonymous namespace)::", "")).split("(")[0] for e in prof.key_averages()}


def _reference(name, a, b):
    import torch
    import torch.nn.functional as F
    return {
        "clamp_scale": lambda v: torch.clamp(torch.clamp(v, 0.0, 1.0) * a, 0.0, 1.0) / a,
        "tanh": torch.tanh,
        "mish_add_hardtanh_scale": lambda v: F.hardtanh(F.mish(v) + a, -1.0, 1.0) * b,
        "add_min_gelu_scale": lambda v: F.gelu(torch.clamp(v + a, max=0.0)) * b,
        "gelu": F.gelu,
    }[name]


# (stride, fused in the store?): stride 2 runs the phase kernel (the store applies it), stride 1
# with 64 channels a stride-1 kernel (a pass of its own)
@pytest.mark.parametrize("stride, fused", [(2, True), (1, False)])
@pytest.mark.parametrize("epilogue, a, b", [("clamp_scale", 2.0, 0.0), ("tanh", 0.0, 0.0),
                                           ("mish_add_hardtanh_scale", 0.5, 2.0),
                                           ("add_min_gelu_scale", 0.5, 2.0), ("gelu", 0.0, 0.0)])
def test_epilogues_match_pytorch_fused_or_not_and_plan_says_which(epilogue, a, b, stride, fused):
    import torch
    from torch.profiler import ProfilerActivity, profile

    sys.path.insert(0, str(FUSED / "_shared"))
    from ct2d_fused import FastConv
    from harness.verdict.numerics import compare

    torch.manual_seed(0)
    conv = torch.nn.ConvTranspose2d(24, 64, 3, stride=stride, padding=1, output_padding=stride - 1).cuda()
    extra = torch.nn.Parameter(torch.randn(64, 1, 1, device="cuda"))
    x = torch.rand(2, 24, 17, 30, device="cuda")
    fast = FastConv(conv, epilogue, (a, b), sign=-1.0)
    with torch.no_grad():
        plan = fast.plan(x, extra_bias=extra)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            out = fast(x, extra_bias=extra)
            torch.cuda.synchronize()
        truth = _reference(epilogue, a, b)(torch.nn.functional.conv_transpose2d(
            x.double(), conv.weight.double(), conv.bias.double() - extra.double().reshape(-1), stride, 1, stride - 1))
    ran = _kernels_ran(prof)
    assert plan.kernel in ran, (plan, sorted(ran))
    if fused:
        assert plan.kernel.startswith("ct2d_phase_epi<") and f"epilogue {epilogue} in the store" in plan.config, plan
        assert not any(k.startswith("epilogue_pass") for k in ran), ran
    else:
        assert f"epilogue {epilogue} as a pass of its own" in plan.config, plan
        assert any(k.startswith("epilogue_pass") for k in ran), ran
    result = compare(out, truth, torch.float32, load_config(REPO_ROOT / "configs" / "default.yaml").correctness.tf32)
    assert result.ok, result.message


# A bf16 call with an epilogue: the library's fp32 rule on x widened, the epilogue on the fp32 sums
# (stride 2: the phase kernel's store; stride 1: a pass over the fp32 output), rounded once to bf16.
# 93's add_min_gelu_scale cancels near a sum of -0.5, where a bf16 sum's last place (2^-8) is the
# whole result: a pass over a bf16 output failed the bf16 class there (rel L2 0.05 on 93, H100).
@pytest.mark.parametrize("stride, fused", [(2, True), (1, False)])
@pytest.mark.parametrize("epilogue, a, b", [("clamp_scale", 2.0, 0.0), ("mish_add_hardtanh_scale", 0.5, 2.0),
                                           ("add_min_gelu_scale", 0.5, 2.0), ("gelu", 0.0, 0.0)])
def test_bf16_epilogues_take_the_fp32_sums_rounded_once(epilogue, a, b, stride, fused):
    import torch

    sys.path.insert(0, str(FUSED / "_shared"))
    from ct2d_fused import FastConvBF16
    from harness.verdict.numerics import compare

    torch.manual_seed(0)
    conv = torch.nn.ConvTranspose2d(64, 128, 4 - (stride == 1), stride=stride).cuda().bfloat16()
    x = torch.rand(4, 64, 24, 24, device="cuda").bfloat16()   # 93's inputs and layer, smaller
    fast = FastConvBF16(conv, epilogue, (a, b))
    with torch.no_grad():
        plan = fast.plan(x)
        out = fast(x)
        y = torch.nn.functional.conv_transpose2d(x.double(), conv.weight.double(), conv.bias.double(), stride)
        truth = _reference(epilogue, a, b)(y)
    assert plan.io == "bf16 via fp32", plan
    words = f"epilogue {epilogue} in the store" if fused else f"epilogue {epilogue} as a pass of its own"
    assert words in plan.config, plan
    tol = load_config(REPO_ROOT / "configs" / "default.yaml").correctness.bf16
    if epilogue == "add_min_gelu_scale" and stride == 2:   # what the test guards: the sums rounded to bf16
        first = _reference(epilogue, a, b)(y.bfloat16().double())   # before the epilogue fail the class here
        assert not compare(first.bfloat16(), truth, torch.bfloat16, tol).ok   # (rel L2 0.038 on the CPU)
    result = compare(out, truth, torch.bfloat16, tol)
    assert result.ok, result.message


def test_batch_norm_tail_updates_the_running_statistics_as_pytorch_does():
    """Three calls of 11's fast solution beside the problem's Model (training mode): each output
    in the TF32 class against the Model in float64, and the running statistics as PyTorch's."""
    import importlib.util

    import torch
    from harness.verdict.numerics import compare

    problem = REPO_ROOT / "problems" / "conv_transpose2d_fused" / "11_ConvTranspose2d_BatchNorm_Tanh_MaxPool_GroupNorm.py"
    solution = next(FUSED.glob("11_*")) / "fast.py"
    mods = []
    for path in (problem, solution):
        spec = importlib.util.spec_from_file_location(path.stem + "_m", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mods.append(mod)
    init = [16, 24, 5, 1, 1, 8, 8]
    torch.manual_seed(0)
    ref = mods[0].Model(*init).cuda().double()
    torch.manual_seed(0)
    new = mods[1].ModelNew(*init).cuda()
    tf32 = load_config(REPO_ROOT / "configs" / "default.yaml").correctness.tf32
    for _ in range(3):
        x = torch.rand(3, 16, 9, 11, device="cuda")
        with torch.no_grad():
            want, got = ref(x.double()), new(x)
        result = compare(got, want, torch.float32, tf32)
        assert result.ok, result.message
    bn, bn_ref = new.batch_norm, ref.batch_norm
    torch.testing.assert_close(bn.running_mean, bn_ref.running_mean.float(), rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(bn.running_var, bn_ref.running_var.float(), rtol=1e-3, atol=1e-4)
    assert int(bn.num_batches_tracked) == int(bn_ref.num_batches_tracked) == 3


def test_the_family_is_correct_on_its_extra_shapes(tmp_path):
    """Every fused problem's fast solution: correct (the tf32 class or better) on the benchmark
    shape and the extra shapes of configs/default.yaml, against float64, timing off."""
    cfg = with_overrides(load_config(REPO_ROOT / "configs" / "default.yaml"),
                         {"device": "cuda", "results_dir": str(tmp_path), "timing.enabled": False})
    pairs = solutions.select_pairs(problems.select("conv_transpose2d_fused"), "fast", True, problems.discover())
    results = evaluate(pairs, cfg, run_id="fused", out=lambda line: None)
    assert len(results) == 11
    for r in results:
        assert r.status is Status.OK, (r.problem["id"], r.message)
        assert r.correctness["precision"] in ("fp32", "tf32"), (r.problem["id"], r.correctness)


def test_the_family_is_correct_in_bf16_on_its_extra_shapes(tmp_path):
    """Every fused problem's fast_bf16 solution (the library's bf16 kernels, ct2d_fused.FastConvBF16):
    the bf16 class against float64 on the benchmark shape and the extra shapes, timing off (issue 77;
    their wiring on the CPU: tests/test_fused_bf16_wiring.py)."""
    cfg = with_overrides(load_config(REPO_ROOT / "configs" / "default.yaml"),
                         {"device": "cuda", "results_dir": str(tmp_path), "timing.enabled": False,
                          "precision": "bf16"})
    pairs = solutions.select_pairs(problems.select("conv_transpose2d_fused"), "fast_bf16", True, problems.discover(),
                                   precision="bf16")
    results = evaluate(pairs, cfg, run_id="fused_bf16", out=lambda line: None)
    assert len(results) == 11
    for r in results:
        assert r.status is Status.OK, (r.problem["id"], r.message)
        assert r.correctness["precision"] == "bf16", (r.problem["id"], r.correctness)


# SplitConv (ct2d_fused.py): the strided convolution as its phases' stride-1 convolutions on the
# library, interleaved with the bias and the epilogue. (cin, cout, kernel, stride, padding,
# output_padding): the fused family's strided geometries (2 and 16; 5 and 91; 93; 36), uneven
# strides and kernels, and 7 output channels (the stride-1 rows below wgmma).
SPLIT_CASES = [
    (24, 64, (3, 3), (2, 2), (1, 1), (1, 1)),
    (24, 128, (4, 4), (2, 2), (1, 1), (1, 1)),
    (24, 128, (4, 4), (2, 2), (0, 0), (0, 0)),
    (16, 48, (5, 3), (3, 2), (2, 0), (1, 1)),
    (16, 64, (2, 3), (3, 4), (0, 1), (2, 0)),
    (16, 7, (3, 3), (2, 2), (1, 1), (1, 1)),
]


# StridedConv (ct2d_fused.py, sphase.cu: one implicit GEMM per phase) on the same cases, and on
# the family's geometries with 64 input channels (two 32-channel chunks) and images several tiles
# wide and high (4 x 64 phase pixels per block), (cin, cout, kernel, stride, padding, output
# padding, x's height and width).
STRIDED_CASES = [c + ((19, 23),) for c in SPLIT_CASES] + [
    (64, 64, (3, 3), (2, 2), (1, 1), (1, 1), (9, 70)),
    (64, 128, (4, 4), (2, 2), (0, 0), (0, 0), (6, 131)),
    (72, 80, (3, 2), (2, 2), (0, 1), (1, 0), (13, 66)),
    (16, 64, (2, 4), (3, 4), (0, 0), (0, 0), (7, 16)),  # column stride 4, output width 64 (16-byte stores)
]
# (class, words of its plan, StridedConv's staging and persistent); the 16-byte ways on x widths
# that allow 16-byte copies
WAYS = {"split": ("SplitConv", "stride-1 phase convolutions", None, False),
        "strided": ("StridedConv", "4-byte copies", 4, False), "strided16": ("StridedConv", "16-byte copies", 16, False),
        "persistent": ("StridedConv", "persistent blocks", 4, True),
        "persistent16": ("StridedConv", "16-byte copies", 16, True),
        "subpixel": ("SubpixelConv", "one stride-1 convolution of", None, False)}
STRIDED16_CASES = [c[:6] + ((c[6][0], -(-c[6][1] // 4) * 4),) for c in STRIDED_CASES]
# SubpixelConv's pass over rows longer than one warp's pass (599 outputs one at a time, 600 four at a time)
SUBPIXEL_WIDE_CASES = [(16, 32, (3, 3), (2, 2), (1, 1), (0, 0), (3, 300)), (16, 32, (4, 4), (2, 2), (1, 1), (0, 0), (3, 300))]


def _case_id(c):
    return f"{c[1]}ch_k{c[2][0]}x{c[2][1]}_s{c[3][0]}x{c[3][1]}" + (f"_{c[6][0]}x{c[6][1]}" if len(c) > 6 else "")


@pytest.mark.parametrize("way, case", [("split", c + ((19, 23),)) for c in SPLIT_CASES]
                         + [(w, c) for w in ("strided", "persistent") for c in STRIDED_CASES]
                         + [(w, c) for w in ("strided16", "persistent16") for c in STRIDED16_CASES]
                         + [("subpixel", c) for c in STRIDED_CASES + SUBPIXEL_WIDE_CASES], ids=lambda v: v if isinstance(v, str) else _case_id(v))
@pytest.mark.parametrize("epilogue, a, b", [("none", 0.0, 0.0), ("tanh", 0.0, 0.0), ("add_min_gelu_scale", 0.5, 2.0)])
def test_split_and_strided_conv_match_pytorch(way, case, epilogue, a, b):
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    sys.path.insert(0, str(FUSED / "_shared"))
    import ct2d_fused
    from harness.verdict.numerics import compare

    cin, cout, k, s, p, op, (h, w) = case
    torch.manual_seed(0)
    conv = torch.nn.ConvTranspose2d(cin, cout, k, stride=s, padding=p, output_padding=op).cuda()
    extra = torch.randn(cout, 1, 1, device="cuda")
    x = torch.rand(2, cin, h, w, device="cuda")
    cls, words, staging, persistent = WAYS[way]
    split = getattr(ct2d_fused, cls)(conv, epilogue, (a, b), sign=-1.0)
    if staging:
        split.staging, split.persistent = staging, persistent
    with torch.no_grad():
        plan = split.plan(x, extra_bias=extra)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            out = split(x, extra_bias=extra)
            torch.cuda.synchronize()
        y = F.conv_transpose2d(x.double(), conv.weight.double(), conv.bias.double() - extra.double().reshape(-1), s, p, op)
        truth = y if epilogue == "none" else _reference(epilogue, a, b)(y)
    assert words in plan.config, plan
    if staging or way == "subpixel":
        ran = _kernels_ran(prof)
        assert plan.kernel in ran, (plan, sorted(ran))
    tf32 = load_config(REPO_ROOT / "configs" / "default.yaml").correctness.tf32
    result = compare(out, truth, torch.float32, tf32)
    assert result.ok, result.message


# SubpixelConv with z in fp16 (z_fp16: the wgmma kernel's __half epilogue, the pass reading it), for the
# saturating epilogues only: the strided cases (7 output channels: z of 28 channels, below the wgmma
# rows, so the library's fp32 result rounded once), the wide rows. Against float64 in the TF32 class
# (x as the problems draw it), and against the same call with z in fp32 (the same fp16 products):
# every output within z's one rounding to fp16 (half a unit, 2^-11 of the kernel's |z|; both
# epilogues' slopes are at most 1), also with x scaled by 2^12 and 2^20, where many of z's values pass fp16's range
# (+-inf in z, which the epilogue saturates as fp32 would; x's largest magnitude past 2^15 also
# takes the library's rescaled launch). Scaled, the fp16 products' own error (both ways') is past
# the TF32 class's bound where large terms cancel; that comparison is for x as drawn.
@pytest.mark.parametrize("case", STRIDED_CASES + SUBPIXEL_WIDE_CASES, ids=_case_id)
@pytest.mark.parametrize("epilogue, a", [("tanh", 0.0), ("clamp_scale", 2.0)])
@pytest.mark.parametrize("scale", [1.0, 2.0 ** 12, 2.0 ** 20], ids=["x1", "x2e12", "x2e20"])
def test_subpixel_conv_with_z_in_fp16_matches_pytorch(case, epilogue, a, scale):
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    sys.path.insert(0, str(FUSED / "_shared"))
    import ct2d_fused
    from harness.verdict.numerics import compare

    cin, cout, k, s, p, op, (h, w) = case
    torch.manual_seed(0)
    conv = torch.nn.ConvTranspose2d(cin, cout, k, stride=s, padding=p, output_padding=op).cuda()
    extra = torch.randn(cout, 1, 1, device="cuda")
    x = torch.rand(2, cin, h, w, device="cuda") * scale
    sub = ct2d_fused.SubpixelConv(conv, epilogue, (a, 0.0), sign=-1.0, z_fp16=True)
    sub32 = ct2d_fused.SubpixelConv(conv, epilogue, (a, 0.0), sign=-1.0)
    with torch.no_grad():
        plan = sub.plan(x, extra_bias=extra)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            out = sub(x, extra_bias=extra)
            torch.cuda.synchronize()
        out32 = sub32(x, extra_bias=extra)
        z = F.conv_transpose2d(x.double(), conv.weight.double(), None, s, p, op)  # z's values, in place
        truth = _reference(epilogue, a, 0.0)(z + (conv.bias.double() - extra.double().reshape(-1)).reshape(1, -1, 1, 1))
    # the wgmma kernel writes z in fp16 where it takes z (over 32 channels); else the library's fp32 rounded once
    wgf = s[0] * s[1] * cout > 32
    assert ("z in fp16 (fp32 in, fp16 out)" if wgf else "z in fp16 (fp16 via fp32)") in plan.config, plan
    assert not wgf or plan.kernel == "ct2d_wgs<WgfFp16Ops, __half>", plan
    assert plan.kernel in _kernels_ran(prof), (plan, sorted(_kernels_ran(prof)))
    if scale > 2.0 ** 15:
        assert (z.abs() > 65504 * 1.01).float().mean() > 0.01, "few of z's values past fp16's range: the case tests little"
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    # |z| as the kernel has it: within the fp16 products' error (a few 2^-11 of the sum of |terms|) of z's
    terms = F.conv_transpose2d(x.double().abs(), conv.weight.double().abs(), None, s, p, op)
    bound = 2.0 ** -11 * (z.abs() + 2.0 ** -8 * terms) + 1e-5
    excess = ((out.double() - out32.double()).abs() - bound).max().item()
    assert excess <= 0, f"fp16 z off fp32 z's result by {excess:.3g} more than its rounding allows"
    if scale == 1.0:
        tf32 = load_config(REPO_ROOT / "configs" / "default.yaml").correctness.tf32
        result = compare(out, truth, torch.float32, tf32)
        assert result.ok, result.message


# SubpixelConv's bf16 store (out_dtype bf16, as the fused bf16 solutions call it on x widened, with a
# bf16 model's weight and biases): the pass's fp32 results rounded once to nearest as it stores them
# (split.cu, st_y1 and st_y4), so the same call with an fp32 y, rounded by PyTorch, equals it bit for
# bit: rows one output at a time (widths under 8) and four at a time with every head and tail, z in
# fp32 and in fp16.
@pytest.mark.parametrize("case", STRIDED_CASES + SUBPIXEL_WIDE_CASES, ids=_case_id)
@pytest.mark.parametrize("epilogue, a, b, z_fp16", [("none", 0.0, 0.0, False), ("tanh", 0.0, 0.0, True),
                                                    ("clamp_scale", 2.0, 0.0, True),
                                                    ("add_min_gelu_scale", 0.5, 2.0, False)])
def test_subpixel_conv_stores_bf16_as_its_fp32_result_rounded_once(case, epilogue, a, b, z_fp16):
    import torch

    sys.path.insert(0, str(FUSED / "_shared"))
    import ct2d_fused

    cin, cout, k, s, p, op, (h, w) = case
    torch.manual_seed(0)
    conv = torch.nn.ConvTranspose2d(cin, cout, k, stride=s, padding=p, output_padding=op).cuda().to(torch.bfloat16)
    extra = torch.randn(cout, 1, 1, device="cuda").to(torch.bfloat16)
    x = torch.rand(2, cin, h, w, device="cuda").to(torch.bfloat16).float()   # bf16 values, widened
    bf = ct2d_fused.SubpixelConv(conv, epilogue, (a, b), sign=-1.0, z_fp16=z_fp16, out_dtype=torch.bfloat16)
    f32 = ct2d_fused.SubpixelConv(conv, epilogue, (a, b), sign=-1.0, z_fp16=z_fp16)
    with torch.no_grad():
        plan = bf.plan(x, extra_bias=extra)
        out, out32 = bf(x, extra_bias=extra), f32(x, extra_bias=extra)
    assert plan.io == "bf16 via fp32" and "y stored in bf16" in plan.config, plan
    assert out.dtype == torch.bfloat16 and out32.dtype == torch.float32 and out.shape == out32.shape
    assert torch.isfinite(out32).all()
    differ = (out != out32.to(torch.bfloat16)).sum().item()
    assert differ == 0, f"{differ} of {out.numel()} outputs are not the fp32 result rounded once"


# SubpixelConv on a bf16 x as it is (a bf16 solution's way where its epilogue does not cancel: not
# 93's): the stride-1 convolution on the library's bf16 rows, z in bf16 (each sum rounded once), the
# pass reading it as 16-byte pieces where z's rows allow; the bf16 class against float64, the plan
# naming z in bf16 and io "bf16", and its kernel the one that ran.
@pytest.mark.parametrize("case", STRIDED_CASES + SUBPIXEL_WIDE_CASES, ids=_case_id)
@pytest.mark.parametrize("epilogue, a, b", [("none", 0.0, 0.0), ("tanh", 0.0, 0.0), ("clamp_scale", 2.0, 0.0),
                                           ("mish_add_hardtanh_scale", 0.5, 2.0)])
def test_subpixel_conv_on_a_bf16_x_is_in_the_bf16_class(case, epilogue, a, b):
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    sys.path.insert(0, str(FUSED / "_shared"))
    import ct2d_fused
    from harness.verdict.numerics import compare

    cin, cout, k, s, p, op, (h, w) = case
    torch.manual_seed(0)
    conv = torch.nn.ConvTranspose2d(cin, cout, k, stride=s, padding=p, output_padding=op).cuda().to(torch.bfloat16)
    extra = torch.randn(cout, 1, 1, device="cuda").to(torch.bfloat16)
    x = torch.rand(2, cin, h, w, device="cuda").to(torch.bfloat16)
    sub = ct2d_fused.SubpixelConv(conv, epilogue, (a, b), sign=-1.0, out_dtype=torch.bfloat16)
    with torch.no_grad():
        plan = sub.plan(x, extra_bias=extra)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            out = sub(x, extra_bias=extra)
            torch.cuda.synchronize()
        y = F.conv_transpose2d(x.double(), conv.weight.double(),
                               conv.bias.double() - extra.double().reshape(-1), s, p, op)
        truth = y if epilogue == "none" else _reference(epilogue, a, b)(y)
    assert plan.io == "bf16" and "z in bf16" in plan.config, plan
    assert plan.kernel in _kernels_ran(prof), (plan, sorted(_kernels_ran(prof)))
    assert out.dtype == torch.bfloat16
    result = compare(out, truth, torch.bfloat16, load_config(REPO_ROOT / "configs" / "default.yaml").correctness.bf16)
    assert result.ok, result.message


@pytest.mark.parametrize("cls, staging, persistent", [("SplitConv", None, False), ("StridedConv", 4, False),
                                                     ("StridedConv", 16, False), ("StridedConv", 16, True),
                                                     ("SubpixelConv", None, False)])
def test_split_and_strided_conv_follow_the_weight_in_place_and_on_a_new_tensor(cls, staging, persistent):
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(FUSED / "_shared"))
    import ct2d_fused

    torch.manual_seed(0)
    conv = torch.nn.ConvTranspose2d(16, 64, 3, stride=2, padding=1, output_padding=1).cuda()
    split = getattr(ct2d_fused, cls)(conv)
    if staging:
        split.staging, split.persistent = staging, persistent
    x = torch.rand(2, 16, 11, 16, device="cuda")
    with torch.no_grad():
        for change in (lambda: None, lambda: conv.weight.mul_(-2.0),
                       lambda: setattr(conv, "weight", torch.nn.Parameter(torch.randn_like(conv.weight)))):
            change()
            want = F.conv_transpose2d(x.double(), conv.weight.double(), conv.bias.double(), 2, 1, 1)
            torch.testing.assert_close(split(x).double(), want, rtol=5e-3, atol=5e-3)


# channel_means_fused (ct2d_means.py, means.cu): 42's and 44's algebra in two kernels, against the
# convolution's mean in float64; geometries with 1 to 5 taps, strides, padding, output padding,
# dilation, no bias, planes narrower than a block.
MEANS_CASES = [
    (64, 128, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), True, (33, 40)),
    (64, 128, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), True, (32, 32)),
    (8, 12, (5, 2), (3, 2), (2, 0), (1, 1), (1, 2), False, (9, 7)),
    (5, 3, (1, 4), (1, 3), (0, 1), (0, 2), (1, 1), True, (3, 300)),
    (4, 6, (7, 8), (2, 1), (3, 2), (1, 0), (1, 1), True, (6, 5)),
]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])   # bf16: 42's and 44's bf16 runs (x read as it is)
@pytest.mark.parametrize("case", MEANS_CASES, ids=lambda c: f"k{c[2][0]}x{c[2][1]}_s{c[3][0]}x{c[3][1]}_{c[8][0]}x{c[8][1]}")
def test_channel_means_fused_matches_the_convolutions_mean(case, dtype):
    import torch

    sys.path.insert(0, str(FUSED / "_shared"))
    from ct2d_means import channel_means_fused

    cin, cout, k, s, p, op, d, bias, (h, w) = case
    torch.manual_seed(0)
    conv = torch.nn.ConvTranspose2d(cin, cout, k, stride=s, padding=p, output_padding=op, dilation=d, bias=bias).cuda()
    conv = conv.to(getattr(torch, dtype))
    x = torch.rand(3, cin, h, w, device="cuda").to(getattr(torch, dtype))
    with torch.no_grad():
        got = channel_means_fused(x, conv, alpha=0.5)
        want = 0.5 * torch.nn.functional.conv_transpose2d(
            x.double(), conv.weight.double(), conv.bias.double() if bias else None, s, p, op, 1, d).mean(dim=(2, 3))
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)
        conv.weight.mul_(-2.0)   # a new weight version: the cached layout follows
        want = 0.5 * torch.nn.functional.conv_transpose2d(
            x.double(), conv.weight.double(), conv.bias.double() if bias else None, s, p, op, 1, d).mean(dim=(2, 3))
        torch.testing.assert_close(channel_means_fused(x, conv, alpha=0.5).double(), want, rtol=1e-4, atol=1e-5)


# StridedConv(channel_min=True): the minimum over each block of 64 output channels (36's min over
# channels without writing the convolution); its minimum over the blocks is the convolution's
# minimum over channels, against float64. Cout 128 (two blocks), 80 (a partial one), 7.
@pytest.mark.parametrize("way", ["strided", "strided16", "persistent16"])
@pytest.mark.parametrize("cout", [128, 80, 7])
def test_strided_conv_channel_min_is_the_convolutions_minimum_over_channels(way, cout):
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(FUSED / "_shared"))
    import ct2d_fused
    from harness.verdict.numerics import compare

    torch.manual_seed(0)
    conv = torch.nn.ConvTranspose2d(64, cout, 3, stride=2, padding=1, output_padding=1).cuda()
    extra = torch.randn(cout, 1, 1, device="cuda")
    x = torch.rand(2, 64, 9, 72, device="cuda")
    cls, _, staging, persistent = WAYS[way]
    fast = getattr(ct2d_fused, cls)(conv, "gelu", sign=-1.0)
    fast.staging, fast.persistent = staging, persistent
    from torch.profiler import ProfilerActivity, profile
    with torch.no_grad():
        plan = fast.plan(x, extra_bias=extra, channel_min=True)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            part = fast(x, extra_bias=extra, channel_min=True)
            torch.cuda.synchronize()
        y = F.conv_transpose2d(x.double(), conv.weight.double(), conv.bias.double() - extra.double().reshape(-1), 2, 1, 1)
        truth = F.gelu(y).amin(dim=1, keepdim=True)
    assert part.shape == (2, -(-cout // 64), y.shape[2], y.shape[3]), part.shape
    assert plan.kernel.endswith(", 1>") and "minimum over each block of 64" in plan.config, plan
    assert plan.kernel in _kernels_ran(prof), (plan, sorted(_kernels_ran(prof)))
    tf32 = load_config(REPO_ROOT / "configs" / "default.yaml").correctness.tf32
    result = compare(part.amin(dim=1, keepdim=True), truth, torch.float32, tf32)
    assert result.ok, result.message


# 19's tail in one kernel (tails.cu: gelu_group_norm_one_pass_kernel, its statistic and
# normalization pieces in one launch, each group normalized lag groups after its statistics) and
# as two passes, against float64: 16-byte and element-wise accesses (HW < 4, L % 4 != 0, groups of
# four across two channels), one piece per group with many groups (the lag's middle slots), a
# lag as large as the groups, several pieces per group.
GN_CASES = [(3, 64, 35, 37, 8), (2, 6, 1, 3, 3), (5, 10, 7, 7, 5), (40, 16, 64, 64, 4), (2, 64, 130, 130, 8),
            (1, 4, 2, 2, 2)]


@pytest.mark.parametrize("case", GN_CASES, ids=lambda c: "x".join(map(str, c)))
def test_gelu_group_norm_one_pass_and_two_pass_match_pytorch(case):
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(FUSED / "_shared"))
    from ct2d_tails import tails

    n, c, h, w, groups = case
    torch.manual_seed(0)
    y = torch.randn(n, c, h, w, device="cuda") * 2.0
    weight, bias = torch.randn(c, device="cuda"), torch.randn(c, device="cuda")
    want = F.group_norm(F.gelu(y.double()), groups, weight.double(), bias.double(), 1e-5)
    for fn in (tails.gelu_group_norm, tails.gelu_group_norm_two_pass):
        got = fn(y.clone(), groups, weight, bias, 1e-5)
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)
