"""GPU end to end (skipped without CUDA): the CUDA example, and the direct and fast ConvTranspose2d kernels on the extra variants."""
import pytest

from harness.core import problems, solutions
from harness.core.config import load_config, with_overrides
from harness.core.results import Status
from harness.run.runner import evaluate
from conftest import FIXTURES

pytestmark = pytest.mark.gpu


def _run(tmp_path, problem_spec, solution_spec):
    cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"),
                         {"device": "cuda", "results_dir": str(tmp_path), "timeouts.run_s": 300})
    pairs = solutions.select_pairs(problems.select(problem_spec), solution_spec, True, problems.discover())
    return evaluate(pairs, cfg, run_id="gpu", out=lambda line: None)


def test_cuda_example_and_cpp_solution_on_gpu(tmp_path):
    by_name = {r.solution["name"]: r for r in _run(tmp_path, "elementwise_add", None)}
    assert by_name["cuda_add"].status is Status.OK, by_name["cuda_add"].message
    assert by_name["cuda_add"].timing["solution"]["timer"] == "cuda_event"
    assert by_name["cuda_add"].env["gpu"]["name"]
    # the C++ (CPU-only) solution refuses CUDA tensors with a clear runtime error, not a crash
    assert by_name["cpp_add"].status is Status.RUNTIME_ERROR and "CPU only" in by_name["cpp_add"].message


# direct and fast_fp32 are fp32 class; fast runs the phase kernel with one TF32 product (tf32 class)
@pytest.mark.parametrize("solution, precision, max_abs", [("direct", "fp32", 1e-5),
                                                          ("fast_fp32", "fp32", 1e-5),
                                                          ("fast", "tf32", 5e-3)])
@pytest.mark.parametrize("problem", ["901", "902"])
def test_kernels_correct_on_extra_variants(tmp_path, problem, solution, precision, max_abs):
    (result,) = _run(tmp_path, f"conv_transpose2d/{problem}", solution)
    assert result.status is Status.OK, result.message
    assert result.correctness["precision"] == precision, result.correctness["message"]
    assert result.correctness["max_abs_error"] < max_abs


# The fp16 wgmma kernels (sm_90a builds), on shapes that reach them (stride 1, groups 1, more than
# 32 output channels) with padded input and output channels, odd widths, dilation, padding and
# bias, and inputs scaled far from 1; against float64 at their class's tolerance, and checked to be
# the kernel that ran. out / scale is compared (no bias there), since the tolerance's atol is
# absolute: at 3e4 an output that cancels to ~1 misses it even in exact fp32 arithmetic.
# - fast_fp32's ct2d_wgh (3xFP16, fp32 class) scales x by a power of two from its largest
#   magnitude; 3x3 on Cin 512 (864 MMAs per accumulator, over its limit) runs 3xTF32 instead.
# - fast's ct2d_wgf (one fp16 product, TF32 class) converts x unscaled (in its producer, or in a
#   pre-pass), and where its largest magnitude is outside [2^-2, 2^15) rescales it and runs again:
#   1e-6 (subnormal in fp16 unscaled) and 1e5 (beyond fp16's range) fail the tolerance unless the
#   rescaled launch's output is the one returned.
WGH_SHAPES = [  # (N, Cin, Cout, kernel, H, W, padding, dilation, bias, wgh expected)
    (2, 20, 40, (3, 3), 13, 37, 1, 2, True, True),
    (2, 9, 128, (3, 5), 13, 101, 0, 1, False, True),
    (1, 64, 96, (3, 5), 30, 64, (1, 2), 1, True, True),
    (3, 33, 70, (2, 4), 11, 50, (0, 1), (2, 1), True, True),
    (1, 512, 64, (3, 3), 8, 16, 0, 1, False, False),
    # odd halos with even output widths (64, 70): plan_wg pads the flat row (see the test below)
    (2, 24, 80, (2, 2), 13, 63, 0, 1, True, True),
    (1, 40, 64, (4, 2), 9, 71, (1, 1), 1, False, True),
]
# ct2d_wgf: True where x is staged by the kernel's producer (WgdFp16Ops: one 64-channel block, room
# for three stages and its raw ring), False where a pre-pass converts it (more than 64 channels)
WGF_SHAPES = [s[:-1] + (s[2] <= 64,) for s in WGH_SHAPES] + [(2, 24, 72, (3, 7), 17, 45, (1, 3), 1, True, False)]


