"""run_eval.py lint: static checks, exit codes, and the repository's own solutions lint clean."""
import os
import subprocess
import sys
import textwrap

from harness import REPO_ROOT
from harness.compile.lint import lint_file
from harness.core.problems import problem_from_path
from conftest import ADD_PROBLEM, FIXTURE_SOLUTIONS

ADD = problem_from_path(ADD_PROBLEM)


def _lint(tmp_path, source: str, problem=ADD):
    path = tmp_path / "sol.py"
    path.write_text(textwrap.dedent(source))
    return [(f.severity, f.check, f.line, f.message) for f in lint_file(path, problem)]


def test_clean_solution_has_no_findings(tmp_path):
    assert _lint(tmp_path, """
        import torch.nn as nn
        from torch.utils.cpp_extension import load_inline
        CPP = "torch::Tensor add(torch::Tensor a, torch::Tensor b);"
        CUDA = "torch::Tensor add(torch::Tensor a, torch::Tensor b) { return a + b; }"
        ext = load_inline(name="x", cpp_sources=CPP, cuda_sources=CUDA, functions=["add"])
        class ModelNew(nn.Module):
            def forward(self, a, b):
                return ext.add(a, b)
        """) == []


def test_syntax_error_and_missing_modelnew(tmp_path):
    [(sev, check, line, msg)] = _lint(tmp_path, "def f(:\n    pass\n")
    assert (sev, check, line) == ("error", "syntax", 1)
    [(sev, check, _, msg)] = _lint(tmp_path, "import torch\n")
    assert (sev, check) == ("error", "modelnew")


def test_constructor_must_accept_get_init_inputs(tmp_path):
    ct2d = problem_from_path(REPO_ROOT / "problems" / "conv_transpose2d" / "57_conv_transposed_2D__square_input__square_kernel.py")
    found = _lint(tmp_path, """
        import torch.nn as nn
        class ModelNew(nn.Module):
            def __init__(self, in_channels, out_channels):
                super().__init__()
        """, ct2d)
    [(sev, check, line, msg)] = found
    assert (sev, check, line) == ("error", "constructor", 4)
    assert "takes 2 positional arguments; get_init_inputs() gives 3" in msg
    found = _lint(tmp_path, "import torch.nn as nn\nclass ModelNew(nn.Module):\n    pass\n", ct2d)
    assert found[0][1] == "constructor" and "defines no __init__" in found[0][3]


def test_load_inline_misuse(tmp_path):
    found = _lint(tmp_path, """
        from torch.utils.cpp_extension import load_inline
        CUDA = "torch::Tensor add(torch::Tensor a) { return a; }"
        a = load_inline(name="a", cuda_sources=CUDA, functions=["add"])
        b = load_inline(name="b", cpp_sources="", cuda_sources=CUDA, functions=["add"])
        c = load_inline(name="c", cpp_sources="int x;", cuda_source=CUDA)
        class ModelNew:
            pass
        """)
    by_line = {line: msg for sev, check, line, msg in found if check == "load-inline" and sev == "error"}
    assert "without cpp_sources" in by_line[4]
    assert "defined only in cuda_sources" in by_line[5]
    assert "has no parameter 'cuda_source'" in by_line[6]


def test_warnings_for_torch_convolution_and_patching(tmp_path):
    found = _lint(tmp_path, """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        torch.backends.cudnn.allow_tf32 = True
        setattr(F, "conv2d", None)
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.ConvTranspose2d(1, 1, 3)
            def forward(self, a, b):
                y = F.conv_transpose2d(a, self.conv.weight)
                return self.conv(y)
        """)
    checks = {(check, line) for sev, check, line, _ in found if sev == "warning"}
    assert ("patches-torch", 5) in checks and ("patches-torch", 6) in checks
    assert ("torch-conv", 12) in checks and ("torch-conv", 13) in checks


def test_cli_exit_codes_and_repository_solutions_are_clean():
    env = dict(os.environ)
    run = lambda *a: subprocess.run([sys.executable, str(REPO_ROOT / "run_eval.py"), "lint", *a],  # noqa: E731
                                    capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=120)
    proc = run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 error(s)" in proc.stdout
    proc = run(str(FIXTURE_SOLUTIONS / "inline_no_cpp_sources.py"), str(FIXTURE_SOLUTIONS / "cheat_monkeypatch.py"),
               "--problem", "elementwise_add")
    assert proc.returncode == 1
    assert "inline_no_cpp_sources.py:17: error:" in proc.stdout and "[patches-torch]" in proc.stdout
    proc = run("no/such/file.py")
    assert proc.returncode == 2 and "no/such/file.py" in proc.stderr
