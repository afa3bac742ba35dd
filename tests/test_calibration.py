"""The precision classes are calibrated: PyTorch's strict fp32 output passes fp32 with >= 10x
margin; TF32 output (emulated on the CPU by rounding operands to 10 mantissa bits, as tensor
cores do; the real cuDNN output is checked in test_gpu_checks.py) passes tf32 with >= 5x margin
and fails fp32; zeros and an off-by-one index fail both.

fp16 and bf16 (runs with --precision, inputs and weights in that dtype, ground truth float64 from
the same values): fp32 math rounded once to the dtype passes its class with >= 10x margin; cuDNN's
output (fp32 accumulation, rounded once; with a bias, the convolution rounded and then the bias
added in the dtype, emulated here; the real output on every family problem: test_gpu_checks.py)
with >= 5x; zeros, a one-element shift and a flipped kernel fail; bf16 arithmetic returned as fp16
fails fp16. The CPU's own half convolution is less accurate than cuDNN's (part of its sum in the
dtype): it passes with about 3x."""
import copy

import pytest
import torch
import torch.nn.functional as F

from harness.config import load_config
from harness.numerics import classify, compare
from harness.precision import classes

CFG = load_config(None).correctness
TOLS = {"fp32": CFG.fp32, "tf32": CFG.tf32}


def to_tf32(x: torch.Tensor) -> torch.Tensor:
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


@pytest.fixture(scope="module")
def conv():
    """A ConvTranspose2d like problem 57 (64 -> 64 channels, k3), small spatially."""
    torch.manual_seed(0)
    m = torch.nn.ConvTranspose2d(64, 64, 3)
    x = torch.rand(2, 64, 24, 24)
    w = m.weight.detach()
    truth = F.conv_transpose2d(x.double(), w.double())
    return x, w, truth


def test_strict_fp32_passes_fp32_with_10x_margin(conv):
    x, w, truth = conv
    out = F.conv_transpose2d(x, w)
    c = compare(out, truth, torch.float32, CFG.fp32)
    assert c.ok and c.margin >= 10, c.message


def test_tf32_passes_tf32_with_5x_margin_and_fails_fp32(conv):
    x, w, truth = conv
    out = F.conv_transpose2d(to_tf32(x).double(), to_tf32(w).double()).float()
    assert 5e-5 < compare(out, truth, torch.float32, CFG.fp32).rel_l2_error  # really TF32-sized error
    assert not compare(out, truth, torch.float32, CFG.fp32).ok
    c = compare(out, truth, torch.float32, CFG.tf32)
    assert c.ok and c.margin >= 5, c.message
    assert classify(out, truth, torch.float32, TOLS)[0] == "tf32"


@pytest.mark.parametrize("bad", ["zeros", "off_by_one_column", "off_by_one_tap"])
def test_lazy_and_wrong_outputs_fail_both(conv, bad):
    x, w, truth = conv
    if bad == "zeros":
        out = torch.zeros_like(truth, dtype=torch.float32)
    elif bad == "off_by_one_column":
        out = torch.roll(F.conv_transpose2d(x, w), 1, dims=3)
    else:  # kernel flipped: the classic index-math slip
        out = F.conv_transpose2d(x, torch.flip(w, dims=(2, 3)))
    assert classify(out, truth, torch.float32, TOLS)[0] is None


def test_small_outputs_cannot_pass_on_atol_alone():
    truth = torch.rand(1000, dtype=torch.float64) * 1e-6  # every element is far below atol
    assert compare(torch.zeros(1000), truth, torch.float32, CFG.tf32).ok is False
    assert "rel L2" in compare(torch.zeros(1000), truth, torch.float32, CFG.tf32).message


HALF = {"fp16": torch.float16, "bf16": torch.bfloat16}


@pytest.fixture(scope="module", params=["plain", "bias_grouped"])
def half_conv(request):
    """Problem 57's kind (64 -> 64 channels, k3) and 901's (bias, groups, output padding); inputs
    torch.rand as the problems draw them; per dtype the cast inputs and weights, and float64 truth
    from them."""
    torch.manual_seed(0)
    if request.param == "plain":
        m, x = torch.nn.ConvTranspose2d(64, 64, 3, bias=False), torch.rand(2, 64, 24, 24)
    else:
        m = torch.nn.ConvTranspose2d(64, 32, 3, stride=2, padding=1, output_padding=1, groups=4, bias=True)
        x = torch.rand(2, 64, 20, 20)
    out = {}
    for name, dtype in HALF.items():
        h = copy.deepcopy(m).to(dtype)
        xh = x.to(dtype)
        with torch.no_grad():
            truth = copy.deepcopy(h).double()(xh.double())
        out[name] = (h, xh, truth)
    return out


