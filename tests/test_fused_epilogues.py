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


def test_split_conv_plumbing_with_the_library_and_the_interleave_kernel_emulated(monkeypatch):
    """SplitConv's Python on the CPU: the library's call emulated by PyTorch's convolution of the
    arguments it is given (weight, stride, padding, bias), split.cu's phase_interleave by its
    per-element indexing written again in PyTorch; the result is the strided convolution with the
    extra bias and the epilogue, and follows an in-place weight update."""
    import importlib.util
    import sys
    import types

    import torch
    import torch.nn.functional as F

    shared = REPO_ROOT / "solutions" / "conv_transpose2d" / "_shared"
    src = (shared / "ct2d_fast.py").read_text()
    cut = src[src.index("WGMMA = _hopper_target()"):src.index("# fast/epilogue.cuh's kinds")]
    fast = types.ModuleType("ct2d_fast")
    fast.__file__ = str(shared / "ct2d_fast.py")
    monkeypatch.syspath_prepend(str(shared))
    exec(compile(src.replace(cut, "WGMMA = False\n\n\n"), str(shared / "ct2d_fast.py"), "exec"), fast.__dict__)

    def forward(self, x):  # the library's call: what its arguments say
        c = self.conv_transpose2d
        return F.conv_transpose2d(x, c.weight, self._bias(), c.stride, c.padding, c.output_padding, c.groups,
                                  c.dilation)
    fast.FastConvTranspose2d.forward = forward

    def phase_interleave(subs, offsets, sh, sw, n, c, h, w, bias, kind, a, b):  # split.cu's indexing
        e = torch.arange(n * c * h * w)
        ow, oh, nc = e % w, e // w % h, e // (h * w)
        p = (oh % sh) * sw + ow % sw
        v = torch.zeros(e.shape, dtype=torch.float64)
        for q, sub in enumerate(subs):
            if sub.numel() == 0:
                continue
            t, u = oh // sh + offsets[2 * q], ow // sw + offsets[2 * q + 1]
            m = (p == q) & (t < sub.shape[2]) & (u < sub.shape[3])
            v[m] = sub.reshape(-1, sub.shape[2], sub.shape[3])[nc[m], t[m], u[m]]
        if bias is not None:
            v = v + bias[nc % c]
        assert fast.EPILOGUES[kind] == "tanh"
        return torch.tanh(v).reshape(n, c, h, w)
    monkeypatch.setitem(sys.modules, "ct2d_fast", fast)
    monkeypatch.setitem(sys.modules, "ct2d_split", types.SimpleNamespace(split=types.SimpleNamespace(
        phase_interleave=phase_interleave)))
    monkeypatch.syspath_prepend(str(FUSED / "_shared"))
    # loaded under a name of its own, so no later import of ct2d_fused (the GPU tests') finds this one
    spec = importlib.util.spec_from_file_location("ct2d_fused_emulated", FUSED / "_shared" / "ct2d_fused.py")
    ct2d_fused = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ct2d_fused)
    monkeypatch.setattr(ct2d_fused.SplitConv, "applies", lambda self, x: True)

    torch.manual_seed(0)
    for k, s, p, op in [((3, 3), (2, 2), (1, 1), (1, 1)), ((4, 4), (2, 2), (0, 0), (0, 0)),
                        ((5, 3), (3, 2), (2, 0), (1, 1)), ((2, 3), (3, 4), (0, 1), (2, 0))]:
        conv = torch.nn.ConvTranspose2d(3, 5, k, stride=s, padding=p, output_padding=op).double()
        extra = torch.randn(5, 1, 1, dtype=torch.float64)
        split = ct2d_fused.SplitConv(conv, "tanh", sign=-1.0)
        x = torch.randn(2, 3, 7, 6, dtype=torch.float64)
        with torch.no_grad():
            for _ in range(2):
                folded = (conv.bias - extra.reshape(-1)).float().double()  # the bias vector is fp32, as the kernels take it
                want = torch.tanh(F.conv_transpose2d(x, conv.weight, folded, s, p, op))
                torch.testing.assert_close(split(x, extra_bias=extra), want, rtol=1e-12, atol=1e-12)
                conv.weight.mul_(-0.5)
