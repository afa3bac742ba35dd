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
import dataclasses

import pytest
import torch
import torch.nn.functional as F

from harness.core.config import load_config
from harness.verdict.numerics import classify, compare, round_operand, rounded_tolerance, rounding_errors
from harness.core.precision import classes

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


# The tf32 class separates arithmetics: its rel L2 bound per output lies between the errors of the
# reference with its operands rounded to TF32 and to bf16 (numerics.rounding_errors). Cases: problem
# 57's kind, 81's (stride 5, dilation 2, padding 1), KernelBench level 1's square matmul (small N)
# and the elementwise add, with the problems' torch.rand inputs.
def _case(name):
    torch.manual_seed(0)
    if name == "ct2d_57":
        m, xs = torch.nn.ConvTranspose2d(64, 64, 3, bias=False), [torch.rand(2, 64, 24, 24)]
    elif name == "ct2d_81":
        m, xs = torch.nn.ConvTranspose2d(32, 64, 3, stride=5, padding=1, dilation=2, bias=False), [torch.rand(2, 32, 8, 12)]
    elif name == "matmul":
        m, xs = MatMul(), [torch.rand(256, 256), torch.rand(256, 256)]
    else:
        m, xs = Add(), [torch.rand(64, 1024), torch.rand(64, 1024)]
    with torch.no_grad():
        truth = copy.deepcopy(m).double()(*[x.double() for x in xs])
    return m, xs, truth


class MatMul(torch.nn.Module):
    def forward(self, a, b):
        return a @ b


class Add(torch.nn.Module):
    def forward(self, a, b):
        return a + b


def arithmetic(m, xs, kind):
    """The model with its operands rounded to `kind`, accumulated exactly (float64), returned as fp32
    (bf16 arithmetic of a kernel that returns fp32); 'bf16_out': cuDNN's bf16 path, output rounded."""
    rounding = "bf16" if kind.startswith("bf16") else kind
    r = copy.deepcopy(m).double()
    with torch.no_grad():
        for p in r.parameters():
            p.copy_(round_operand(p.float(), rounding).double())
        out = r(*[round_operand(x, rounding).double() for x in xs]).float()
    return out.to(torch.bfloat16).float() if kind == "bf16_out" else out


CASES = ["ct2d_57", "ct2d_81", "matmul", "add"]


@pytest.mark.parametrize("name", CASES)
def test_tf32_arithmetic_passes_tf32_with_2x_margin_and_fails_fp32(name):
    m, xs, truth = _case(name)
    errors = rounding_errors(m, xs, truth, "cpu")
    assert errors["bf16"] > 5 * errors["tf32"] > 0, errors  # bf16 keeps 3 bits fewer: ~8x
    tol = rounded_tolerance(CFG.tf32, errors, CFG.fp32.rel_l2)
    out = arithmetic(m, xs, "tf32")
    assert not compare(out, truth, torch.float32, CFG.fp32).ok
    c = compare(out, truth, torch.float32, tol)
    assert c.ok and c.margin >= 2, c.message
    assert classify(out, truth, torch.float32, {"fp32": CFG.fp32, "tf32": tol})[0] == "tf32"


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("kind", ["bf16", "bf16_out"])
def test_bf16_arithmetic_fails_both_fp32_classes(name, kind):
    """bf16 operands with fp32 accumulation returned as fp32, or cuDNN's bf16 output upcast: the
    error is bf16's, about 8x TF32's, and fails the tf32 class by at least 1.3x."""
    m, xs, truth = _case(name)
    errors = rounding_errors(m, xs, truth, "cpu")
    tol = rounded_tolerance(CFG.tf32, errors, CFG.fp32.rel_l2)
    out = arithmetic(m, xs, kind)
    cls, c = classify(out, truth, torch.float32, {"fp32": CFG.fp32, "tf32": tol})
    assert cls is None, c.message
    assert c.rel_l2_error > 1.3 * tol.rel_l2, (c.rel_l2_error, tol.rel_l2)


def _large_sums():
    """KernelBench level 1's matmuls: sums of K products of randn, an output's RMS sqrt(K) (64 here),
    so that elements near 0 sit far below their row's rounding error in any arithmetic but fp64."""
    torch.manual_seed(0)
    m, xs = MatMul(), [torch.randn(64, 4096), torch.randn(4096, 64)]
    with torch.no_grad():
        truth = xs[0].double() @ xs[1].double()
    return m, xs, truth


