"""The exact algebra of the fused family's 42 and 44 (solutions/conv_transpose2d_fused/_shared/
ct2d_means.py): the mean over all positions of a ConvTranspose2d from row and column sums of x,
without the convolution. In float64 it is the convolution's mean to rounding, on any geometry;
the solutions' forward, in fp32, is the float64 reference's output to fp32 rounding. (Their
files declare DEVICES = ("cuda",): a CPU run skips them, since the problems' references are too
large for a CPU; their verdicts and speed are the GPU's.)"""
import importlib.util
import random
import sys

import pytest
import torch

from harness import REPO_ROOT

FUSED = REPO_ROOT / "solutions" / "conv_transpose2d_fused"
sys.path.insert(0, str(FUSED / "_shared"))
from ct2d_means import channel_means  # noqa: E402


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def random_geometries(seed: int, count: int, bias=None):
    """count random ConvTranspose2d geometries (float64) with an input and the convolution's mean
    over all positions: (conv, x, reference); bias None: with or without, at random."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    made = 0
    while made < count:
        kernel = (rng.randint(1, 5), rng.randint(1, 5))
        stride, dilation = (rng.randint(1, 3), rng.randint(1, 3)), (rng.randint(1, 3), rng.randint(1, 2))
        padding = (rng.randint(0, 3), rng.randint(0, 3))
        output_padding = tuple(rng.randint(0, max(s, d) - 1) for s, d in zip(stride, dilation))
        h, w = rng.randint(1, 12), rng.randint(1, 12)
        conv = torch.nn.ConvTranspose2d(3, 4, kernel, stride=stride, padding=padding, output_padding=output_padding,
                                        dilation=dilation, bias=rng.random() < 0.5 if bias is None else bias).double()
        x = torch.randn(2, 3, h, w, dtype=torch.float64)
        try:
            reference = conv(x).mean(dim=(2, 3))
        except RuntimeError:   # a geometry PyTorch refuses (an output size below 1, an output padding too large)
            continue
        yield conv, x, reference
        made += 1


def test_the_mean_of_a_transposed_convolution_is_exact_algebra_on_any_geometry():
    for conv, x, reference in random_geometries(0, 150):
        got = channel_means(x, conv)
        assert (got - reference).abs().max().item() < 1e-12, conv


@pytest.mark.parametrize("problem", ["42_ConvTranspose2d_GlobalAvgPool_BiasAdd_LogSumExp_Sum_Multiply",
                                     "44_ConvTranspose2d_Multiply_GlobalAvgPool_GlobalAvgPool_Mean"])
def test_the_solutions_are_the_float64_reference_to_fp32_rounding_on_the_extra_shapes(problem, monkeypatch):
    """The solutions' algebra on the CPU: channel_means_fused is channel_means (PyTorch operators)
    for a CPU tensor, and the import's build of means.cu is left out (no CUDA here); the kernels
    are tests/test_gpu_fused.py's and the harness's."""
    import ct2d_means
    from harness.core.config import load_config
    monkeypatch.setattr(ct2d_means, "extension", lambda: None)
    spec = load(REPO_ROOT / "problems" / "conv_transpose2d_fused" / f"{problem}.py", f"p{problem[:2]}")
    solution = load(FUSED / problem / "fast.py", f"s{problem[:2]}")
    shapes = load_config(REPO_ROOT / "configs" / "default.yaml").correctness.extra_shapes[f"conv_transpose2d_fused/{problem}"]
    for shape in shapes:
        for name, value in shape.items():
            setattr(spec, name, tuple(value) if isinstance(value, list) else value)
        torch.manual_seed(1)
        model = spec.Model(*spec.get_init_inputs()).double()
        new = solution.ModelNew(*spec.get_init_inputs())
        new.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
        x = spec.get_inputs()[0]
        with torch.no_grad():
            reference, got = model(x.double()), new(x.float()).double()
        assert got.shape == reference.shape
        assert ((got - reference).norm() / reference.norm()).item() < 1e-6, shape


def test_tap_windows_are_the_complements_of_the_excluded_sets():
    """means.cu's per-tap intervals (ct2d_means.tap_windows) hold exactly the input indices that
    _excluded (what the torch version subtracts) leaves in, on many geometries."""
    from ct2d_means import _excluded, tap_windows

    for size in (1, 2, 5, 16, 17):
        for k in (1, 2, 3, 4, 5):
            for s in (1, 2, 3):
                for p in range(0, k):
                    for d in (1, 2):
                        for op in range(0, max(s, d)):
                            ex = _excluded(size, k, s, p, op, d)
                            for t, (lo, hi) in enumerate(tap_windows(size, k, s, p, op, d)):
                                assert set(range(lo, hi)) == set(range(size)) - ex[t], (size, k, s, p, op, d, t)


def test_the_two_kernels_algebra_emulated_is_the_convolutions_mean():
    """What means.cu computes, in float64 on the CPU: window sums over tap_windows' intervals
    (window_sums) and the contraction with the weight laid out as channel_means_fused lays it out
    ([ci * kh * kw, co]), divided by the output's area, plus the bias (contract_means), on random
    geometries against the convolution's mean."""
    from ct2d_means import output_size, tap_windows

    for conv, x, reference in random_geometries(1, 100, bias=True):
        (kh, kw), (sh, sw), (ph, pw) = conv.kernel_size, conv.stride, conv.padding
        (oph, opw), (dh, dw), (h, w) = conv.output_padding, conv.dilation, x.shape[2:]
        wh, ww = tap_windows(h, kh, sh, ph, oph, dh), tap_windows(w, kw, sw, pw, opw, dw)
        s = torch.stack([torch.stack([x[:, :, a0:a1, b0:b1].sum(dim=(2, 3)) for b0, b1 in ww], dim=-1)
                         for a0, a1 in wh], dim=-2)                           # [n, ci, kh, kw]
        wt = conv.weight.detach().permute(0, 2, 3, 1).reshape(-1, 4)        # [ci * kh * kw, co]
        area = output_size(h, kh, sh, ph, oph, dh) * output_size(w, kw, sw, pw, opw, dw)
        got = s.reshape(2, -1) @ wt / area + conv.bias.detach()
        assert (got - reference).abs().max().item() < 1e-12, conv
