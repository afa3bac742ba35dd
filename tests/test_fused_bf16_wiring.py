"""The fused family's bf16 solutions (solutions/conv_transpose2d_fused/*/fast_bf16.py) on the CPU,
with the kernels' calls replaced by their meaning in float64 (FastConvBF16, FastConv, SubpixelConv,
StridedConv: the convolution, the extra bias, the epilogue kind of fast/epilogue.cuh, StridedConv's
channel minimum; ct2d_tails' passes; channel_means_fused: the convolution's mean over its
positions, times alpha): each creates the reference's parameters under the same seed and computes
the reference's function. The solutions that take the fp32 path call it on x widened (x.float()):
the test's inputs and parameters are fp32 values held in float64, so the widening is exact here
as it is for bf16 values. What the GPU adds (the kernels' numerics, the rounding to bf16, the bf16
class) is tests/test_gpu_fused.py's and the harness's."""
import sys
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from harness import REPO_ROOT
from harness.core import problems
from harness.core.problems import load_module

SOLUTIONS = sorted((REPO_ROOT / "solutions" / "conv_transpose2d_fused").glob("*/fast_bf16.py"))


class FastConvBF16:
    """ct2d_fused.FastConvBF16's meaning, in the dtype it is given."""

    def __init__(self, conv, epilogue="none", epilogue_args=(0.0, 0.0), sign=1.0):
        self.conv, self.epilogue, (self.a, self.b), self.sign = conv, epilogue, epilogue_args, sign

    def __call__(self, x, extra_bias=None):
        c = self.conv
        y = F.conv_transpose2d(x, c.weight, c.bias, c.stride, c.padding, c.output_padding, c.groups, c.dilation)
        if extra_bias is not None:
            y = y + self.sign * extra_bias
        a, b = self.a, self.b
        return {"none": lambda v: v,
                "clamp_scale": lambda v: torch.clamp(torch.clamp(v, 0, 1) * a, 0, 1) / a,
                "tanh": torch.tanh,
                "mish_add_hardtanh_scale": lambda v: F.hardtanh(F.mish(v) + a, -1, 1) * b,
                "add_min_gelu_scale": lambda v: F.gelu(torch.clamp(v + a, max=0.0)) * b,
                "gelu": F.gelu}[self.epilogue](y)


class FastConv(FastConvBF16):
    """ct2d_fused.FastConv's meaning on x widened: in the parameters' dtype (x's values are theirs
    here: fp32 values, see the module's docstring)."""

    def __call__(self, x, extra_bias=None):
        assert x.dtype == torch.float32, x.dtype   # the fp32 path takes x widened
        return super().__call__(x.to(self.conv.weight.dtype), extra_bias)


class SubpixelConv(FastConv):
    """ct2d_fused.SubpixelConv's meaning (z_fp16 and the bf16 store are rounding, the GPU's to check)."""

    def __init__(self, conv, epilogue="none", epilogue_args=(0.0, 0.0), sign=1.0, z_fp16=False,
                 out_dtype=torch.float32):
        super().__init__(conv, epilogue, epilogue_args, sign)
        assert out_dtype in (torch.float32, torch.bfloat16)


class StridedConv(FastConv):
    """ct2d_fused.StridedConv's meaning; channel_min: the minimum over the channels (the kernel's
    per block of 64, whose minimum the tail takes)."""

    def __call__(self, x, extra_bias=None, channel_min=False):
        y = super().__call__(x, extra_bias)
        return y.amin(dim=1, keepdim=True) if channel_min else y


TAILS = types.SimpleNamespace(  # ct2d_tails' passes, as their docstrings in tails.cu say
    softmax_bias_scale_sigmoid=lambda y, bias, scale: torch.sigmoid(
        (torch.softmax(y, dim=1) + bias.to(y.dtype).reshape(1, -1, 1, 1)) * scale),
    min_sum_gelu_add=lambda ymin, bias: F.gelu(ymin.amin(dim=1, keepdim=True).sum(dim=2, keepdim=True))
    + bias.to(ymin.dtype),
    gelu_group_norm=lambda y, groups, w, b, eps: F.group_norm(F.gelu(y), groups, w.to(y.dtype), b.to(y.dtype), eps))


def channel_means_fused(x, conv, alpha=1.0):
    """ct2d_means.channel_means_fused's meaning: [n, co]."""
    y = F.conv_transpose2d(x, conv.weight, conv.bias, conv.stride, conv.padding, conv.output_padding, conv.groups,
                           conv.dilation)
    return y.mean(dim=(2, 3)) * alpha


def test_every_fused_problem_has_one():
    assert {p.parent.name for p in SOLUTIONS} == {p.path.stem for p in problems.select("conv_transpose2d_fused")}


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.parent.name.split("_")[0])
def test_a_bf16_fused_solution_is_the_reference_with_the_library_conv(solution, monkeypatch):
    fused, means = types.ModuleType("ct2d_fused"), types.ModuleType("ct2d_means")
    fused.FastConvBF16, fused.FastConv, fused.SubpixelConv, fused.StridedConv = (FastConvBF16, FastConv, SubpixelConv,
                                                                                 StridedConv)
    means.channel_means_fused, means.extension = channel_means_fused, lambda: None
    monkeypatch.setitem(sys.modules, "ct2d_fused", fused)
    monkeypatch.setitem(sys.modules, "ct2d_means", means)
    for name in ("ct2d_split", "ct2d_sphase"):   # built at import: nothing to build here
        monkeypatch.setitem(sys.modules, name, types.SimpleNamespace(extension=lambda: None))
    monkeypatch.setitem(sys.modules, "ct2d_tails", types.SimpleNamespace(tails=TAILS))
    [problem] = [p for p in problems.select("conv_transpose2d_fused") if p.path.stem == solution.parent.name]
    ref, new = load_module(problem.path), load_module(solution, prefix="kb_bf16_wiring")
    assert new.PRECISIONS == ("bf16",) and new.DEVICES == ("cuda",)
    init = list(ref.get_init_inputs())
    monkeypatch.setattr(ref, "batch_size", 2)
    for name in ("height", "width", "height_in", "width_in"):   # small inputs, the same channels
        if hasattr(ref, name):
            monkeypatch.setattr(ref, name, min(getattr(ref, name), 12))
    torch.manual_seed(0)
    model = ref.Model(*init).double()
    torch.manual_seed(0)
    model_new = new.ModelNew(*init).double()
    theirs, ours = dict(model.named_parameters()), dict(model_new.named_parameters())
    assert theirs.keys() == ours.keys() and all(torch.equal(theirs[k], ours[k]) for k in theirs)
    torch.manual_seed(1)
    inputs = [x.double() for x in ref.get_inputs()]
    with torch.no_grad():
        want, got = model(*inputs), model_new(*inputs)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
