"""The compile step (harness/compile/compiler.py compile_recipe) with build.cu_header: a recipe's cuda.cu
compiled first with torch/extension.h read as torch/types.h ("small"; "lean": a leaner header before
that), and again with torch's own header where that fails, whose log and error are then the build's;
with build.main_header lean, main.cpp's torch/extension.h likewise. The compiler is replaced here by one that
records its flags and fails where told (the real compiles: tests/test_compile_only.py)."""
import os
from pathlib import Path

import pytest

from harness.compile import compiler
from harness.compile.build import BuildError

CUDA_RECIPE = {"params": {"name": "kb_twice", "cpp_sources": "torch::Tensor f(torch::Tensor x);",
                          "cuda_sources": "#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x) { return x; }",
                          "functions": ["f"]}, "callers": []}


@pytest.fixture(autouse=True)
def _torch_jit_compile_put_back():
    """compile_recipe replaces torch's cpp_extension._jit_compile, as its own process should; here it
    is put back after each test, so that a later test in this process that builds for real (e.g.
    tests/test_ct2d_bound.py) gets torch's and not the fake's."""
    from torch.utils import cpp_extension
    saved = cpp_extension._jit_compile
    yield
    cpp_extension._jit_compile = saved


def _fake_compiler(monkeypatch, fails, seen=None, error=b'cuda.cu(2): error: namespace "torch" has no member "nn"\n',
                   cxx=False):
    """A compiler for _build_only that records each attempt's CUDA flags (with `cxx`: its C++ include
    flags and its CUDA flags) and fails where `fails` of the first of them is true, writing `error`;
    in `seen`, the sources load_inline wrote."""
    attempts = []

    def build_only(cpp_ext):
        def jit_compile(name, sources, extra_cflags, extra_cuda_cflags, *args, **kwargs):
            flags = list(extra_cuda_cflags or [])
            if cxx:
                flags = [f for f in extra_cflags or [] if f.startswith("-I")]
                attempts.append((flags, list(extra_cuda_cflags or [])))
            else:
                attempts.append(flags)
            if seen is not None:
                seen.append({Path(p).name: Path(p).read_text() for p in sources})
            if fails(flags):
                os.write(1, error)   # as the compiler writes
                raise RuntimeError(f"Error building extension '{name}'")
            os.write(1, b"built\n")
            return compiler.Built(name)
        return jit_compile

    monkeypatch.setattr(compiler, "_build_only", build_only)
    return attempts


def _compile(tmp_path, recipe, cu_header):
    events = []
    compiler.compile_recipe(recipe, tmp_path, False, "9.0", lambda kind, **kw: events.append((kind, kw)),
                            cu_header=cu_header)
    return [kw for kind, kw in events if kind == "build_end"][0]


def test_a_cu_that_compiles_with_the_small_header_is_built_once_with_it(tmp_path, monkeypatch):
    attempts = _fake_compiler(monkeypatch, fails=lambda flags: False)
    end = _compile(tmp_path, CUDA_RECIPE, cu_header="small")
    assert attempts == [[f"-I{compiler.CU_HEADER}"]]
    assert end["ok"] and end["cu_header"] == "read"
    assert (compiler.CU_HEADER / "torch" / "extension.h").read_text().count("#include <torch/types.h>") == 1


def test_a_cu_that_needs_torchs_whole_header_is_compiled_again_with_it_and_builds(tmp_path, monkeypatch):
    attempts = _fake_compiler(monkeypatch, fails=lambda flags: f"-I{compiler.CU_HEADER}" in flags)
    end = _compile(tmp_path, CUDA_RECIPE, cu_header="small")
    assert attempts == [[f"-I{compiler.CU_HEADER}"], []]
    assert end["ok"] and end["cu_header"].startswith("compiled again with torch's header: ")
    assert "has no member" in end["cu_header"] and "error" not in end["log"]   # the log is the build that counts


def test_a_cu_that_fails_either_way_fails_with_torchs_header_and_its_error(tmp_path, monkeypatch):
    attempts = _fake_compiler(monkeypatch, fails=lambda flags: True)
    with pytest.raises(BuildError) as raised:
        _compile(tmp_path, CUDA_RECIPE, cu_header="small")
    assert attempts == [[f"-I{compiler.CU_HEADER}"], []]
    assert "has no member" in raised.value.log