def _fast_kernel_case(shape, scale, cls, kernel, config=0, sm90=True, misaligned=False):
    """One fast-solution call on `shape` (x scaled by `scale`; misaligned: x's data one element past
    a 16-byte boundary) against float64 at the class's tolerance, with `kernel` (a substring of the
    planned kernel's name, or a tuple of substrings of it) expected to run or not (model.plan(x):
    the rule the call follows; test_plan_names_the_kernel_that_runs holds it to the profiler).
    Returns that plan."""
    import sys

    import torch

    from harness import REPO_ROOT
    from harness.verdict.numerics import compare

    if sm90 and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the fp16 wgmma kernels are built for sm_90a only")
    sys.path.insert(0, str(REPO_ROOT / "solutions" / "conv_transpose2d" / "_shared"))
    import ct2d_fast

    n, cin, cout, k, h, w, pad, dil, bias, expected = shape
    bias = bias and scale == 1.0
    torch.manual_seed(0)
    model = getattr(ct2d_fast, cls)(cin, cout, k, padding=pad, dilation=dil, bias=bias).cuda()
    model.config = config
    numel = n * cin * h * w + misaligned
    x = torch.rand(numel, device="cuda") if cls.endswith("FP32") else torch.randn(numel, device="cuda")
    x = (x * scale)[int(misaligned):].view(n, cin, h, w)
    assert (x.data_ptr() % 16 != 0) == misaligned
    with torch.no_grad():
        plan = model.plan(x)
        out = model(x)
        truth = torch.nn.functional.conv_transpose2d(
            x.double(), model.conv_transpose2d.weight.double(),
            None if model.conv_transpose2d.bias is None else model.conv_transpose2d.bias.double(),
            padding=pad, dilation=dil)
    parts = kernel if isinstance(kernel, tuple) else (kernel,)
    assert all(p in plan.kernel for p in parts) == expected, plan
    tolerances = load_config(REPO_ROOT / "configs" / "default.yaml").correctness
    result = compare(out / scale, truth / scale, torch.float32,
                     tolerances.fp32 if cls.endswith("FP32") else tolerances.tf32)
    assert result.ok, result.message
    return plan


# plan(x) against what runs: one shape per row of fast/dispatch.cu's rule (and tuning hooks), in
# each class and in bf16, the planned kernel among those the profiler saw launched, its file the
# one that defines it. (cls, N, Cin, Cout, kernel, H, W, stride, groups, config, dtype, io)
PLAN_CASES = [
    ("FastConvTranspose2d", 2, 24, 64, (3, 3), 9, 300, 1, 1, 0, "float32", "fp32"),      # ct2d_wgf, producer ring
    ("FastConvTranspose2d", 2, 24, 72, (3, 7), 17, 45, 1, 1, 0, "float32", "fp32"),      # ct2d_wgf, pre-pass
    ("FastConvTranspose2dFP32", 2, 20, 40, (3, 3), 13, 37, 1, 1, 0, "float32", "fp32"),  # ct2d_wgh
    ("FastConvTranspose2dFP32", 2, 20, 32, (3, 3), 13, 70, 1, 1, 0, "float32", "fp32"),  # ct2d_mma 3xTF32
    ("FastConvTranspose2d", 2, 20, 32, (3, 3), 13, 70, 1, 1, 0, "float32", "fp32"),      # ct2d_mmh
    ("FastConvTranspose2d", 1, 16, 64, (3, 3), 9, 126, 1, 1, 9, "float32", "fp32"),      # ct2d_mma TF32 (config 9)
    ("FastConvTranspose2d", 1, 16, 64, (3, 3), 9, 126, 1, 1, 5, "float32", "fp32"),      # ct2d_wg (config 5)
    ("FastConvTranspose2d", 1, 16, 64, (3, 3), 9, 126, 1, 1, 6, "float32", "fp32"),      # ct2d_wgs TF32 (config 6)
    ("FastConvTranspose2d", 2, 8, 24, (5, 5), 9, 30, 1, 1, 0, "float32", "fp32"),        # row 5 (5x5: no mma.sync)
    ("FastConvTranspose2d", 2, 16, 32, (3, 3), 9, 20, 2, 2, 0, "float32", "fp32"),       # phase TF32
    ("FastConvTranspose2dFP32", 2, 16, 32, (3, 3), 9, 20, 2, 2, 0, "float32", "fp32"),   # phase 3xTF32
    ("FastConvTranspose2d", 2, 16, 32, (3, 3), 9, 20, 2, 2, 1, "float32", "fp32"),       # phase on CUDA cores
    ("FastConvTranspose2dBF16", 2, 16, 32, (3, 3), 9, 20, 2, 2, 0, "bfloat16", "bf16"),  # phase, bf16 in and out
    ("FastConvTranspose2dBF16", 2, 32, 64, (3, 3), 9, 20, 1, 1, 0, "bfloat16", "bf16"),  # ct2d_wgf (sm_90a) or ct2d_mmh
    ("FastConvTranspose2dBF16", 2, 16, 24, (3, 3), 9, 21, 1, 1, 0, "bfloat16", "bf16 via fp32"),
]


