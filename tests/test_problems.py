import runpy

import pytest
import torch

from harness import REPO_ROOT, problems
from harness.errors import BadInput
from conftest import FIXTURES

CT = "conv_transpose2d"


def test_discovery_finds_families_and_problems():
    assert {"conv_transpose2d", "examples"} <= set(problems.families())
    ids = {p.id for p in problems.discover() if p.family == CT}
    assert len(ids) >= 9
    assert "57_conv_transposed_2D__square_input__square_kernel" in ids


@pytest.mark.parametrize("spec, expected", [
    ("57", ["57_conv_transposed_2D__square_input__square_kernel"]),
    ("81_conv", ["81_conv_transpose_2d_asymmetric_input_square_kernel___dilated____padded____strided__"]),
    ("elementwise_add", ["elementwise_add"]),
    ("examples/elementwise", ["elementwise_add"]),
    ("problems/examples/elementwise_add.py", ["elementwise_add"]),
])
def test_select_one(spec, expected):
    assert [p.id for p in problems.select(spec)] == expected


def test_select_family():
    selected = problems.select(CT)
    assert len(selected) >= 9 and all(p.family == CT for p in selected)


def test_select_ambiguous_and_missing():
    with pytest.raises(BadInput, match="ambiguous"):
        problems.select("conv_transpose2d/7")
    with pytest.raises(BadInput, match="matches no problem"):
        problems.select("no_such_problem")
    with pytest.raises(BadInput, match="problem file not found"):
        problems.select("missing.py")


def test_problem_without_get_inputs_is_bad_input():
    problem = problems.problem_from_path(FIXTURES / "problems" / "no_get_inputs.py")
    with pytest.raises(BadInput) as err:
        problems.validate(problem)
    assert "no_get_inputs.py" in str(err.value) and "get_inputs" in str(err.value)


def test_problem_raising_at_import_names_line(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text("import torch\n\nx = 1 / 0\n")
    with pytest.raises(BadInput, match=r"bad.py:3: problem file failed to import: ZeroDivisionError"):
        problems.validate(problems.problem_from_path(path))


def test_kernelbench_problem_file_runs_unmodified():
    """The problem file is plain KernelBench format: it runs as a script and loads in the harness."""
    path = REPO_ROOT / "problems" / CT / "902_conv_transpose2d_odd_unaligned.py"
    namespace = runpy.run_path(str(path))  # no harness import, no modification
    model = namespace["Model"](*namespace["get_init_inputs"]())
    out = model(*namespace["get_inputs"]())
    assert out.shape[:2] == (5, 7)
    module = problems.load_problem(problems.problem_from_path(path))
    inputs = problems.make_inputs(module, seed=1, device="cpu")
    assert torch.equal(inputs[0], problems.make_inputs(module, seed=1, device="cpu")[0])
    assert not torch.equal(inputs[0], problems.make_inputs(module, seed=2, device="cpu")[0])


def test_every_conv_problem_constructs_and_matches_shape_rule():
    for problem in problems.select(CT):
        module = problems.load_problem(problem)
        model = problems.construct(module.Model, module.get_init_inputs(), seed=0, device="cpu")
        conv = model.conv_transpose2d
        x = torch.rand(1, conv.in_channels, 5, 6)
        y = model(x)
        kh, kw = conv.kernel_size
        h = (5 - 1) * conv.stride[0] - 2 * conv.padding[0] + conv.dilation[0] * (kh - 1) + conv.output_padding[0] + 1
        assert y.shape[2] == h, problem.id


def test_matched_seed_construction_is_reproducible():
    module = problems.load_problem(problems.select("57")[0])
    a = problems.construct(module.Model, module.get_init_inputs(), seed=3, device="cpu")
    b = problems.construct(module.Model, module.get_init_inputs(), seed=3, device="cpu")
    assert torch.equal(a.conv_transpose2d.weight, b.conv_transpose2d.weight)
