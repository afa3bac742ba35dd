"""The precision classes are calibrated: PyTorch's strict fp32 output passes fp32 with >= 10x
margin; TF32 output (emulated on the CPU by rounding operands to 10 mantissa bits, as tensor
cores do; the real cuDNN output is checked in test_gpu_checks.py) passes tf32 with >= 5x margin
and fails fp32; zeros and an off-by-one index fail both."""
import pytest
import torch
import torch.nn.functional as F

from harness.config import load_config
from harness.numerics import classify, compare

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