@pytest.mark.parametrize("case", PLAN_CASES, ids=lambda c: f"{c[0][19:] or 'tf32'}_{c[3]}ch_s{c[7]}g{c[8]}_c{c[9]}")
def test_plan_names_the_kernel_that_runs(case):
    import re
    import sys

    import torch
    from torch.profiler import ProfilerActivity, profile

    from harness import REPO_ROOT

    sys.path.insert(0, str(REPO_ROOT / "solutions" / "conv_transpose2d" / "_shared"))
    import ct2d_fast

    cls, n, cin, cout, k, h, w, stride, groups, config, dtype, io = case
    torch.manual_seed(0)
    model = getattr(ct2d_fast, cls)(cin, cout, k, stride=stride, padding=1, groups=groups, bias=True).cuda()
    model.config = config
    dt = getattr(torch, dtype)
    model = model.to(dt)
    x = torch.randn(n, cin, h, w, device="cuda", dtype=dt)
    with torch.no_grad():
        plan = model.plan(x)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            model(x)
            torch.cuda.synchronize()
    ran = {re.sub(r"^void ", "", e.key.replace("(anonymous namespace)::", "")).split("(")[0] for e in prof.key_averages()}
    assert plan.kernel in ran, (plan, sorted(ran))
    assert plan.io == io, plan
    source = (ct2d_fast.FAST_DIR / plan.file).read_text()
    assert re.search(r"\b" + re.escape(plan.kernel.split("<")[0]) + r"\(", source), plan  # defined there
    assert plan.config, plan


@pytest.mark.parametrize("scale", [1.0, 3e4, 1e-6])
@pytest.mark.parametrize("shape", WGH_SHAPES, ids=lambda s: "x".join(map(str, s[:3])) + f"_k{s[3][0]}{s[3][1]}")
def test_fast_fp32_wgmma_kernel_is_fp32_class(shape, scale):
    _fast_kernel_case(shape, scale, "FastConvTranspose2dFP32", "WghFp16Ops")  # ct2d_wgh


@pytest.mark.parametrize("scale", [1.0, 3e3, 1e5, 1e-6])
@pytest.mark.parametrize("shape", WGF_SHAPES, ids=lambda s: "x".join(map(str, s[:3])) + f"_k{s[3][0]}{s[3][1]}")
def test_fast_wgmma_fp16_kernel_is_tf32_class(shape, scale):
    _fast_kernel_case(shape, scale, "FastConvTranspose2d", "WgdFp16Ops")  # ct2d_wgf, x staged by its producer


