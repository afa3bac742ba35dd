"""Issue 4 failure modes on the CPU: each fixture gets its expected status and an actionable
message (file:line in the solution, the compiler's error, a hint, the shape, the pattern)."""
import pytest

from harness.core.config import load_config, with_overrides
from harness.core.problems import problem_from_path
from harness.core.results import Status
from harness.run.runner import evaluate
from harness.core.solutions import Pair, solution_from_path
from conftest import ADD_PROBLEM, FIXTURES, FIXTURE_SOLUTIONS

CT2D_PROBLEM = FIXTURES / "problems" / "ct2d_small.py"
ADD_FIXTURES = ["inline_no_cpp_sources", "inline_cuda_only_function", "cpp_type_dispatch",
                "cpp_accessor_misuse", "cpp_out_by_value"]
CT2D_FIXTURES = ["ct2d_cpp_ok", "ct2d_cpp_no_divisibility", "ct2d_cpp_double_flip"]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"),
                         {"results_dir": str(tmp_path_factory.mktemp("results"))})
    add, ct2d = problem_from_path(ADD_PROBLEM), problem_from_path(CT2D_PROBLEM)
    pairs = [Pair(add, solution_from_path(FIXTURE_SOLUTIONS / f"{n}.py")) for n in ADD_FIXTURES]
    pairs += [Pair(ct2d, solution_from_path(FIXTURE_SOLUTIONS / f"{n}.py")) for n in CT2D_FIXTURES]
    return {r.solution["name"]: r for r in evaluate(pairs, cfg, run_id="diag", out=lambda line: None)}


def _at(name: str, line: int) -> str:
    return f"tests/fixtures/solutions/{name}.py:{line}"


def test_load_inline_without_cpp_sources(results):
    r = results["inline_no_cpp_sources"]
    assert r.status is Status.BUILD_ERROR
    assert r.message.startswith(_at("inline_no_cpp_sources", 17) + ": load_inline misuse: ")
    assert "without cpp_sources, which it requires" in r.message


def test_function_only_in_cuda_sources(results):
    r = results["inline_cuda_only_function"]
    assert r.status is Status.BUILD_ERROR  # found before compiling: no CUDA needed to say so
    assert r.message.startswith(_at("inline_cuda_only_function", 19))
    assert "'add_cuda', which is defined only in cuda_sources" in r.message
    assert "torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b);" in r.message


def test_deprecated_type_in_dispatch(results):
    r = results["cpp_type_dispatch"]
    assert r.status is Status.BUILD_ERROR
    assert r.message.startswith(_at("cpp_type_dispatch", 9) + ": error: ")
    assert "DeprecatedTypeProperties" in r.message and "compiled as main.cpp:5" in r.message
    assert "Hint: Tensor::type() is deprecated" in r.message and "x.scalar_type()" in r.message
    assert "error:" in r.detail and "main.cpp" in r.detail  # the full compiler log is kept


def test_packed_accessor_misuse(results):
    r = results["cpp_accessor_misuse"]
    assert r.status is Status.BUILD_ERROR
    assert r.message.startswith(_at("cpp_accessor_misuse", 11) + ": error: ")
    assert "has no member named" in r.message and "numel" in r.message
    assert "GenericPackedTensorAccessor<...>" in r.message  # template noise collapsed
    assert "Hint: a PackedTensorAccessor has only size(i), stride(i)" in r.message


def test_output_reassigned_by_value_in_cpp(results):
    r = results["cpp_out_by_value"]
    assert r.status is Status.INCORRECT
    assert "shape mismatch: got (0,), expected (4, 262144)" in r.message
    assert "the output is empty" in r.message and "passed by value" in r.message


def test_correct_ct2d_fixture_passes(results):
    r = results["ct2d_cpp_ok"]
    assert r.status is Status.OK and r.correctness["precision"] == "fp32", r.message


def test_ignoring_stride_divisibility_is_structural(results):
    r = results["ct2d_cpp_no_divisibility"]
    assert r.status is Status.INCORRECT
    assert "pattern: structural" in r.message and "wrong almost everywhere" in r.message
    assert "worst at index [" in r.message and "elements outside" in r.message


def test_double_flipped_kernel_is_named(results):
    r = results["ct2d_cpp_double_flip"]
    assert r.status is Status.INCORRECT
    assert "matches the reference with the convolution kernel flipped spatially" in r.message
    assert "pattern: structural" in r.message and "output phase" in r.message
