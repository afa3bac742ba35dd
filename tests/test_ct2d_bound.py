"""The fast library's bound call on the CPU (ct2d_fast.py: binding_source, FastConvTranspose2d._bound;
its kernels need CUDA: tests/test_gpu.py). The binding compiled with stub entry points that echo
their arguments: `Bound` passes every argument in order, plan included, and a second build binds a
`Bound` of its own in the same process. With the extension emulated: which changes make the Bound
again (the weight, the bias and a fused call's extra bias, the hyper-parameters a fused
sub-convolution sets per call, config, epilogue, the build) and which do not."""
import copy
import importlib.util
import pickle
import sys
import types
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from harness import REPO_ROOT

SHARED = REPO_ROOT / "solutions" / "conv_transpose2d" / "_shared"
FUSED_SHARED = REPO_ROOT / "solutions" / "conv_transpose2d_fused" / "_shared"


def fast_library(monkeypatch, ext=None, pack=None):
    """ct2d_fast.py's Python with the CUDA build left out: `_ext` is `ext`, `pack` the given packing
    (default: the weight as it is now, as `phase`, and nothing else), installed as sys.modules'
    ct2d_fast for the fused family's import."""
    src = (SHARED / "ct2d_fast.py").read_text()
    cut = src[src.index("WGMMA = _hopper_target()"):src.index("# fast/epilogue.cuh's kinds")]
    fast = types.ModuleType("ct2d_fast")
    fast.__file__ = str(SHARED / "ct2d_fast.py")
    monkeypatch.syspath_prepend(str(SHARED))
    exec(compile(src.replace(cut, "WGMMA = False\n_ext = None\n\n\n"), fast.__file__, "exec"), fast.__dict__)
    fast._ext = ext
    fast.pack = pack or (lambda w, groups, stride, split, wgmma: types.SimpleNamespace(
        phase=w.detach().clone(), phase_frag=None, mma=None, mmh=None, mmh_exp=0, wgmma=None, wh=None, wh_exp=0,
        wb=None))
    monkeypatch.setitem(sys.modules, "ct2d_fast", fast)
    return fast


