"""GPU end to end (skipped without CUDA): the CUDA example, and the direct and fast ConvTranspose2d kernels on the extra variants."""
import pytest

from harness import problems, solutions
from harness.config import load_config, with_overrides
from harness.results import Status
from harness.runner import evaluate
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
