"""Compile-only on a machine with nvcc and no GPU (CI): the same build-error messages as a real
build, CUDA sources compiled against a CPU-only torch, and every repository solution compiles."""
import pytest

from harness.compile.compile_only import find_nvcc
from harness.core.config import load_config, with_overrides
from harness.core.problems import problem_from_path
from harness.compile.compile_only import compile_solutions
from harness.run.runner import evaluate
from harness.core.solutions import Pair, solution_files, solution_from_path
from conftest import ADD_PROBLEM, FIXTURES, FIXTURE_SOLUTIONS

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
FAST = FIXTURES / "configs" / "fast.yaml"


LINES: list[str] = []


@pytest.fixture(scope="module")
def compiled():
    files = [FIXTURE_SOLUTIONS / "cpp_syntax_error.py", FIXTURE_SOLUTIONS / "cpp_type_dispatch.py"]
    if find_nvcc():
        files += [FIXTURE_SOLUTIONS / "cuda_type_dispatch.py"] + solution_files([])
    results = compile_solutions(files, load_config(FAST), out=LINES.append)
    return {r["path"]: r for r in results}


def test_each_recipe_compiled_records_its_cpu_seconds(compiled):
    """What a recipe cost the CPU (its compile step's children: ninja and the compilers), beside its
    wall time: builds are what limits generated kernels per hour (docs/harness-perf.md)."""
    recipes = [r for item in compiled.values() for r in item["recipes"]]
    fresh = [r for r in recipes if not r["cached"]]   # with a warm build cache (not CI's), none is
    assert recipes and all(r["cpu_s"] > 0.5 and r["seconds"] > 0 for r in fresh), fresh
    assert not fresh or any(f"{len(fresh)} recipe(s) compiled" in line and "CPU-s in all" in line for line in LINES)


def test_cpp_compile_error_has_the_same_message_as_a_real_build(compiled, tmp_path):
    key = "tests/fixtures/solutions/cpp_syntax_error.py"
    assert compiled[key]["status"] == "build_error"
    cfg = with_overrides(load_config(FAST), {"results_dir": str(tmp_path)})
    [real] = evaluate([Pair(problem_from_path(ADD_PROBLEM), solution_from_path(FIXTURE_SOLUTIONS / "cpp_syntax_error.py"))],
                      cfg, run_id="real", out=lambda line: None)
    assert real.message == compiled[key]["message"]
    assert compiled[key]["message"].startswith(f"{key}:8: error: expected")
    assert "main.cpp" in compiled[key]["detail"]


def test_cpp_type_dispatch_hint(compiled):
    r = compiled["tests/fixtures/solutions/cpp_type_dispatch.py"]
    assert r["status"] == "build_error" and "Hint: Tensor::type() is deprecated" in r["message"]


@needs_nvcc
def test_cuda_compile_error_maps_to_the_solution_line(compiled):
    r = compiled["tests/fixtures/solutions/cuda_type_dispatch.py"]
    assert r["status"] == "build_error"
    assert r["message"].startswith("tests/fixtures/solutions/cuda_type_dispatch.py:15: error:")
    assert "DeprecatedTypeProperties" in r["message"] and "compiled as cuda.cu:14" in r["message"]
    assert "x.scalar_type()" in r["message"]


@needs_nvcc
def test_every_repository_solution_compiles(compiled):
    mine = {k: v for k, v in compiled.items() if k.startswith("solutions/")}
    assert len(mine) >= 11
    bad = {k: v["message"] for k, v in mine.items() if v["status"] != "ok"}
    assert not bad, bad


@needs_nvcc
def test_a_cu_compiles_with_torch_extension_h_read_as_torch_types_h_unless_it_fails_so(compiled):
    """build.cu_header (auto: lean in compile-only): the repository's CUDA recipes (each .cu includes
    torch/extension.h) compile with the lean header or, where it is not enough, the small one; a .cu
    that fails with both is compiled again with torch's own, whose error is the one reported
    (test_cuda_compile_error_maps_to_the_solution_line)."""
    fresh = [r for v in compiled.values() if v["path"].startswith("solutions/") for r in v["recipes"] if not r["cached"]]
    assert all(r["cu_header"].startswith("read") or r["cu_header"] == "no cuda sources" for r in fresh), fresh
    assert not fresh or sum(r["cu_header"].startswith("read") for r in fresh) >= 8   # the library, direct, 4 fused, 2 more
    failed = compiled["tests/fixtures/solutions/cuda_type_dispatch.py"]
    assert failed["recipes"][0]["cu_header"].startswith("compiled again with torch's header: ")
    assert "DeprecatedTypeProperties" in failed["message"]


def test_a_torch_whose_package_version_has_no_local_label_still_compiles(compiled, monkeypatch):
    """On the GPU host `pip` says torch 2.11.0 and torch.__version__ 2.11.0+cu130: compile-only named
    each recipe's folder by the first and the compile step by the second, so every recipe on that
    host ended "without its library". The package's metadata no longer names anything: the recipe
    the fixture compiled (with nvcc; else it is compiled here) is found where its step put it."""
    import importlib.metadata

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: "0.0.0-not-this-torch" if name == "torch" else real(name))
    [r] = compile_solutions(solution_files(["solutions/examples/elementwise_add/cpp_add.py"]), load_config(FAST),
                            out=lambda line: None)
    assert r["status"] == "ok", r["message"]


@needs_nvcc
def test_fast_kernels_compile_for_a_gpu_without_wgmma():
    """The fast kernels outside sm_90a (the wgmma kernels left out, CT2D_WGMMA undefined): what the
    other kernels use must not live only inside the wgmma part (fast_bf16 takes every bf16 path)."""
    path = solution_files(["solutions/conv_transpose2d/902_conv_transpose2d_odd_unaligned/fast_bf16.py"])
    [r] = compile_solutions(path, load_config(FAST), arch="8.0", out=lambda line: None)
    assert r["status"] == "ok", r["message"]
