"""Runtime CUDA errors on a GPU: named, and attributed to the extension call that launched the
faulting kernel (a rerun with CUDA_LAUNCH_BLOCKING=1 and a sync after every extension call)."""
import pytest

from harness.core.config import load_config, with_overrides
from harness.core.problems import problem_from_path
from harness.core.results import Status
from harness.run.runner import evaluate
from harness.core.solutions import Pair, solution_from_path
from conftest import ADD_PROBLEM, FIXTURES, FIXTURE_SOLUTIONS

pytestmark = pytest.mark.gpu
FAULTS = ("cuda_fault_far", "cuda_fault_low", "cuda_fault_asserting", "cuda_fault_too_many_threads")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"),
                         {"device": "cuda", "results_dir": str(tmp_path_factory.mktemp("r")), "timeouts.run_s": 300})
    problem = problem_from_path(ADD_PROBLEM)
    pairs = [Pair(problem, solution_from_path(FIXTURE_SOLUTIONS / f"{n}.py"))
             for n in ("cuda_cpu_bias", "cuda_misaligned", "cpp_out_by_value") + FAULTS]
    return {r.solution["name"]: r for r in evaluate(pairs, cfg, run_id="gpu-diag", out=lambda line: None)}


def test_cpu_tensor_dereferenced_by_a_kernel(results):
    r = results["cuda_cpu_bias"]
    assert r.status is Status.RUNTIME_ERROR
    assert "CUDA error: illegal memory access" in r.message
    assert "fixture_cpu_bias.add_bias(...) at tests/fixtures/solutions/cuda_cpu_bias.py:29" in r.message
    assert "argument 2 (torch.float32 [0]) is a CPU tensor" in r.message


def test_misaligned_vector_access(results):
    r = results["cuda_misaligned"]
    assert r.status is Status.RUNTIME_ERROR
    assert "CUDA error: misaligned address" in r.message
    assert "raised by the extension call fixture_misaligned.add(...) at tests/fixtures/solutions/cuda_misaligned.py:31" in r.message
    # the diagnosis ran in a spare that had imported torch before it was asked: its launches blocked
    assert "did not block" not in r.message and r.phases["diagnose_s"] < 20, r.message


def test_output_by_value_on_gpu_is_a_shape_mismatch(results):
    r = results["cpp_out_by_value"]
    # the C++ fixture adds CUDA tensors with ATen, so it runs on the GPU as well
    assert r.status is Status.INCORRECT and "the output is empty" in r.message


@pytest.mark.parametrize("name", FAULTS)
def test_a_kernels_fault_is_the_solutions_wherever_it_surfaces(results, name):
    """Out of bounds, a low address, a device-side assert, too many threads per block: none
    checks its launch, so the error surfaces at a later synchronizing call (often the harness's
    own); by cause it is the solution's runtime_error, never a harness_error."""
    r = results[name]
    if name == "cuda_fault_too_many_threads" and r.status is Status.INCORRECT:
        # the launch failed without running: the output was never written (poisoned), and nothing
        # after it asked CUDA for the pending error
        assert "NaN" in r.message or "elements outside" in r.message, r.message
        return
    assert r.status is Status.RUNTIME_ERROR, f"{r.status.value}: {r.message}"
    assert "CUDA error: " in r.message and "harness error" not in r.message, r.message
    assert "CUDA_LAUNCH_BLOCKING=1" in r.message and r.phases.get("diagnose_s", 0) < 60, r.message
