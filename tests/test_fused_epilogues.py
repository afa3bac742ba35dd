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


def test_a_strided_transposed_convolution_is_its_phases_stride_1_convolutions_interleaved():
    """ct2d_phases: on random geometries (stride 1-4, kernels 1-5, padding, output padding, more
    taps than stride and fewer), the stride-1 unpadded convolutions of x with each phase's
    sub-kernel, interleaved as phase_interleave does, with the bias and an epilogue, are the
    strided convolution, in float64 to rounding."""
    import random
    import sys

    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(FUSED / "_shared"))
    from ct2d_phases import interleave_reference, output_size, phases

    rng = random.Random(1)
    torch.manual_seed(1)
    for _ in range(120):
        k = (rng.randint(1, 5), rng.randint(1, 5))
        s = (rng.randint(1, 4), rng.randint(1, 4))
        p = (rng.randint(0, k[0] - 1), rng.randint(0, k[1] - 1))
        op = (rng.randint(0, s[0] - 1), rng.randint(0, s[1] - 1))
        h, w = rng.randint(1, 9), rng.randint(1, 9)
        hout, wout = output_size(h, k[0], s[0], p[0], op[0]), output_size(w, k[1], s[1], p[1], op[1])
        if hout <= 0 or wout <= 0:
            continue
        x = torch.randn(2, 3, h, w, dtype=torch.float64)
        weight = torch.randn(3, 4, *k, dtype=torch.float64)
        bias = torch.randn(4, dtype=torch.float64)
        want = torch.tanh(F.conv_transpose2d(x, weight, bias, s, p, op))
        plist = phases(k, s, p)
        subs = [F.conv_transpose2d(x, weight[:, :, q.kh0::s[0], q.kw0::s[1]]) if q.taps_h and q.taps_w else None
                for q in plist]
        got = interleave_reference(subs, plist, s, (2, 4, hout, wout), x, bias, torch.tanh)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12), (k, s, p, op, h, w)
