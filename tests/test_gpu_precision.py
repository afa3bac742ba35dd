"""fp16 and bf16 on the GPU (skipped without CUDA): cuDNN's own half output passes its class with
>= 5x margin on every ConvTranspose2d problem and bf16 arithmetic returned as fp16 fails fp16
(the CPU part of the calibration: tests/test_calibration.py); the red team caught in a bf16 run as
in an fp32 one; fast_bf16 judged bf16 class against PyTorch's bf16."""
import copy

import pytest
import torch

from harness import REPO_ROOT
from harness.core import problems
from harness.core.config import load_config, with_overrides
from harness.verdict.numerics import classify
from harness.core.precision import classes
from harness.core.problems import load_module
from harness.core.results import Status
from harness.run.runner import evaluate
from harness.core.solutions import Pair, solution_from_path
from conftest import ADD_PROBLEM, FIXTURES, FIXTURE_SOLUTIONS

pytestmark = pytest.mark.gpu
CFG = load_config(None).correctness
HALF = {"fp16": torch.float16, "bf16": torch.bfloat16}
FAMILY = problems.select("conv_transpose2d")


@pytest.mark.parametrize("problem", FAMILY, ids=[p.id.split("_")[0] for p in FAMILY])
def test_cudnns_half_output_passes_its_class_with_5x_margin(problem):
    module = load_module(problem.path)
    if hasattr(module, "batch_size"):
        module.batch_size = min(module.batch_size, 2)  # the benchmark's channels and sizes, fewer images
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).cuda()
    with torch.device("cuda"):
        inputs = module.get_inputs()
    for run, dtype in HALF.items():
        m, xs = copy.deepcopy(model).to(dtype), [x.to(dtype) for x in inputs]
        with torch.no_grad():
            truth = copy.deepcopy(m).double()(*[x.double() for x in xs])
            cls, c = classify(m(*xs), truth, dtype, {n: getattr(CFG, n) for n in classes(run)})
            assert cls == run and c.margin >= 5, f"{run}: {c.message}"
            if run == "fp16":
                other = copy.deepcopy(m).to(torch.bfloat16)(*[x.to(torch.bfloat16) for x in xs]).to(dtype)
                assert classify(other, truth, dtype, {n: getattr(CFG, n) for n in classes(run)})[0] is None


@pytest.fixture(scope="module")
def bf16_run(tmp_path_factory):
    cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"),
                         {"device": "cuda", "results_dir": str(tmp_path_factory.mktemp("r")), "timeouts.run_s": 300,
                          "precision": "bf16"})
    add = problems.problem_from_path(ADD_PROBLEM)
    p71 = problems.select("71")[0]
    pairs = [Pair(add, solution_from_path(FIXTURE_SOLUTIONS / f"{n}.py"))
             for n in ("half_add", "cheat_empty", "cheat_elapsed_time", "cheat_pointer_cache", "cheat_monkeypatch",
                       "half_mutate_input", "cheat_inplace_alias", "cheat_late_thread", "cheat_fix_previous")]
    pairs += [Pair(p71, solution_from_path(FIXTURE_SOLUTIONS / f"{n}.py"))
              for n in ("cheat_side_stream", "cheat_reference_output")]
    pairs.append(Pair(p71, solution_from_path(REPO_ROOT / "solutions" / "conv_transpose2d" / p71.id / "fast_bf16.py")))
    results = evaluate(pairs, cfg, run_id="gpu-bf16", out=print)
    return {r.solution["name"]: r for r in results}


def test_a_correct_bf16_solution_is_bf16_class_against_pytorchs_bf16(bf16_run):
    r = bf16_run["half_add"]
    assert r.status is Status.OK and r.correctness["precision"] == "bf16", r.message
    assert r.precision == "bf16" and r.timing["baseline"] == "reference"
    assert r.timing["reference_strict"]["median_ms"] > 0


@pytest.mark.parametrize("name, says", [("cheat_empty", "NaN/Inf"), ("half_mutate_input", "input 0 was modified"),
                                        ("cheat_inplace_alias", "shares memory with input 0"),
                                        ("cheat_late_thread", "outside"), ("cheat_fix_previous", "outside"),
                                        ("cheat_pointer_cache", ""), ("cheat_monkeypatch", "")])
def test_the_red_team_fails_in_bf16(bf16_run, name, says):
    r = bf16_run[name]
    assert r.status is Status.INCORRECT and says in r.message, r.message