def tols(run):
    return {name: getattr(CFG, name) for name in classes(run)}


def no_bias_fp32(h, xh):
    """The convolution in fp32 from the half values, without the bias, and the bias."""
    m32 = copy.deepcopy(h).float()
    bias = None if m32.bias is None else m32.bias.detach()
    m32.bias = None
    with torch.no_grad():
        return m32(xh.float()), bias


@pytest.mark.parametrize("run", ["fp16", "bf16"])
def test_fp32_math_rounded_once_passes_its_class_with_10x_margin(half_conv, run):
    h, xh, truth = half_conv[run]
    conv, bias = no_bias_fp32(h, xh)
    out = (conv if bias is None else conv + bias.view(1, -1, 1, 1)).to(HALF[run])
    cls, c = classify(out, truth, HALF[run], tols(run))
    assert cls == run and c.margin >= 10, c.message


@pytest.mark.parametrize("run", ["fp16", "bf16"])
def test_cudnns_half_output_passes_its_class_with_5x_margin(half_conv, run):
    """fp32 accumulation rounded once, the bias then added in the dtype (rounded twice)."""
    h, xh, truth = half_conv[run]
    conv, bias = no_bias_fp32(h, xh)
    out = conv.to(HALF[run])
    if bias is not None:
        out = out + bias.to(HALF[run]).view(1, -1, 1, 1)
    cls, c = classify(out, truth, HALF[run], tols(run))
    assert cls == run and c.margin >= 5, c.message


@pytest.mark.parametrize("run", ["fp16", "bf16"])
def test_the_cpus_own_half_output_passes_its_class(half_conv, run):
    h, xh, truth = half_conv[run]
    with torch.no_grad():
        out = h(xh)
    cls, c = classify(out, truth, HALF[run], tols(run))
    assert cls == run and c.margin >= 2, c.message


@pytest.mark.parametrize("run", ["fp16", "bf16"])
@pytest.mark.parametrize("bad", ["zeros", "shift", "flipped_kernel"])
def test_lazy_and_wrong_half_outputs_fail(half_conv, run, bad):
    h, xh, truth = half_conv[run]
    with torch.no_grad():
        if bad == "zeros":
            out = torch.zeros_like(truth, dtype=HALF[run])
        elif bad == "shift":
            out = torch.roll(h(xh), 1, dims=3)
        else:
            flipped = copy.deepcopy(h)
            flipped.weight.data = torch.flip(flipped.weight.data, dims=(2, 3))
            out = flipped(xh)
    assert classify(out, truth, HALF[run], tols(run))[0] is None


def test_bf16_arithmetic_returned_as_fp16_fails_the_fp16_class(half_conv):
    h, xh, truth = half_conv["fp16"]
    with torch.no_grad():
        out = copy.deepcopy(h).to(torch.bfloat16)(xh.to(torch.bfloat16)).to(torch.float16)
    cls, c = classify(out, truth, torch.float16, tols("fp16"))
    assert cls is None, c.message
    assert c.rel_l2_error > 1.05 * CFG.fp16.rel_l2  # fails on its error, not by a hair


def test_fp16_arithmetic_in_a_bf16_run_is_bf16_class():
    """More accurate than the run's dtype is fine; the class a bf16 output can earn is bf16 (fp32
    only where its error is fp32-sized)."""
    torch.manual_seed(1)
    m, x = torch.nn.ConvTranspose2d(16, 16, 3).to(torch.bfloat16), torch.rand(1, 16, 16, 16).to(torch.bfloat16)
    with torch.no_grad():
        truth = copy.deepcopy(m).double()(x.double())
        out = copy.deepcopy(m).half()(x.half()).to(torch.bfloat16)
    assert classify(out, truth, torch.bfloat16, tols("bf16"))[0] == "bf16"