@pytest.mark.parametrize("k, w, vec", [((2, 2), 63, "16-byte"), ((2, 2), 65, "8-byte"), ((4, 2), 69, "8-byte")])
def test_fast_wgmma_odd_halo_gets_the_shared_memory_epilogue(k, w, vec):
    """An even kernel width (an odd halo: SubpixelConv's 2x2 sub-kernels) with an even output
    width: plan_wg pads the tile's flat row to a multiple of 4 or 2, so the epilogue goes through
    shared memory with vector stores (unpadded, the row is odd and the fragments are stored one
    float at a time); correct against float64 at the TF32 tolerance."""
    import torch

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the wgmma kernels are built for sm_90a only")
    plan = _fast_kernel_case((2, 64, 128, k, 12, w, 0, 1, True, True), 1.0, "FastConvTranspose2d", "ct2d_wgs")
    assert f"via shared memory, {vec} stores" in plan.config, plan


# ct2d_wgf's producer ring filled by TMA (rows of 16-byte multiples, x 16-byte aligned; the
# template argument of WgdFp16Ops), else by cp.async: box starts 1, 2 or 3 columns before the
# tile's first staged column, several tile columns, rows past the image, channels past Cin (a half
# chunk with one channel, and wholly empty ones), 32 chunks; where the TMA boxes leave no room for
# three stages, and where x is misaligned, the cp.async ring runs.
WGF_TMA_SHAPES = [  # (N, Cin, Cout, kernel, H, W, padding, dilation, bias, TMA expected)
    (2, 24, 64, (3, 3), 9, 300, 1, 1, True, True),            # 6 tile columns; channels 24-31 empty
    (3, 33, 48, (2, 4), 11, 52, (0, 1), (2, 1), True, True),  # channel 32 alone in its half
    (1, 512, 64, (3, 3), 8, 16, 0, 1, False, True),           # 32 chunks
    (2, 20, 40, (3, 3), 13, 36, 1, 2, True, False),           # no room for the boxes: cp.async
]


@pytest.mark.parametrize("scale", [1.0, 1e5, 1e-6])
@pytest.mark.parametrize("shape", WGF_TMA_SHAPES, ids=lambda s: "x".join(map(str, s[:3])) + f"_w{s[5]}")
def test_fast_wgmma_fp16_producer_ring_by_tma(shape, scale):
    kernel = "WgdFp16Ops<true>" if shape[-1] else "WgdFp16Ops<false>"
    _fast_kernel_case(shape[:-1] + (True,), scale, "FastConvTranspose2d", kernel)


def test_fast_wgmma_fp16_misaligned_x_fills_the_ring_by_cp_async():
    _fast_kernel_case(WGF_TMA_SHAPES[0][:-1] + (True,), 1.0, "FastConvTranspose2d", "WgdFp16Ops<false>",
                      misaligned=True)


# ct2d_mma (mma.sync; 71 and 78 in the fp32 class, TF32 forced with config 9): its epilogue through
# shared memory with 4-float stores (Wout a multiple of 4, not of 8), 2-float (even) and direct
# fragment stores (odd, or a multiple of 8), with a partial last tile column, bias, dilation; MT = 2
# (32 channels) and MT = 4 (64; on Hopper builds config 9 also keeps the wgmma kernels off).
MMA_SHAPES = [  # (N, Cin, Cout, kernel, H, W, padding, dilation, bias, expected)
    (2, 32, 32, (3, 7), 11, 100, (1, 3), 1, True, True),   # Wout 100: 4-float stores
    (2, 20, 32, (3, 3), 13, 70, 1, 1, True, True),         # Wout 70: 2-float
    (1, 12, 64, (3, 5), 7, 33, 0, (2, 1), False, True),    # Wout 37: direct
    (1, 16, 64, (3, 3), 9, 126, 0, 1, True, True),         # Wout 128: direct, MT = 4
    (1, 8, 64, (3, 7), 5, 92, (0, 3), 1, True, True),      # Wout 92: 4-float, MT = 4
]


@pytest.mark.parametrize("cls", ["FastConvTranspose2d", "FastConvTranspose2dFP32"])
@pytest.mark.parametrize("shape", MMA_SHAPES, ids=lambda s: "x".join(map(str, s[:3])) + f"_w{s[5]}")
def test_fast_mma_kernel_is_correct(shape, cls):
    _fast_kernel_case(shape, 1.0, cls, "ct2d_mma", config=9, sm90=False)


