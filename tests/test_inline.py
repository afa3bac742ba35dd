"""load_inline knowledge without compiling: misuse checks, generated-file layout, mapping a
compiler error back to the solution file, hints."""
import textwrap

from harness.compile.inline import Layout, check_call, describe_build_error, hint_for, origin

CUDA = """
__global__ void k(float* x) { x[0] = 1; }
torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b) {
    return a + b;
}
"""


def test_missing_cpp_sources_is_misuse():
    [misuse] = check_call(None, CUDA, ["add_cuda"])
    assert "without cpp_sources" in misuse.message


def test_function_defined_only_in_cuda_suggests_the_declaration():
    [misuse] = check_call("", CUDA, ["add_cuda"])
    assert "defined only in cuda_sources" in misuse.message and "cpp_sources is empty" in misuse.message
    assert "torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b);" in misuse.message


def test_function_absent_from_every_source():
    [misuse] = check_call("torch::Tensor f(torch::Tensor x);", CUDA, {"nope": "doc"})
    assert "'nope', which no source defines or declares" in misuse.message


def test_declared_functions_and_local_includes_pass():
    assert check_call("torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b);", CUDA, ["add_cuda"]) == []
    assert check_call('#include "decls.h"', CUDA, ["add_cuda"]) == []  # the compiler decides
    # a mention inside a comment is not a declaration
    assert check_call("// add_cuda is in the .cu", CUDA, ["add_cuda"])


def test_layout_accounts_for_implicit_headers():
    layout = Layout.of(["int a;\nint b;", "int c;"], "x\ny")
    seg, line = layout.locate("main.cpp", 3)  # line 1: #include <torch/extension.h>
    assert (seg.kind, seg.index, line) == ("cpp_sources", 0, 2)
    seg, line = layout.locate("/build/dir/main.cpp", 4)
    assert (seg.index, line) == (1, 1)
    assert layout.locate("main.cpp", 5) is None  # the generated bindings
    seg, line = layout.locate("cuda.cu", 5)  # three implicit #include lines
    assert (seg.kind, line) == ("cuda_sources", 2)


def test_origin_in_python_literal_and_in_cu_file(tmp_path):
    src = "\nint f() {\n    return 1\n}\n"
    py = tmp_path / "sol.py"
    py.write_text(f'import x\n\nSRC = """{src}"""\n')
    assert origin(src, 3, [py]) == (py, 5)
    cu = tmp_path / "k.cu"
    cu.write_text("// header\n" + src)
    assert origin(src, 3, [tmp_path / "caller.py", cu]) == (cu, 4)


def _gcc_log(build: str) -> str:
    return textwrap.dedent(f"""\
        [1/2] c++ -MMD -MF main.o.d ... -c {build}/main.cpp -o main.o
        FAILED: main.o
        {build}/main.cpp: In function 'at::Tensor add(at::Tensor, at::Tensor)':
        {build}/main.cpp:5:5: error: expected ',' or ';' before 'return'
            5 |     return out;
        ninja: build stopped: subcommand failed.
        """)


def test_gcc_error_maps_to_the_solution_line(tmp_path):
    src = "\ntorch::Tensor add(torch::Tensor a, torch::Tensor b) {\n    auto out = a + b\n    return out;\n}\n"
    py = tmp_path / "sol.py"
    py.write_text(f'from torch.utils.cpp_extension import load_inline\n\ncpp_source = """{src}"""\n')
    site = describe_build_error(_gcc_log("/cache/ext-123"), Layout.of([src], None), [py])
    assert site.mapped == f"{py}:6" and site.generated == "main.cpp:5"
    assert site.source == "cpp_sources[0] line 4"
    msg = site.message("ext")
    assert msg.startswith(f"{py}:6: error: expected ',' or ';' before 'return'")
    assert "compiled as main.cpp:5" in msg


def test_nvcc_error_inside_a_template_maps_through_the_instantiation(tmp_path):
    src = "template <typename T> __global__ void k(T* x) { x.foo(); }\nvoid f(float* p) { k<<<1, 1>>>(p); }\n"
    cu = tmp_path / "kernels.cu"
    cu.write_text(src)
    log = textwrap.dedent("""\
        /torch/include/ATen/something.h(10): error: expression must have class type but it has type "float *"
                  detected during instantiation of "void k(T *) [with T=float]" at line 5 of /cache/ext/cuda.cu
        1 error detected in the compilation of "/cache/ext/cuda.cu".
        """)
    site = describe_build_error(log, Layout.of("", [src]), [tmp_path / "sol.py", cu])
    assert site.generated == "cuda.cu:5" and site.mapped == f"{cu}:2"
    assert site.text.startswith("error: expression must have class type")


def test_hints_for_well_known_mistakes():
    assert "scalar_type()" in hint_for("error: cannot convert 'const at::DeprecatedTypeProperties' to 'c10::ScalarType'")
    hint = hint_for("error: 'class at::GenericPackedTensorAccessor<float, 1, at::DefaultPtrTraits, int>' has no member named 'numel'")
    assert "no numel()" in hint and "size(i)" in hint
    assert "at::RestrictPtrTraits" in hint_for("error: 'RestrictPtrTraits' is not a member of 'torch'")
    assert hint_for("error: expected ';'") is None


def test_linker_error_is_found():
    site = describe_build_error("ImportError: /cache/x.so: undefined symbol: _Z3fooN2at6TensorE\n", None, [])
    assert "undefined symbol" in site.text and "declared but not defined" in site.hint