def test_a_build_whose_main_cpp_failed_is_not_compiled_again(tmp_path, monkeypatch):
    """main.cpp does not read the small header: where ninja failed only main.o, torch's header would
    fail the same way (the H200 corpus run compiled such recipes twice)."""
    main_only = b"FAILED: [code=1] main.o \nmain.cpp:3:10: fatal error: x.h: No such file or directory\n"
    attempts = _fake_compiler(monkeypatch, fails=lambda flags: True, error=main_only)
    events = []
    with pytest.raises(BuildError) as raised:
        compiler.compile_recipe(CUDA_RECIPE, tmp_path, False, "9.0", lambda kind, **kw: events.append((kind, kw)),
                                cu_header="small")
    assert attempts == [[f"-I{compiler.CU_HEADER}"]] and "x.h" in raised.value.log
    [end] = [kw for kind, kw in events if kind == "build_end"]
    assert not end["ok"] and end["cu_header"] == "read; main.cpp failed, which does not read it"
    both = main_only + b"FAILED: [code=2] cuda.cuda.o \ncuda.cu(2): error: no member\n"   # the .cu failed too: again
    attempts = _fake_compiler(monkeypatch, fails=lambda flags: True, error=both)
    with pytest.raises(BuildError):
        _compile(tmp_path / "both", CUDA_RECIPE, cu_header="small")
    assert attempts == [[f"-I{compiler.CU_HEADER}"], []]


def test_off_or_without_cuda_sources_it_is_built_as_before(tmp_path, monkeypatch):
    attempts = _fake_compiler(monkeypatch, fails=lambda flags: False)
    end = _compile(tmp_path / "off", CUDA_RECIPE, cu_header="off")
    assert attempts == [[]] and "cu_header" not in end
    cpp_only = {"params": {k: v for k, v in CUDA_RECIPE["params"].items() if k != "cuda_sources"}, "callers": []}
    cpp_only["params"]["cpp_sources"] = "torch::Tensor f(torch::Tensor x) { return x; }"
    end = _compile(tmp_path / "cpp", cpp_only, cu_header="small")
    assert attempts[1:] == [[]] and end["cu_header"] == "no cuda sources"


def test_the_second_attempt_compiles_the_same_sources_as_the_first(tmp_path, monkeypatch):
    """load_inline adds its headers (and main.cpp's binding) to the lists it is given: each attempt
    gets its own copy of the recipe, so the build that counts compiles what a single build would
    (its error lines where they are; one binding, not two)."""
    seen = []
    _fake_compiler(monkeypatch, fails=lambda flags: f"-I{compiler.CU_HEADER}" in flags, seen=seen)
    recipe = {"params": {**CUDA_RECIPE["params"], "cpp_sources": [CUDA_RECIPE["params"]["cpp_sources"]],
                         "cuda_sources": [CUDA_RECIPE["params"]["cuda_sources"]]}, "callers": []}
    _compile(tmp_path, recipe, cu_header="small")
    assert len(seen) == 2 and seen[0] == seen[1]
    assert seen[1]["main.cpp"].count("PYBIND11_MODULE") == 1 and seen[1]["cuda.cu"].count("torch/types.h") == 1
    assert recipe["params"]["cuda_sources"] == [CUDA_RECIPE["params"]["cuda_sources"]]   # the recipe as it was


LEAN, SMALL = f"-I{compiler.CU_HEADER_LEAN}", f"-I{compiler.CU_HEADER}"


def test_the_lean_level_tries_the_lean_header_then_the_small_one_then_torchs(tmp_path, monkeypatch):
    attempts = _fake_compiler(monkeypatch, fails=lambda flags: False)
    end = _compile(tmp_path / "lean", CUDA_RECIPE, cu_header="lean")
    assert attempts == [[LEAN]] and end["ok"] and end["cu_header"] == "read lean"
    attempts = _fake_compiler(monkeypatch, fails=lambda flags: LEAN in flags)
    end = _compile(tmp_path / "small", CUDA_RECIPE, cu_header="lean")
    assert attempts == [[LEAN], [SMALL]] and end["ok"]
    assert end["cu_header"].startswith("read (the lean header failed: ") and "has no member" in end["cu_header"]
    attempts = _fake_compiler(monkeypatch, fails=lambda flags: bool(flags))
    end = _compile(tmp_path / "torch", CUDA_RECIPE, cu_header="lean")
    assert attempts == [[LEAN], [SMALL], []] and end["ok"]
    assert end["cu_header"].startswith("compiled again with torch's header: ")
    attempts = _fake_compiler(monkeypatch, fails=lambda flags: True)
    with pytest.raises(BuildError):
        _compile(tmp_path / "none", CUDA_RECIPE, cu_header="lean")
    assert attempts == [[LEAN], [SMALL], []]