def test_the_timing_checks_hold_in_bf16(bf16_run):
    assert "timing_inconsistent" in bf16_run["cheat_elapsed_time"].flags
    side = bf16_run["cheat_side_stream"]
    assert side.status is Status.OK and "library_passthrough" in side.flags and side.timing["speedup"] < 1.5
    ref = bf16_run["cheat_reference_output"]
    assert ref.correctness["precision"] == "bf16" and "library_passthrough" in ref.flags


def test_fast_bf16_is_bf16_class_and_runs_no_library_kernel(bf16_run):
    r = bf16_run["fast_bf16"]
    assert r.status is Status.OK and r.correctness["precision"] == "bf16", r.message
    assert r.correctness["min_margin"] >= 10 and not r.flags, r.message


# (N, Cin, Cout, kernel, H, W, padding, dilation, bias, whether a kernel writes bf16 itself[,
# stride, output padding, groups]): the bf16 epilogues' store widths (4, 2 elements, direct), odd
# widths, several channel blocks, both stride-1 kernels (ct2d_mmh for 32 output channels, ct2d_wgf
# for more), and the phase kernel (strided or grouped) with its pair and single-element stores
BF16_SHAPES = [
    (2, 32, 32, (3, 7), 11, 100, (1, 3), 1, True, True),     # Wout 100: 4-element stores
    (2, 20, 32, (3, 3), 13, 70, 1, 1, True, True),           # Wout 70: 2-element stores
    (1, 12, 96, (3, 5), 7, 33, 0, (2, 1), False, True),      # Wout 37: direct stores
    (3, 40, 32, (3, 3), 9, 61, 1, 1, True, True),            # Win 61: x staged by cp.async
    (2, 64, 64, (3, 3), 19, 45, 1, 1, True, True),           # one 64-channel block
    (1, 24, 136, (3, 7), 17, 45, (1, 3), 1, True, True),     # three channel blocks, a partial one
    (2, 16, 24, (3, 3), 9, 21, 1, 1, True, False),           # 24 channels: the fp32 path, rounded once
    (5, 3, 7, (5, 3), 7, 13, (2, 1), (1, 2), True, True, (3, 2), (1, 0), 1),  # 902: phase, Wout 27, single stores
    (2, 16, 32, (3, 3), 9, 20, 1, 1, True, True, 2, 1, 2),   # phase, grouped, Wout 40: pair stores
    (1, 8, 12, (3, 3), 10, 10, 1, 1, False, True, 1, 0, 4),  # stride 1, 4 groups: phase
]


def bf16_call(shape, config=0):
    """(plan, output, float64 truth from the same bf16 values) of FastConvTranspose2dBF16 on a
    BF16_SHAPES entry, with `config` (fast/dispatch.cu)."""
    import sys

    sys.path.insert(0, str(REPO_ROOT / "solutions" / "conv_transpose2d" / "_shared"))
    import ct2d_fast

    n, cin, cout, k, h, w, pad, dil, bias = shape[:9]
    stride, outpad, groups = shape[10:] or (1, 0, 1)
    torch.manual_seed(0)
    model = ct2d_fast.FastConvTranspose2dBF16(cin, cout, k, stride=stride, padding=pad, output_padding=outpad,
                                              dilation=dil, groups=groups, bias=bias).cuda().bfloat16()
    model.config = config
    x = torch.randn(n, cin, h, w, device="cuda").bfloat16()
    with torch.no_grad():
        plan = model.plan(x)
        out = model(x)
        c = model.conv_transpose2d
        truth = torch.nn.functional.conv_transpose2d(x.double(), c.weight.double(),
                                                     None if c.bias is None else c.bias.double(), stride=stride,
                                                     padding=pad, output_padding=outpad, groups=groups,
                                                     dilation=dil)
    return plan, out, truth


@pytest.mark.parametrize("shape", BF16_SHAPES, ids=lambda s: "x".join(map(str, s[:3])) + f"_w{s[5]}")
def test_fast_bf16_kernels_write_bf16_class_outputs(shape):
    """The bf16 kernels (fast/dispatch.cu: the rows marked bf16) against float64 from the same bf16
    values; whether a kernel reading and writing bf16 ran is the plan's io ("bf16", else "bf16 via
    fp32": x widened, the output rounded)."""
    plan, out, truth = bf16_call(shape)
    assert (plan.io == "bf16") == shape[9], plan
    assert out.dtype == torch.bfloat16
    cls, comparison = classify(out, truth, torch.bfloat16, {n_: getattr(CFG, n_) for n_ in classes("bf16")})
    assert cls == "bf16" and comparison.margin >= 10, comparison.message



