from types import SimpleNamespace

import torch

from harness.verdict.numerics import compare, diagnose_parameters, ground_truth

T = SimpleNamespace(atol=1e-3, rtol=1e-3, rel_l2=1e-2)
LOOSE = SimpleNamespace(atol=1, rtol=1, rel_l2=1e9)


def test_exact_match_passes():
    x = torch.rand(4, 5, dtype=torch.float64)
    c = compare(x.float(), x, torch.float32, SimpleNamespace(atol=1e-5, rtol=1e-5, rel_l2=1e-6))
    assert c.ok and c.mismatched == 0 and c.max_abs_error < 1e-7


def test_shape_dtype_and_type_mismatch_messages():
    truth = torch.zeros(2, 3, dtype=torch.float64)
    assert "shape mismatch: got (3, 2), expected (2, 3)" in compare(torch.zeros(3, 2), truth, torch.float32, LOOSE).message
    assert "dtype mismatch: got torch.float64, expected torch.float32" in compare(truth, truth, torch.float32, LOOSE).message
    assert "expected a torch.Tensor" in compare([1], truth, torch.float32, LOOSE).message


def test_worst_element_and_count_reported():
    truth = torch.zeros(3, 4, dtype=torch.float64)
    out = torch.zeros(3, 4)
    out[2, 1] = 0.5
    out[0, 0] = 0.1
    c = compare(out, truth, torch.float32, T)
    assert not c.ok and c.mismatched == 2 and c.worst_index == (2, 1)
    assert "worst at index [2, 1]" in c.message and c.max_abs_error == 0.5


def test_nan_fails_unless_truth_has_it_too():
    truth = torch.ones(4, dtype=torch.float64)
    out = torch.ones(4)
    out[1] = float("nan")
    c = compare(out, truth, torch.float32, T)
    assert not c.ok and "NaN/Inf" in c.message
    truth[1] = float("nan")
    assert compare(out, truth, torch.float32, T).ok


def test_ground_truth_runs_in_float64():
    torch.manual_seed(0)
    model = torch.nn.ConvTranspose2d(3, 4, 3)
    x = torch.rand(1, 3, 5, 5)
    out, precision = ground_truth(model, [x], "cpu")
    assert precision == "float64" and out.dtype == torch.float64
    assert torch.allclose(out.float(), model(x), atol=1e-5)
    assert model.weight.dtype == torch.float32  # the reference model itself is untouched


def test_parameter_diagnostics_name_the_parameter_and_the_difference():
    torch.manual_seed(0)
    ref_model = torch.nn.Sequential(torch.nn.ConvTranspose2d(3, 4, 3))
    ref = {k: v.detach() for k, v in ref_model.state_dict().items()}
    assert diagnose_parameters(dict(ref), ref, ref_model) == []
    transposed = {"0.weight": ref["0.weight"].transpose(0, 1).contiguous(), "0.bias": ref["0.bias"]}
    (line,) = diagnose_parameters(transposed, ref, ref_model)
    assert "'0.weight' has shape (4, 3, 3, 3)" in line and "(3, 4, 3, 3)" in line and "another order" in line
    assert "(in_channels, out_channels/groups, kh, kw)" in line
    other = {"weight": torch.rand_like(ref["0.weight"]), "bias": ref["0.bias"]}
    (line,) = diagnose_parameters(other, ref, ref_model)
    assert "'weight' (paired with reference '0.weight' by name)" in line and "init order" in line
    missing = diagnose_parameters({"w": ref["0.weight"]}, ref, ref_model)
    assert "ModelNew has 1 parameters/buffers (w); the reference has 2" in missing[0]


def test_phase_pattern_says_where_truth_is_zero():
    """A stride-2 transposed convolution whose truth is zero in one output phase (no tap reaches
    it) and a kernel that writes there: the phase line says so instead of a relative error over 0."""
    truth = torch.rand(1, 4, 16, 16, dtype=torch.float64) + 0.5
    truth[..., 0::2, 0::2] = 0.0
    out = truth.float().clone()
    out[..., 0::2, 0::2] = 1.0      # phase (0, 0): written where nothing should be
    out[..., 1::2, 1::2] *= 1.5     # phase (1, 1): wrong as well
    c = compare(out, truth, torch.float32, T)
    assert not c.ok and "output phase" in c.message, c.message
    assert "(0,0): truth is 0 there, the output is not (L2 " in c.message
    assert "e+30" not in c.message
