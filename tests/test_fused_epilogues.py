"""The fused family's files on the CPU (their kernels need CUDA: tests/test_gpu_fused.py): the
epilogue names the Python side passes are the library's, in its order, and every fused
solution takes its problem's constructor arguments, so matched seeds build the same parameters."""
import ast
import re

import pytest

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


def test_split_and_subpixel_conv_plumbing_with_the_library_and_the_interleave_kernels_emulated(monkeypatch):
    """SplitConv's and SubpixelConv's Python on the CPU: the library's bound call (its Bound) emulated
    by PyTorch's convolution of the arguments it was made with (the packed weight as the weight,
    stride, padding, output padding, bias, output type), split.cu's
    phase_interleave and subpixel_interleave by their per-element indexing written again in
    PyTorch; the result is the strided convolution with the extra bias and the epilogue, and
    follows an in-place weight update."""
    import importlib.util
    import sys
    import types

    import torch
    import torch.nn.functional as F

    from test_ct2d_bound import fast_library

    class Bound:  # the library's bound call: what the arguments it was made with say
        def __init__(self, wp, *rest):
            (_, _, _, _, _, _, _, _, self.bias, cout, kh, kw, sh, sw, ph, pw, oph, opw, dh, dw, self.groups,
             _, _, _, _, _, self.out_fp16) = rest
            self.w, self.stride, self.padding = wp, (sh, sw), (ph, pw)
            self.output_padding, self.dilation = (oph, opw), (dh, dw)
            assert (cout, kh, kw) == (wp.shape[1], wp.shape[2], wp.shape[3])

        def __call__(self, x):
            as_asked = (lambda y: y.half()) if self.out_fp16 else (lambda y: y)
            op = self.output_padding
            if all(o < max(s, d) for o, s, d in zip(op, self.stride, self.dilation)):
                return as_asked(F.conv_transpose2d(x, self.w, self.bias, self.stride, self.padding, op, self.groups,
                                                   self.dilation))
            # more output padding than PyTorch takes (SubpixelConv's z: stride 1, no padding), which the
            # library computes from its output-size formula: the extra rows and columns read only zeros
            assert self.stride == (1, 1) and self.padding == (0, 0), self.stride
            y = F.pad(F.conv_transpose2d(x, self.w, None, 1, 0, 0, self.groups, self.dilation), (0, op[1], 0, op[0]))
            return as_asked(y if self.bias is None else y + self.bias.reshape(1, -1, 1, 1))
    fast = fast_library(monkeypatch, types.SimpleNamespace(Bound=Bound))  # packing: the weight as it is, as wp

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
    z_types = []

    def subpixel_interleave(z, offsets, sh, sw, c, h, w, bias, kind, a, b, out_bf16):  # split.cu's indexing
        z_types.append((z.dtype, out_bf16))
        n, hz, wz = z.shape[0], z.shape[2], z.shape[3]
        e = torch.arange(n * c * h * w)
        ow, oh, cc, nn_ = e % w, e // w % h, e // (h * w) % c, e // (c * h * w)
        p = (oh % sh) * sw + ow % sw
        och, ocw = torch.tensor(offsets[0::2]), torch.tensor(offsets[1::2])
        t, u = oh // sh + och[p], ow // sw + ocw[p]
        m = (t < hz) & (u < wz)
        v = torch.zeros(e.shape, dtype=torch.float64)
        v[m] = z[nn_[m], (p * c + cc)[m], t[m], u[m]].double()
        if bias is not None:
            v = v + bias[cc]
        assert fast.EPILOGUES[kind] == "tanh"
        y = torch.tanh(v).reshape(n, c, h, w)
        return y.to(torch.bfloat16) if out_bf16 else y   # each result rounded once
    monkeypatch.setitem(sys.modules, "ct2d_split", types.SimpleNamespace(extension=lambda: types.SimpleNamespace(
        phase_interleave=phase_interleave, subpixel_interleave=subpixel_interleave)))
    monkeypatch.syspath_prepend(str(FUSED / "_shared"))
    # loaded under a name of its own, so no later import of ct2d_fused (the GPU tests') finds this one
    spec = importlib.util.spec_from_file_location("ct2d_fused_emulated", FUSED / "_shared" / "ct2d_fused.py")
    ct2d_fused = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ct2d_fused)
    monkeypatch.setattr(ct2d_fused.SplitConv, "applies", lambda self, x: True)
    monkeypatch.setattr(ct2d_fused.SubpixelConv, "applies", lambda self, x: True)

    torch.manual_seed(0)
    for k, s, p, op in [((3, 3), (2, 2), (1, 1), (1, 1)), ((4, 4), (2, 2), (0, 0), (0, 0)),
                        ((5, 3), (3, 2), (2, 0), (1, 1)), ((2, 3), (3, 4), (0, 1), (2, 0))]:
        conv = torch.nn.ConvTranspose2d(3, 5, k, stride=s, padding=p, output_padding=op).double()
        extra = torch.randn(5, 1, 1, dtype=torch.float64)
        x = torch.randn(2, 3, 7, 6, dtype=torch.float64)
        for cls, z_align, z_fp16 in ((ct2d_fused.SplitConv, None, False), (ct2d_fused.SubpixelConv, 2, False),
                                     (ct2d_fused.SubpixelConv, 4, False), (ct2d_fused.SubpixelConv, 4, True)):
            split = cls(conv, "tanh", sign=-1.0, **({"z_fp16": True} if z_fp16 else {}))
            if z_align:
                split.z_align = z_align  # z's width padded by one column (7 to 8 here) or more
            with torch.no_grad():
                for _ in range(2):
                    folded = (conv.bias - extra.reshape(-1)).float().double()  # the bias vector is fp32, as the kernels take it
                    want = torch.tanh(F.conv_transpose2d(x, conv.weight, folded, s, p, op))
                    z_types.clear()
                    got = split(x, extra_bias=extra)
                    # z rounded once to fp16: within its half unit (2^-11 relative) of each z, tanh's slope at most 1
                    tol = 2.0 ** -11 * 20 if z_fp16 else 1e-12
                    torch.testing.assert_close(got, want, rtol=tol, atol=tol), (cls, k, s)
                    assert z_types == ([(torch.float16, False)] if z_fp16 else [(torch.float64, False)]
                                       if cls is ct2d_fused.SubpixelConv else []), z_types
                    if cls is ct2d_fused.SubpixelConv:   # a bf16 run's: y stored in bf16 by the pass
                        z_types.clear()
                        bf = cls(conv, "tanh", sign=-1.0, z_fp16=z_fp16, out_dtype=torch.bfloat16)
                        bf.z_align = z_align
                        got16 = bf(x, extra_bias=extra)
                        assert got16.dtype == torch.bfloat16 and z_types[0][1] is True, z_types
                        torch.testing.assert_close(got16.double(), want, rtol=2.0 ** -8 + tol, atol=tol)
                    conv.weight.mul_(-0.5)
    for epilogue in ("none", "gelu", "add_min_gelu_scale", "mish_add_hardtanh_scale"):  # no saturation: refused
        with pytest.raises(ValueError, match="saturating"):
            ct2d_fused.SubpixelConv(conv, epilogue, z_fp16=True)
    with pytest.raises(ValueError, match="out_dtype"):
        ct2d_fused.SubpixelConv(conv, "tanh", out_dtype=torch.float16)
    # a bf16 x as it is: the sub-convolution on a bf16 weight (the library's bf16 rows), z in bf16
    # (also with z_fp16, which does not apply), z's width a multiple of 8 (16-byte pieces); the same
    # object on x widened goes back to the fp32 path (a widened weight, z as asked)
    conv16 = torch.nn.ConvTranspose2d(3, 5, (4, 4), stride=(2, 2), padding=(1, 1)).to(torch.bfloat16)
    x16 = torch.randn(2, 3, 7, 6).to(torch.bfloat16)
    extra16 = torch.randn(5, 1, 1).to(torch.bfloat16)
    with torch.no_grad():
        folded = (conv16.bias.double() - extra16.double().reshape(-1)).float().double()
        want = torch.tanh(F.conv_transpose2d(x16.double(), conv16.weight.double(), folded, 2, 1))
        for z_fp16 in (False, True):
            sub = ct2d_fused.SubpixelConv(conv16, "tanh", sign=-1.0, z_fp16=z_fp16, out_dtype=torch.bfloat16)
            for xin, z_type in ((x16, torch.bfloat16), (x16.float(), torch.float16 if z_fp16 else torch.float32),
                                (x16, torch.bfloat16)):
                z_types.clear()
                got = sub(xin, extra_bias=extra16)
                assert z_types == [(z_type, True)] and got.dtype == torch.bfloat16, z_types
                assert sub._sub.conv_transpose2d.weight.dtype == (torch.bfloat16 if xin.dtype == torch.bfloat16
                                                                 else torch.float32)
                assert sub._sub.conv_transpose2d.output_padding[1] + 6 + 1 in (8, 16) or z_type == torch.float32
                # z (bf16: 2^-9 relative, tanh's slope at most 1) and y rounded once each
                torch.testing.assert_close(got.double(), want, rtol=2.0 ** -7, atol=2.0 ** -7)