# the phase kernel's shapes (strided or grouped, not stride 1 with one group), and the family's
# cin_g of 64 with stride 2 and 3, for the bf16 MMA of config 9 (issue 77, not yet the rule's)
PHASE_BF16_SHAPES = [s for s in BF16_SHAPES if len(s) > 10 and (s[10] != 1 or s[12] != 1)] + [
    (2, 64, 32, (4, 4), 12, 18, 1, 1, True, True, 2, 0, 1),
    (1, 40, 24, (3, 5), 8, 11, (1, 2), 1, True, True, 3, (2, 1), 1),
]


@pytest.mark.parametrize("shape", PHASE_BF16_SHAPES, ids=lambda s: "x".join(map(str, s[:3])) + f"_w{s[5]}")
def test_phase_bf16_mma_is_bf16_class(shape):
    """fast/phase.cuh TC = 2 (config 9): bf16 operands on m16n8k16, fp32 accumulation, against
    float64 from the same bf16 values, as the TF32 variant's test above; the plan names it."""
    plan, out, truth = bf16_call(shape, config=9)
    assert plan.io == "bf16" and "bf16 mma.sync" in plan.config, plan
    cls, comparison = classify(out, truth, torch.bfloat16, {n_: getattr(CFG, n_) for n_ in classes("bf16")})
    assert cls == "bf16" and comparison.margin >= 10, comparison.message


# stride 1, one group, for config 9's bf16 MMAs there (issue 77), with the kernel the plan must name
# (None: no bf16 staging applies and the fp32 rule runs on x widened). ct2d_mmh (32 output channels a
# block; x's rows 16-byte multiples for its bf16 TMA staging): a partial chunk of 16 (Cin 20, 40),
# one chunk, dilation, ten chunks (their weights staged one chunk at a time), 3x7 taps and 3x5 with
# two rows of dilation (two fp32-sized slots, x paired in them, and a half one: 77-92 KB with one
# chunk's weights; with three slots these passed 110 KB and fell back, H200); where even that and
# one chunk's weights pass 110 KB (3x7 with two rows of dilation: 13 x 88 staged positions, 113 KB)
# it does not apply, and the plan names ct2d_mma on x widened. Win 61 falls back. ct2d_wgs with
# WgdBf16Ops (more than 32 output channels, its producer's bf16 TMA ring): a partial block (48),
# three chunks with a partial one, dilation, two blocks (128), two and a partial one (96), one
# chunk (Cin 16: no staggered consumers); Win 45 falls back.
BF16_MMA_SHAPES = [
    ((2, 32, 32, (3, 3), 11, 104, (1, 3), 1, True, True), "ct2d_mmh"),
    ((2, 20, 32, (3, 3), 13, 72, 1, 1, True, True), "ct2d_mmh"),
    ((1, 40, 32, (3, 3), 9, 64, (1, 2), (1, 2), False, True), "ct2d_mmh"),
    ((1, 160, 32, (3, 3), 6, 40, 1, 1, True, True), "ct2d_mmh"),
    ((1, 8, 32, (3, 3), 9, 40, 1, 1, True, True), "ct2d_mmh"),
    ((2, 32, 32, (3, 7), 11, 104, (1, 3), 1, True, True), "ct2d_mmh"),
    ((1, 40, 32, (3, 5), 9, 64, (1, 2), (2, 1), False, True), "ct2d_mmh"),
    ((1, 160, 32, (3, 7), 6, 40, (1, 3), 1, True, True), "ct2d_mmh"),
    ((1, 40, 32, (3, 7), 9, 64, (2, 3), (2, 1), False, True), None),
    ((3, 40, 32, (3, 3), 9, 61, 1, 1, True, False), None),
    ((2, 32, 64, (3, 3), 19, 48, 1, 1, True, True), "WgdBf16Ops"),
    ((1, 40, 48, (3, 5), 13, 40, (1, 2), 1, True, True), "WgdBf16Ops"),
    ((2, 64, 64, (3, 7), 9, 64, (1, 3), (1, 2), False, True), "WgdBf16Ops"),
    ((2, 24, 128, (3, 3), 9, 48, 1, 1, True, True), "WgdBf16Ops"),
    ((2, 64, 96, (3, 3), 10, 48, 1, 1, True, True), "WgdBf16Ops"),
    ((2, 16, 64, (3, 3), 9, 48, 1, 1, True, True), "WgdBf16Ops"),
    ((1, 32, 64, (3, 3), 9, 45, 1, 1, True, False), None),
]