# ct2d_mmh (fast with 32 output channels per block: 71, 78): one fp16 product per mma.sync, x
# converted to fp16 in shared memory. A block whose staged x is outside [2^-2, 2^15) runs its tile
# again from x rescaled: at 1e5 (beyond fp16's range) and 1e-6 (subnormal) the result misses the
# tolerance unless it did. Cin 12 to 48 (one to three chunks of 16, the last partly or wholly zero),
# 16-byte and 4-byte copies, the three epilogues, dilation, three channel blocks (Cout 96; config 4
# keeps the wgmma kernels off on Hopper builds).
MMH_SHAPES = [  # (N, Cin, Cout, kernel, H, W, padding, dilation, bias, expected)
    (2, 32, 32, (3, 7), 11, 100, (1, 3), 1, True, True),      # Wout 100: 4-float stores
    (2, 20, 32, (3, 3), 13, 70, 1, 1, True, True),            # Wout 70: 2-float; channels 24-31 all zero
    (1, 12, 96, (3, 5), 7, 33, 0, (2, 1), False, True),       # one chunk, three channel blocks, direct
    (3, 40, 32, (3, 3), 9, 61, 1, 1, True, True),             # Win 61: 4-byte copies; three chunks
    (1, 48, 32, (3, 7), 6, 130, (1, 3), (1, 2), True, True),  # dilation 2 along W, Wout 137
]


@pytest.mark.parametrize("scale", [1.0, 3e3, 1e5, 1e-6])
@pytest.mark.parametrize("shape", MMH_SHAPES, ids=lambda s: "x".join(map(str, s[:3])) + f"_w{s[5]}")
def test_fast_mma_fp16_kernel_is_tf32_class(shape, scale):
    """ct2d_mmh, its x staged by TMA on sm_90a builds where rows are 16-byte multiples (Win % 4 == 0;
    the template's TMA argument; the last is the output's element type), else by cp.async."""
    import torch

    tma = torch.cuda.get_device_capability() == (9, 0) and shape[5] % 4 == 0
    _fast_kernel_case(shape, scale, "FastConvTranspose2d", ("ct2d_mmh", ", true, float>" if tma else ", false, float>"),
                      config=4, sm90=False)


def test_fast_mma_fp16_misaligned_x_is_staged_by_cp_async():
    """x whose data is not 16-byte aligned (a view one element in) cannot be a TMA tensor: ct2d_mmh
    stages it with 4-byte cp.async copies and stays within the TF32 tolerance (config 4: the
    mma.sync path, which config 0 may leave for a wgmma kernel on sm_90a)."""
    _fast_kernel_case((2, 32, 32, (3, 3), 12, 64, 1, 1, True, True), 1.0, "FastConvTranspose2d",
                      ("ct2d_mmh", ", false, float>"), config=4, sm90=False, misaligned=True)


def test_fast_mma_fp16_blocks_choose_their_scale():
    """ct2d_mmh decides per block: image 1 (x 1e5) runs rescaled while image 0 does not, and an inf
    in image 0 (whose blocks then measure the finite magnitudes first) gives +-inf exactly where
    float64 does, the rest within the TF32 tolerance."""
    import sys

    import torch

    from harness import REPO_ROOT
    from harness.verdict.numerics import compare

    sys.path.insert(0, str(REPO_ROOT / "solutions" / "conv_transpose2d" / "_shared"))
    import ct2d_fast

    torch.manual_seed(0)
    model = ct2d_fast.FastConvTranspose2d(24, 32, (3, 5), padding=(1, 2)).cuda()
    x = torch.randn(2, 24, 20, 70, device="cuda")
    x[1] *= 1e5
    x[0, 3, 4, 10] = float("inf")
    with torch.no_grad():
        out = model(x)
        truth = torch.nn.functional.conv_transpose2d(x.double(), model.conv_transpose2d.weight.double(),
                                                     padding=(1, 2))
    tolerance = load_config(REPO_ROOT / "configs" / "default.yaml").correctness.tf32
    for n, scale in ((0, 1.0), (1, 1e5)):
        result = compare(out[n] / scale, truth[n] / scale, torch.float32, tolerance)
        assert result.ok, f"image {n}: {result.message}"
    assert int(torch.isinf(truth[0]).sum()) == 32 * 3 * 5  # every channel, each tap's output pixel
