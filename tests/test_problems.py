import runpy

import pytest
import torch

from harness import REPO_ROOT
from harness.core import problems
from harness.core.errors import BadInput
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



def test_inputs_are_drawn_as_torch_manual_seed_draws_them(tmp_path):
    """make_inputs seeds only what get_inputs() draws from (problems.seed_draws: Python's random, the
    CPU generator, CUDA's), to the states torch.manual_seed gives them: the same inputs seed for
    seed, and the same generator state after."""
    import random
    path = tmp_path / "drawn.py"
    path.write_text("import random\nimport torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                    "        return x\n\n\ndef get_inputs():\n    return [torch.randn(3, 5), torch.randint(0, 9, (4,)), "
                    "random.random(), torch.rand(2, dtype=torch.float64)]\n\n\ndef get_init_inputs():\n    return []\n")
    module = problems.load_module(path)
    for seed in (0, 7, 2**31 - 1):
        random.seed(seed)
        torch.manual_seed(seed)
        expected, expected_next = module.get_inputs(), torch.rand(3)
        got, got_next = problems.make_inputs(module, seed, "cpu"), torch.rand(3)
        assert got[2] == expected[2]
        for a, b in zip(got[:2] + got[3:], expected[:2] + expected[3:]):
            assert a.dtype == b.dtype and torch.equal(a, b)
        assert torch.equal(got_next, expected_next)

FUSED_SHA256 = {   # KernelBench/level2 at ScalingIntelligence/KernelBench 423217d, byte for byte
    "2_ConvTranspose2d_BiasAdd_Clamp_Scaling_Clamp_Divide.py": "2b69e31d12d28d291fb5b56634176269ba6513e8d240fc01d6f8a7b706abc109",
    "5_ConvTranspose2d_Subtract_Tanh.py": "442f35521753e48196379d5a4659d13d979817fd605cfb1a1a205b536faa90cc",
    "10_ConvTranspose2d_MaxPool_Hardtanh_Mean_Tanh.py": "a8f0fab54e125017083473ddee3bcff6546b4eda28ba98cacbebfbe14ae8130b",
    "11_ConvTranspose2d_BatchNorm_Tanh_MaxPool_GroupNorm.py": "e10fa44d0dbc6f6d9b7fff411dae2730502c2b15236d9ec1097e7deff37f1981",
    "16_ConvTranspose2d_Mish_Add_Hardtanh_Scaling.py": "3a5a97178dad5b980b33f35b7712826a08a92a5fd8a486a22cdabc84b97dcc15",
    "19_ConvTranspose2d_GELU_GroupNorm.py": "b7b68e7498c80dfe9491981ef97feb07aa684ce7229943d2cc701fdb83fb509c",
    "36_ConvTranspose2d_Min_Sum_GELU_Add.py": "e8a14171f06b41a2bb5067e1397d2b1afd928c95272916b3c16dfff811f98316",
    "42_ConvTranspose2d_GlobalAvgPool_BiasAdd_LogSumExp_Sum_Multiply.py": "0eeb1e46e5bacfed11e5bfddffe6f4fdfd981332e0fb56c4e67b219d6faba3a6",
    "44_ConvTranspose2d_Multiply_GlobalAvgPool_GlobalAvgPool_Mean.py": "8b08cbe307167cb006a00e6f8309bce56dad016b9bc5346c4484b315cfdb411d",
    "91_ConvTranspose2d_Softmax_BiasAdd_Scaling_Sigmoid.py": "3b571801aec40ec4214ffd9ae7dc4a099560a6bc35564c792280331951023c71",
    "93_ConvTranspose2d_Add_Min_GELU_Multiply.py": "3f9c3e542afa320508390c00b28bb407b3999caa919a5885bbd03e2c8f1df547",
}


def test_the_fused_family_is_kernelbench_level2_byte_for_byte_with_extra_shapes_that_run():
    """problems/conv_transpose2d_fused holds KernelBench's eleven level-2 ConvTranspose2d problems
    unmodified; each has two extra correctness shapes in the default config that validate (they
    name the file's constants) and run, as the worker sets them, on the CPU."""
    from harness.core.config import load_config
    selected = problems.select("conv_transpose2d_fused")
    assert {p.path.name: problems.file_sha256(p.path) for p in selected} == FUSED_SHA256
    extra = load_config(REPO_ROOT / "configs" / "default.yaml").correctness.extra_shapes
    for problem in selected:
        shapes = problems.extra_shapes_for(problem, extra)
        assert len(shapes) == 2, problem.id
        problems.validate(problem, shapes, "configs/default.yaml")
        for shape in shapes:
            module = problems.load_problem(problem)
            for key, value in shape.items():
                setattr(module, key, value)
            model = problems.construct(module.Model, list(module.get_init_inputs()), seed=0, device="cpu")
            out = model(*problems.make_inputs(module, seed=1, device="cpu"))
            assert out.shape[0] == shape["batch_size"] and torch.isfinite(out).all(), problem.id