def test_the_lean_headers_are_torchs_types_h_and_extension_h_and_auto_is_lean():
    types_h = (compiler.CU_HEADER_LEAN / "torch" / "types.h").read_text()
    assert "variable_factories.h" in types_h and "AT_PER_OPERATOR_HEADERS" in types_h
    assert "ATen/ATen.h" not in types_h and "ATen/Functions.h" not in types_h   # not every operator's header
    assert (compiler.CU_HEADER_LEAN / "torch" / "extension.h").read_text().count("#include <torch/types.h>") == 1
    from harness.core.config import cu_header_level
    assert [cu_header_level(s) for s in ("auto", "on", "lean", "off")] == ["lean", "small", "lean", "off"]


MAIN_ONLY = b"FAILED: [code=1] main.o \nmain.cpp:3:20: error: 'nn' is not a member of 'torch'\n"


def _compile_main(tmp_path, recipe, main_header, pch=None, cu_header="lean"):
    events = []
    compiler.compile_recipe(recipe, tmp_path, False, "9.0", lambda kind, **kw: events.append((kind, kw)),
                            pch=pch, cu_header=cu_header, main_header=main_header)
    return [kw for kind, kw in events if kind == "build_end"][0]


def test_the_lean_main_header_is_read_first_and_torchs_where_main_cpp_needs_more(tmp_path, monkeypatch):
    """build.main_header lean: main.cpp's torch/extension.h is MAIN_HEADER_LEAN's (or the precompiled
    folder of it); where only main.o fails, main.cpp is compiled again with torch's, the .cu's
    header unchanged; full (the default) and a recipe not eligible read torch's."""
    lean = f"-I{compiler.MAIN_HEADER_LEAN}"
    attempts = _fake_compiler(monkeypatch, fails=lambda cxx: False, error=MAIN_ONLY, cxx=True)
    end = _compile_main(tmp_path / "lean", CUDA_RECIPE, "lean")
    assert attempts == [([lean], [LEAN])] and end["ok"] and end["main_header"] == "lean"
    attempts = _fake_compiler(monkeypatch, fails=lambda cxx: lean in cxx, error=MAIN_ONLY, cxx=True)
    end = _compile_main(tmp_path / "again", CUDA_RECIPE, "lean")
    assert attempts == [([lean], [LEAN]), ([], [LEAN])] and end["ok"]
    assert end["main_header"].startswith("compiled again with torch's header: ") and "'nn'" in end["main_header"]
    attempts = _fake_compiler(monkeypatch, fails=lambda cxx: False, error=MAIN_ONLY, cxx=True)
    end = _compile_main(tmp_path / "pch", CUDA_RECIPE, "lean", pch="/cache/pch/abc")
    assert attempts == [(["-I/cache/pch/abc"], [LEAN])] and end["main_header"] == "lean"
    end = _compile_main(tmp_path / "full", CUDA_RECIPE, "full")
    assert attempts[1:] == [([], [LEAN])] and "main_header" not in end
    own = {"params": {**CUDA_RECIPE["params"], "no_implicit_headers": True}, "callers": []}
    end = _compile_main(tmp_path / "own", own, "lean")
    assert attempts[2:] == [([], [LEAN])] and end["main_header"] == "not eligible"
    attempts = _fake_compiler(monkeypatch, fails=lambda cxx: True, error=MAIN_ONLY, cxx=True)   # fails with torch's too: its error
    with pytest.raises(BuildError):
        _compile_main(tmp_path / "none", CUDA_RECIPE, "lean")
    assert attempts == [([lean], [LEAN]), ([], [LEAN])]