@pytest.mark.parametrize("shape, kernel", BF16_MMA_SHAPES,
                         ids=lambda s: "x".join(map(str, s[:3])) + f"_w{s[5]}" if isinstance(s, tuple) else str(s))
def test_stride1_bf16_mma_is_bf16_class(shape, kernel):
    """config 9 on stride 1: fast/mma.cuh's ct2d_mmh and fast/wgmma.cuh's ct2d_wgs on a bf16 x staged
    as it is by TMA, bf16 operands, fp32 accumulation, against float64 from the same bf16 values;
    the plan names the kernel (where neither applies, the fp32 rule on x widened)."""
    plan, out, truth = bf16_call(shape, config=9)
    assert (plan.io == "bf16") == (kernel is not None), plan
    if kernel:
        assert kernel in plan.kernel and "bf16" in plan.kernel.lower().replace("bfloat16", "bf16"), plan
        assert "bf16" in plan.config, plan
    cls, comparison = classify(out, truth, torch.bfloat16, {n_: getattr(CFG, n_) for n_ in classes("bf16")})
    assert cls == "bf16" and comparison.margin >= 10, comparison.message


MATMUL = problems.select("1_Square_matrix_multiplication_")[0]


def _small(problem):
    """The problem's module at its benchmark channels and sizes with fewer images (a smaller
    matrix for the matmul), its model and inputs on the GPU, and float64 truth."""
    module = load_module(problem.path)
    if hasattr(module, "batch_size"):
        module.batch_size = min(module.batch_size, 2)
    if hasattr(module, "N"):
        module.N = 1024
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).cuda()
    with torch.device("cuda"):
        inputs = module.get_inputs()
    with torch.no_grad():
        truth = copy.deepcopy(model).double()(*[x.double() for x in inputs])
    return module, model, inputs, truth


@pytest.mark.parametrize("problem", FAMILY + [MATMUL], ids=[p.id.split("_")[0] for p in FAMILY + [MATMUL]])
def test_the_tf32_class_passes_tf32_arithmetic_by_2x_and_fails_bf16_arithmetic(problem):
    """fp32 runs: the tf32 class's bound per output lies between the reference's own errors with its
    operands rounded to TF32 and to bf16 (numerics.rounding_errors). PyTorch's default (cuDNN or
    cuBLAS, TF32 where they use it) and the repository's `fast` pass it with >= 2x margin; bf16
    arithmetic (cuDNN's or cuBLAS's bf16 returned as fp32) fails both classes."""
    from harness.verdict.numerics import rounded_tolerance, rounding_errors
    module, model, inputs, truth = _small(problem)
    errors = rounding_errors(model, inputs, truth, "cuda")
    tols = {"fp32": CFG.fp32, "tf32": rounded_tolerance(CFG.tf32, errors, CFG.fp32.rel_l2)}
    outputs = {}
    with torch.no_grad():
        outputs["default"] = model(*inputs)
        outputs["bf16"] = copy.deepcopy(model).bfloat16()(*[x.bfloat16() for x in inputs]).float()
        fast = REPO_ROOT / "solutions" / "conv_transpose2d" / problem.id / "fast.py"
        if fast.exists():
            torch.manual_seed(0)
            solution = load_module(fast, prefix="kb_solution").ModelNew(*module.get_init_inputs()).cuda()
            solution.load_state_dict(model.state_dict())
            outputs["fast"] = solution(*inputs)
    seen = {name: classify(out, truth, torch.float32, tols) for name, out in outputs.items()}
    report = f"bound {tols['tf32'].rel_l2:.3g} from {errors}; " + "; ".join(
        f"{n}: {cls} rel L2 {c.rel_l2_error:.3g} margin {c.margin:.3g}" for n, (cls, c) in seen.items())
    print(problem.id, report)
    for name in ("default", "fast"):
        if name in seen:
            cls, c = seen[name]
            assert cls == "fp32" or (cls == "tf32" and c.margin >= 2), report
    assert seen["bf16"][0] is None, report
