"""Whose code raised: the solution's, the problem's or the harness's (harness/core/blame.py), and a
harness fault injected into a real worker comes out as harness_error, never as the solution's."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from harness import REPO_ROOT
from harness.core import problems
from harness.core.blame import blame, for_solution
from harness.core.config import parse_override
from harness.core.errors import BadInput
from harness.run.worker import classify
from conftest import FIXTURES, FIXTURE_SOLUTIONS


def raised(fn, *args, **kwargs) -> BaseException:
    with pytest.raises(BaseException) as info:
        fn(*args, **kwargs)
    return info.value


def test_an_exception_raised_in_harness_code_is_the_harness_s():
    exc = raised(parse_override, "no equals sign")
    assert isinstance(exc, BadInput)
    found = blame(exc)
    assert found.owner == "harness" and found.where.startswith("harness/core/config.py:") and "(parse_override)" in found.where


def test_library_frames_are_passed_over_to_the_caller():
    # torch raises inside its own code; the harness frame that called it is to blame ...
    exc = raised(problems.construct, torch.nn.Linear, ["three", 4], 0, "cpu")
    assert blame(exc).owner == "harness" and blame(exc).where.startswith("harness/core/problems.py:")
    # ... unless the harness called on the solution's behalf
    exc = raised(problems.construct, torch.nn.Linear, ["three", 4], 0, "cpu", call=for_solution)
    assert blame(exc).owner == "solution"


def test_solution_frames_and_its_syntax_errors_are_the_solution_s(tmp_path):
    exc = raised(for_solution, problems.load_module, FIXTURE_SOLUTIONS / "import_raises.py", prefix="kb_solution")
    found = blame(exc)
    assert found.owner == "solution" and found.where.endswith("import_raises.py:6 (<module>)")
    bad = tmp_path / "broken.py"
    bad.write_text("class ModelNew(:\n    pass\n")
    exc = raised(for_solution, problems.load_module, bad, prefix="kb_solution")
    assert isinstance(exc, SyntaxError) and blame(exc).owner == "solution"


def test_the_problem_file_is_not_the_solution_s(tmp_path):
    path = tmp_path / "bad_problem.py"
    path.write_text("def get_inputs():\n    raise ValueError('bad reference')\n")
    module = problems.load_module(path)
    exc = raised(problems.make_inputs, module, 0, "cpu")
    assert blame(exc, path).owner == "problem" and blame(exc, path).where.endswith("bad_problem.py:2 (get_inputs)")


def test_classify_reports_a_harness_fault_as_harness_error():
    exc = raised(parse_override, "no equals sign")
    failure = classify(exc, "correctness", FIXTURE_SOLUTIONS / "cpp_ok.py", "cpu")
    assert failure.status.value == "harness_error"
    assert "not the solution's fault" in failure.message and "harness/core/config.py:" in failure.message
    exc = raised(for_solution, problems.load_module, FIXTURE_SOLUTIONS / "import_raises.py", prefix="kb_solution")
    assert classify(exc, "load", FIXTURE_SOLUTIONS / "import_raises.py", "cpu").status.value == "load_error"


# A fault injected into a harness function of the worker process: sitecustomize replaces
# harness.verdict.guards.aliased_input (which the worker calls on every output), before the worker
# imports it, by a function compiled as if it were written in harness/verdict/guards.py (so its frame is
# a harness frame), which raises as numpy's absence once made the input digest raise there.
INJECT = textwrap.dedent(f"""
    import harness.verdict.guards
    namespace = {{}}
    exec(compile("def aliased_input(out, inputs):\\n    raise RuntimeError('Numpy is not available (injected fault)')\\n",
                 {str(REPO_ROOT / 'harness' / 'verdict' / 'guards.py')!r}, "exec"), namespace)
    harness.verdict.guards.aliased_input = namespace["aliased_input"]
""")


def test_a_fault_injected_into_a_worker_s_harness_function_is_a_harness_error(tmp_path):
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(INJECT)
    env = {**os.environ, "PYTHONPATH": str(inject)}
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "run_eval.py"), "--problem", "elementwise_add",
                           "--solution", str(FIXTURE_SOLUTIONS / "cpp_ok.py"), "--config",
                           str(FIXTURES / "configs" / "fast.yaml"), "--results-dir", str(tmp_path / "results"),
                           "--run-id", "fault"], capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=900)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "results" / "fault" / "elementwise_add__cpp_ok.json").read_text())
    assert result["status"] == "harness_error", result["message"]
    assert "not the solution's fault" in result["message"]
    assert "harness/verdict/guards.py:2 (aliased_input)" in result["message"] and "injected fault" in result["message"]
    assert "cpp_ok.py" not in result["message"]


def _raised_in_harness_code(exc: BaseException) -> BaseException:
    """`exc` raised from a frame compiled as harness/run/worker.py (the worker's own sync)."""
    namespace = {"exc": exc}
    exec(compile("def sync():\n    raise exc\n", str(REPO_ROOT / "harness" / "run" / "worker.py"), "exec"), namespace)
    return raised(namespace["sync"])


@pytest.mark.parametrize("exc", [
    torch.AcceleratorError("CUDA error: operation not supported on global/shared address space\n"
                           "CUDA kernel errors might be asynchronously reported at some other API call"),
    RuntimeError("CUDA error: an illegal memory access was encountered"),
    RuntimeError("CUDA error: device-side assert triggered"),
    torch.AcceleratorError("CUDA error: unrecognized error code"),
])
def test_a_cuda_error_is_the_solution_s_wherever_it_surfaces_once_its_code_ran(exc):
    """A kernel's fault surfaces at the next call that synchronizes, often the harness's own: by
    cause, not by frame, it is the solution's runtime_error; before the solution's code ran in the
    process, the same error is not its fault."""
    exc = _raised_in_harness_code(exc)
    assert blame(exc).owner == "harness"  # the frame alone would blame the harness
    failure = classify(exc, "timing", FIXTURE_SOLUTIONS / "cpp_ok.py", "cuda", solution_ran=True)
    assert failure.status.value == "runtime_error" and "CUDA error: " in failure.message, failure.message
    assert failure.fields["cuda_error"] and "harness" not in failure.fields["cuda_error"]
    assert classify(exc, "setup", FIXTURE_SOLUTIONS / "cpp_ok.py", "cuda", solution_ran=False).status.value \
        == "harness_error"


def test_an_unknown_cuda_error_is_named_by_its_own_words():
    exc = _raised_in_harness_code(torch.AcceleratorError(
        "CUDA error: operation not supported on global/shared address space\nmore"))
    failure = classify(exc, "correctness", FIXTURE_SOLUTIONS / "cpp_ok.py", "cuda")
    assert "CUDA error: operation not supported on global/shared address space (" in failure.message
    assert failure.fields["cuda_error"] == "operation not supported on global/shared address space"