def _sp_emulated(x, w, stride, padding, output_padding):
    """What sphase.cu's ct2d_sp computes, in float64 on the CPU, reading the packed weights through
    the kernel's own index arithmetic (wp offset per phase, 64-channel block, 32-channel chunk, tap,
    k-step, m-tile, lane, element; the A fragment's (row, column) of each element) and x at the
    rows and columns its staging and B fragments read (i + ch - a, j + cw - b; zero outside)."""
    import torch

    from ct2d_phases import output_size, phases
    from ct2d_sphase import CHUNK, CO_BLOCK, pack_weights

    n, cin, hin, win = x.shape
    cout, (kh, kw), (sh, sw) = w.shape[1], w.shape[2:], stride
    plist = phases((kh, kw), stride, padding)
    packed, offsets = pack_weights(w, plist, stride)
    packed = packed.double()
    cin8, cob = -(-cin // 8) * 8, -(-cout // CO_BLOCK)
    hout = output_size(hin, kh, sh, padding[0], output_padding[0])
    wout = output_size(win, kw, sw, padding[1], output_padding[1])
    y = torch.zeros(n, cout, hout, wout, dtype=torch.float64)
    lane = torch.arange(32)
    g, t = lane // 4, lane % 4
    for p, woff in zip(plist, offsets):
        taps = p.taps_h * p.taps_w
        rows, cols = len(range(p.rh, hout, sh)), len(range(p.rw, wout, sw))
        if rows == 0 or cols == 0:
            continue
        a_mat = torch.zeros(max(taps, 1), cob * CO_BLOCK, cin8, dtype=torch.float64)  # [tap][co][ci]
        for cb in range(cob):
            for kc in range(-(-cin8 // CHUNK)):
                kcs = min(CHUNK, cin8 - kc * CHUNK)
                base = woff + taps * CO_BLOCK * (cb * cin8 + kc * CHUNK)
                for tt in range(taps):
                    for ks in range(kcs // 8):
                        for m in range(4):
                            for e in range(4):
                                idx = base + (((tt * (kcs // 8) + ks) * 4 + m) * 32 + lane) * 4 + e
                                co = cb * CO_BLOCK + m * 16 + g + 8 * (e & 1)
                                ci = kc * CHUNK + ks * 8 + t + 4 * (e >> 1)
                                a_mat[tt, co, ci] = packed[idx]
        acc = torch.zeros(n, cob * CO_BLOCK, rows, cols, dtype=torch.float64)
        for a in range(p.taps_h):
            for b in range(p.taps_w):
                xs = torch.zeros(n, cin8, rows, cols, dtype=torch.float64)
                r0, c0 = p.ch - a, p.cw - b
                ri = torch.arange(rows) + r0
                cj = torch.arange(cols) + c0
                rok, cok = (ri >= 0) & (ri < hin), (cj >= 0) & (cj < win)
                sub = x.double()[:, :, ri.clamp(0, hin - 1)][:, :, :, cj.clamp(0, win - 1)]
                xs[:, :cin] = sub * (rok[:, None] & cok[None, :])
                acc += torch.einsum("oc,ncij->noij", a_mat[a * p.taps_w + b], xs)
        y[:, :, p.rh::sh, p.rw::sw] = acc[:, :cout]
    return y


def test_strided_conv_packing_and_indexing_emulated_match_pytorch():
    """StridedConv's weights as pack_weights lays them out and ct2d_sp indexes them (and x), emulated
    in float64 on the CPU: the strided convolution of PyTorch (weights rounded to TF32, as packed) on
    geometries with 1, 2 and 4 taps per phase, phases without taps, partial 32-channel chunks,
    channels not a multiple of 8 or 64, uneven strides. A weight packed for the wrong tap or
    channel fails it."""
    import sys

    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(FUSED / "_shared"))
    from ct2d_sphase import round_tf32

    torch.manual_seed(0)
    cases = [(64, 64, (3, 3), (2, 2), (1, 1), (1, 1)), (64, 128, (4, 4), (2, 2), (0, 0), (0, 0)),
             (24, 128, (4, 4), (2, 2), (1, 1), (1, 1)), (16, 48, (5, 3), (3, 2), (2, 0), (1, 1)),
             (16, 64, (2, 3), (3, 4), (0, 1), (2, 0)), (7, 7, (3, 3), (2, 2), (1, 1), (1, 1)),
             (72, 80, (3, 2), (2, 2), (0, 1), (1, 0))]
    for cin, cout, k, s, p, op in cases:
        x = torch.randn(2, cin, 5, 7)
        w = torch.randn(cin, cout, *k)
        got = _sp_emulated(x, w, s, p, op)
        want = F.conv_transpose2d(x.double(), round_tf32(w).double(), None, s, p, op)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10, msg=f"{cin, cout, k, s, p, op}")


def test_strided_conv_x_staging_covers_what_its_fragments_read():
    """ct2d_sp's x staging, both ways (sphase.cu: XV 1, 4-byte copies from the tile's first column;
    XV 4, 16-byte copies from the multiple of 4 at or before it, read xs0 further on), with the
    host's row length RW: for every phase of the fused family's strided geometries and others,
    every column a B fragment reads (j + cw - b of x) is one the staging copied into that row
    position, inside RW, and 16-byte copies start 16-byte aligned in shared memory and in x."""
    import sys

    sys.path.insert(0, str(FUSED / "_shared"))
    from ct2d_phases import phases

    bj = 64  # sphase.cu kBJ
    for kernel, stride, padding in [((3, 3), (2, 2), (1, 1)), ((4, 4), (2, 2), (1, 1)), ((4, 4), (2, 2), (0, 0)),
                                    ((5, 3), (3, 2), (2, 0)), ((2, 3), (3, 4), (0, 1)), ((3, 2), (2, 2), (0, 1))]:
        plist = phases(kernel, stride, padding)
        tw_max = max(max(p.taps_w for p in plist), 1)
        for xv in (1, 4):
            rw = (bj + tw_max - 1 + 3 + 3) // 4 * 4 if xv == 4 else bj + tw_max - 1
            for p in plist:
                for j0 in (0, 64, 128):
                    xc0 = j0 + p.cw - (p.taps_w - 1)
                    xs0 = xc0 - (xc0 & ~3) if xv == 4 else 0
                    rwc = bj + p.taps_w - 1
                    copied = 4 * -(-(xs0 + rwc) // 4) if xv == 4 else rwc  # staged row positions written
                    assert copied <= rw, (kernel, stride, xv, p)
                    if xv == 4:
                        assert (xc0 - xs0) % 4 == 0 and rw % 4 == 0
                    for b in range(p.taps_w):
                        for wc in (0, 32):
                            for col in range(32):  # q * 8 + g
                                pos = wc + (p.taps_w - 1 - b) + col + xs0
                                j = j0 + wc + col
                                assert pos < copied, (kernel, stride, xv, p, b, col)
                                assert (xc0 - xs0) + pos == j + p.cw - b, (kernel, stride, xv, p, b, col)