def fused_library(monkeypatch):
    """ct2d_fused.py on the fast_library installed, under a name of its own (no later import of
    ct2d_fused finds it)."""
    monkeypatch.syspath_prepend(str(FUSED_SHARED))
    spec = importlib.util.spec_from_file_location("ct2d_fused_bound_test", FUSED_SHARED / "ct2d_fused.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Recording:
    """An extension whose Bound records what it was made with; calling it returns x."""

    def __init__(self):
        self.made = []
        ext = self

        class Bound:
            def __init__(self, *static):
                self.static = static
                ext.made.append(static)

            def __call__(self, x):
                return x

            def plan(self, x):
                return ["k", "f", "c", "io"]
        self.Bound = Bound


# ------------------------------------------------------------------ the binding, compiled

def _stub_source(args: str) -> str:
    """Entry points over `args` that return every argument as a number, in order (a tensor: its sum,
    -1 where undefined or None), and plan: the same numbers as strings."""
    fast = sys.modules["ct2d_fast"]   # the caller's fast_library
    pushes = []
    for t, n in fast.arg_list(args):
        if t == "torch::Tensor":
            pushes.append(f"v.push_back({n}.defined() ? {n}.sum().item<double>() : -1.0);")
        elif t.startswith("c10::optional"):
            pushes.append(f"v.push_back({n}.has_value() && {n}->defined() ? {n}->sum().item<double>() : -1.0);")
        else:
            pushes.append(f"v.push_back(double({n}));")
    body = "std::vector<double> v;\n  " + "\n  ".join(pushes)
    return (f"torch::Tensor conv_transpose2d_fast({args}) {{\n  {body}\n  return torch::tensor(v, torch::kDouble);\n}}\n"
            f"std::vector<std::string> conv_transpose2d_plan({args}) {{\n  {body}\n  std::vector<std::string> s;\n"
            "  for (double d : v) s.push_back(std::to_string(d));\n  return s;\n}\n")


def test_the_binding_passes_every_argument_in_order_and_two_builds_live_in_one_process(monkeypatch, tmp_path):
    from torch.utils.cpp_extension import load_inline
    fast = fast_library(monkeypatch)
    params = fast.arg_list()
    assert params[0] == ("torch::Tensor", "x") and len(params) == fast._ARGS.count(",") + 1
    short_args = ", ".join(f"{t} {n}" for t, n in params[:5])   # a revision with fewer arguments, no plan
    stub = _stub_source(short_args)
    builds = {"full": _stub_source(fast._ARGS) + fast.binding_source(),
              "short": stub[:stub.index("std::vector<std::string>")] + fast.binding_source(short_args, plan=False)}

    def build(name):   # both at once (each compiler is one process; about 20 s each on 2 cores)
        (tmp_path / name).mkdir()
        return load_inline(name=f"ct2d_bound_{name}", cpp_sources=builds[name], build_directory=str(tmp_path / name))
    with ThreadPoolExecutor(2) as pool:
        full, short = pool.map(build, ("full", "short"))
    values = []
    for i, (t, _) in enumerate(params):
        if t == "torch::Tensor" or t.startswith("c10::optional"):
            values.append(torch.full((2,), float(i + 1)) if i % 4 != 2 else torch.Tensor())
        else:
            values.append(1.5 * i if t == "double" else 3 * i + 1)
    values[params.index(("c10::optional<torch::Tensor>", "bias"))] = None
    want = [-1.0 if v is None else v.sum().item() if isinstance(v, torch.Tensor) else float(v) for v in values]
    x = values[0]
    bound = full.Bound(*values[1:])
    assert full.conv_transpose2d_fast(*values).tolist() == want
    assert bound(x).tolist() == want                               # every argument but x, bound in order
    assert bound.plan(x) == full.conv_transpose2d_plan(*values)
    assert bound(torch.full((2,), 7.0)).tolist() == [14.0] + want[1:]   # x is the call's
    short_bound = short.Bound(*values[1:5])
    assert short_bound(x).tolist() == want[:5] and not hasattr(short_bound, "plan")
    assert type(short_bound) is not type(bound) and bound(x).tolist() == want   # both builds' Bound, one process


# ------------------------------------------------------------------ when the Bound is made again

def _layer(fast, cls_name="FastConvTranspose2d", bias=True):
    torch.manual_seed(0)
    return getattr(fast, cls_name)(3, 4, 3, stride=2, padding=1, output_padding=1, bias=bias)


def test_the_bound_call_is_made_once_and_again_when_what_it_was_made_from_changes(monkeypatch):
    ext = Recording()
    fast = fast_library(monkeypatch, ext)
    m = _layer(fast)
    x = torch.randn(1, 3, 5, 5)
    for _ in range(3):
        assert m(x) is x
    assert len(ext.made) == 1
    first = ext.made[0]
    c = m.conv_transpose2d
    assert torch.equal(first[0], c.weight) and torch.equal(first[9], c.bias)
    assert first[10:] == (4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0.0, 0.0, 0)

    def made_again(change):
        before = len(ext.made)
        change()
        m(x)
        m(x)
        return len(ext.made) - before

    with torch.no_grad():
        assert made_again(lambda: c.weight.mul_(2)) == 1            # in place: its version
        assert torch.equal(ext.made[-1][0], c.weight)               # repacked
        assert made_again(lambda: c.bias.add_(1)) == 1
        assert torch.equal(ext.made[-1][9], c.bias)
    assert made_again(lambda: setattr(c, "weight", torch.nn.Parameter(torch.randn(3, 4, 3, 3)))) == 1
    assert torch.equal(ext.made[-1][0], c.weight)
    with torch.no_grad():
        old_ptr = c.weight.data_ptr()
        c.weight.data = torch.randn(3, 4, 3, 3)          # .data replaced: the bound storage stays held
        assert m.__dict__["_bound_held"][0].data_ptr() == old_ptr != c.weight.data_ptr()
        assert made_again(lambda: None) == 1 and m.__dict__["_bound_held"][0].data_ptr() == c.weight.data_ptr()
    assert made_again(lambda: setattr(c, "bias", None)) == 1 and ext.made[-1][9] is None
    assert made_again(lambda: setattr(m, "config", 5)) == 1 and ext.made[-1][23] == 5
    assert made_again(lambda: setattr(m, "epilogue", "tanh")) == 1 and ext.made[-1][24] == 2
    assert made_again(lambda: setattr(m, "epilogue_args", (0.5, 2.0))) == 1 and ext.made[-1][25:27] == (0.5, 2.0)
    assert made_again(lambda: setattr(c, "output_padding", (0, 1))) == 1 and ext.made[-1][17:19] == (0, 1)
    other = Recording()
    assert made_again(lambda: setattr(fast, "_ext", other)) == 0 and len(other.made) == 1   # another build
    assert made_again(lambda: None) == 0 and len(other.made) == 1
    assert m.plan(x) == fast.Plan("k", "f", "c", "io")
    # copies leave the Bound out and make their own
    for dup in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert dup.__dict__["_bound_obj"] is None
        dup(x)
        assert len(other.made) == 2
        other.made.pop()


def test_the_bf16_layer_binds_its_bias_widened_and_follows_its_version(monkeypatch):
    ext = Recording()
    fast = fast_library(monkeypatch, ext)
    m = _layer(fast, "FastConvTranspose2dBF16").to(torch.bfloat16)
    x = torch.randn(1, 3, 5, 5, dtype=torch.bfloat16)
    m(x)
    m(x)
    bias = m.conv_transpose2d.bias
    assert len(ext.made) == 1 and ext.made[0][9].dtype == torch.float32 and torch.equal(ext.made[0][9], bias.float())
    with torch.no_grad():
        bias.add_(1)
    m(x)
    assert len(ext.made) == 2 and torch.equal(ext.made[1][9], bias.float())
    with pytest.raises(TypeError, match="bf16 runs"):
        m(x.float())


def test_a_fused_call_rebinds_on_its_extra_bias_and_on_a_namespace_convs_padding(monkeypatch):
    from types import SimpleNamespace
    ext = Recording()
    fast_library(monkeypatch, ext)
    fused = fused_library(monkeypatch)
    torch.manual_seed(0)
    conv = torch.nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1)
    fc = fused.FastConv(conv, "tanh", sign=-1.0)
    x, extra = torch.randn(1, 3, 5, 5), torch.randn(4, 1, 1)
    fc(x, extra)
    fc(x, extra)
    assert len(ext.made) == 1 and torch.allclose(ext.made[0][9], conv.bias - extra.reshape(-1))
    with torch.no_grad():
        extra.mul_(3)                                              # in place: rebound, the sum made again
    fc(x, extra)
    assert len(ext.made) == 2 and torch.allclose(ext.made[1][9], conv.bias - extra.reshape(-1))
    fc(x, torch.randn(4, 1, 1))                                    # another tensor
    fc(x)                                                          # none: the layer's own bias
    assert len(ext.made) == 4 and torch.equal(ext.made[3][9], conv.bias)
    # a sub-convolution as SubpixelConv and SplitConv make it: a namespace, its padding set per call
    sub = SimpleNamespace(weight=torch.randn(3, 8, 2, 2), bias=None, kernel_size=(2, 2), stride=(1, 1),
                          padding=(0, 0), output_padding=(0, 0), dilation=(1, 1), groups=1, out_channels=8)
    sc = fused.FastConv(sub)
    sc(x)
    sub.output_padding = (0, 0)                                    # the same values: not made again
    sc(x)
    assert len(ext.made) == 5 and ext.made[4][17:19] == (0, 0) and ext.made[4][9] is None
    sub.output_padding = (0, 3)
    sc(x)
    assert len(ext.made) == 6 and ext.made[5][17:19] == (0, 3)
    sub.weight.copy_(torch.randn(3, 8, 2, 2))                      # refreshed in place, as the fused family does
    sc(x)
    assert len(ext.made) == 7 and torch.equal(ext.made[6][0], sub.weight)
    sc.out_fp16 = True
    sc(x)
    assert len(ext.made) == 8 and ext.made[7][-1] == 1
    assert copy.deepcopy(fc).__dict__["_bound_obj"] is None