def test_tf32_arithmetic_on_large_sums_passes_the_tf32_class_elementwise_too():
    """The fixed atol (5e-3) held TF32 arithmetic on a matmul of randn to less than it makes: its
    errors near 0 are e_tf32 x the RMS (about 0.02 here), so it failed on many elements (KernelBench's
    6_Matmul_with_large_K, 131,072 products: 2,294 of 65,536). With atol at least atol_rms x TF32's
    own RMS error on the output it passes with 2x margin; an fp32 kernel summing in order passes;
    bf16 arithmetic still fails."""
    m, xs, truth = _large_sums()
    errors = rounding_errors(m, xs, truth, "cpu")
    assert errors["truth_rms"] == pytest.approx(float(truth.pow(2).mean().sqrt()), rel=1e-9)
    tf32 = arithmetic(m, xs, "tf32")
    fixed = rounded_tolerance(dataclasses.replace(CFG.tf32, atol_rms=None), errors, CFG.fp32.rel_l2)
    old = compare(tf32, truth, torch.float32, fixed)
    assert not old.ok and old.mismatched > 50, old.message  # the fixed atol: TF32 itself fails
    tol = rounded_tolerance(CFG.tf32, errors, CFG.fp32.rel_l2)
    assert tol.atol == pytest.approx(CFG.tf32.atol_rms * errors["tf32"] * errors["truth_rms"])
    c = compare(tf32, truth, torch.float32, tol)
    assert c.ok and c.margin >= 2, c.message
    in_order = xs[0] @ xs[1]  # fp32 sums (a blocked order; a one-thread loop is within 2x of it here)
    assert compare(in_order, truth, torch.float32, tol).ok
    for kind in ("bf16", "bf16_out"):
        cls, c = classify(arithmetic(m, xs, kind), truth, torch.float32, {"fp32": CFG.fp32, "tf32": tol})
        assert cls is None, c.message


@pytest.mark.parametrize("bad", ["one_element_off", "lazy_tail", "one_row_stale"])
def test_wrong_outputs_on_large_sums_still_fail_the_raised_atol(bad):
    """What the raised atol lets through is 16 x TF32's RMS error (about 0.3 on an output of RMS 64):
    the element nearest 0 off by 1% of the RMS, a sum that skips the last 1% of its products, a row
    off by 1% of the RMS (its relative L2 within the bound: only the elementwise test sees it)."""
    m, xs, truth = _large_sums()
    tol = rounded_tolerance(CFG.tf32, rounding_errors(m, xs, truth, "cpu"), CFG.fp32.rel_l2)
    out = (xs[0] @ xs[1]).clone()
    scale = float(truth.pow(2).mean().sqrt())
    if bad == "one_element_off":
        out.view(-1)[int(truth.abs().argmin())] += 0.01 * scale
    elif bad == "lazy_tail":
        out = xs[0][:, :4055] @ xs[1][:4055]
    else:
        out[7] += 0.01 * scale
    cls, c = classify(out, truth, torch.float32, {"fp32": CFG.fp32, "tf32": tol})
    assert cls is None, c.message


def test_the_rounding_bound_stays_within_the_fixed_one_and_the_fp32_class():
    m, xs, truth = _case("ct2d_57")
    tol = rounded_tolerance(CFG.tf32, rounding_errors(m, xs, truth, "cpu"), CFG.fp32.rel_l2)
    assert CFG.fp32.rel_l2 <= tol.rel_l2 <= CFG.tf32.rel_l2 and tol.rounding["tf32"] > 0
    exact = rounded_tolerance(CFG.tf32, {"tf32": 0.0, "bf16": 0.0}, CFG.fp32.rel_l2)  # operands exact in bf16
    assert exact.rel_l2 == CFG.fp32.rel_l2
    assert rounded_tolerance(CFG.tf32, None, CFG.fp32.rel_l2) is CFG.tf32  # the reference could not run so


def test_round_operand_rounds_to_nearest_even():
    x = torch.tensor([1.0 + 2 ** -11, 1.0 + 3 * 2 ** -11, -(1.0 + 2 ** -11), 1.0 + 2 ** -10, float("inf")])
    assert round_operand(x, "tf32").tolist() == [1.0, 1.0 + 2 ** -9, -1.0, 1.0 + 2 ** -10, float("inf")]
    assert round_operand(x, "bf16").tolist() == x.to(torch.bfloat16).float().tolist()


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
