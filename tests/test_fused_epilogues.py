"""The fused family's files on the CPU (their kernels need CUDA: tests/test_gpu_fused.py): the
epilogue names the Python side passes are the library's, in its order, and every fused
solution takes its problem's constructor arguments, so matched seeds build the same parameters."""
import ast
import re

from harness import REPO_ROOT

FAST = REPO_ROOT / "solutions" / "conv_transpose2d" / "_shared"
FUSED = REPO_ROOT / "solutions" / "conv_transpose2d_fused"
PROBLEMS = REPO_ROOT / "problems" / "conv_transpose2d_fused"


def _assigned(path, name):
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{name} not assigned in {path}")


def test_the_epilogue_names_are_the_librarys_in_its_order():
    names = _assigned(FAST / "ct2d_fast.py", "EPILOGUES")
    source = (FAST / "fast" / "epilogue.cuh").read_text()
    listed = re.search(r"names\[kEpiCount\] = \{(.*?)\};", source, re.S).group(1)
    assert tuple(re.findall(r'"(\w+)"', listed)) == names
    kinds = dict((k, int(v)) for k, v in re.findall(r"(kEpi\w+) = (\d+)", source))
    assert kinds["kEpiNone"] == 0 and kinds["kEpiCount"] == len(names)
    assert sorted(v for k, v in kinds.items() if k != "kEpiCount") == list(range(len(names)))


def _init_args(path, cls):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            init = next(f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
            return [a.arg for a in init.args.args[1:]], [ast.unparse(d) for d in init.args.defaults]
    raise AssertionError(f"no {cls} in {path}")


def test_every_fused_problem_has_a_fast_solution_with_its_constructor():
    problems = sorted(PROBLEMS.glob("*.py"))
    assert len(problems) == 11
    for problem in problems:
        solution = FUSED / problem.stem / "fast.py"
        assert solution.is_file(), solution
        assert _init_args(solution, "ModelNew") == _init_args(problem, "Model"), problem.stem
        assert _assigned(solution, "PRECISIONS") == ("fp32",) and _assigned(solution, "DEVICES") == ("cuda",)
