"""Where ct2d_sp's time goes (sphase.cu, ct2d_fused.StridedConv), without hardware counters: the
kernel built with one stage or more left out (sphase.cu's SP_ABLATE bits: 1 x's staging, 2 the
MMAs, 4 the output's global stores, 8 the weights' staging), each timed on a fused problem's
benchmark input by CUDA events (median of --calls calls, L2 flushed before each, in --rounds
alternating rounds), with the differences from the whole kernel. Needs a GPU; each variant is a
build of its own (about a minute).

    PYTHONPATH=. python tools/ablate_sp.py [--problem 2] [--variants 0 1 2 4 8 6 9] [--calls 20] [--rounds 3]
        [--staging 4 16] [--kernels sp spp]

--staging: x's copies (sp_conv's staging: 4-byte, or 16-byte where x's width allows); --kernels:
ct2d_sp (a block per item) and/or ct2d_spp (persistent blocks, a two-stage ring); each variant is
timed with each combination.

The variants are built first, in parallel processes (--build-only V builds one); the fast library
is not needed (no import of ct2d_fused).

A measurement aid for issue 48 (docs/perf-notes.md, "The fused family"); what a solution costs is
the harness's number.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "solutions" / "conv_transpose2d_fused" / "_shared"))

STAGES = {1: "x staging", 2: "MMAs", 4: "global stores", 8: "weight staging"}


def left_out(bits: int) -> str:
    return ", ".join(name for bit, name in STAGES.items() if bits & bit) or "nothing (the kernel)"


from flushed_timing import FlushedTimer  # noqa: E402


def main(argv=None) -> int:
    import torch

    from ct2d_phases import output_size, phases
    from ct2d_sphase import extension, pack_weights, phase_table
    from harness.core import problems
    from harness.core.problems import load_module, make_inputs

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problem", default="2")
    p.add_argument("--variants", nargs="*", type=int, default=[0, 1, 2, 4, 8, 6, 9])
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--staging", nargs="*", type=int, default=[4], choices=[4, 16])
    p.add_argument("--kernels", nargs="*", default=["sp"], choices=["sp", "spp"])
    p.add_argument("--build-only", type=int, default=None, metavar="V")
    args = p.parse_args(argv)
    if args.build_only is not None:
        extension(args.build_only)
        return 0
    builds = [subprocess.Popen([sys.executable, __file__, "--build-only", str(v)]) for v in args.variants]
    if any(b.wait() for b in builds):
        print("a variant did not build")
        return 1

    problem = next(q for q in problems.select("conv_transpose2d_fused") if q.id.split("_")[0] == args.problem)
    mod = load_module(problem.path)
    torch.manual_seed(0)
    ref = mod.Model(*mod.get_init_inputs()).cuda()
    conv = next(m for m in ref.modules() if isinstance(m, torch.nn.ConvTranspose2d))
    [x] = make_inputs(mod, 1, "cuda")
    (kh, kw), (sh, sw), (ph, pw), (oph, opw) = conv.kernel_size, conv.stride, conv.padding, conv.output_padding
    hout, wout = output_size(x.shape[2], kh, sh, ph, oph), output_size(x.shape[3], kw, sw, pw, opw)
    plist = phases(conv.kernel_size, conv.stride, conv.padding)
    packed, offsets = pack_weights(conv.weight.detach(), plist, conv.stride)
    table = phase_table(plist, offsets, hout, wout, conv.stride)
    call_args = (x.contiguous(), packed, conv.bias.detach() if conv.bias is not None else None, table,
                 conv.out_channels, hout, wout, sh, sw, 0, 0.0, 0.0)
    ways = [(v, st, k) for k in args.kernels for st in args.staging for v in args.variants]
    exts = {v: extension(v) for v in args.variants}
    timed = FlushedTimer(args.calls)

    with torch.no_grad():
        want = torch.nn.functional.conv_transpose2d(x, conv.weight, conv.bias, conv.stride, conv.padding,
                                                    conv.output_padding)
        errs = {(st, k): (exts[0].sp_conv(*call_args, st, k == "spp", False) - want).abs().max().item() if 0 in exts
                else float("nan") for k in args.kernels for st in args.staging}
        ms = {w: [] for w in ways}
        for _ in range(args.rounds):
            for v, st, k in ways:
                ms[(v, st, k)].append(timed(exts[v].sp_conv, *call_args, st, k == "spp", False))
    n, cin, h, w = x.shape
    gflop = 2 * n * cin * conv.out_channels * h * w * kh * kw / 1e9
    mb = (x.numel() + n * conv.out_channels * hout * wout) * 4 / 1e6
    print(f"{problem.id}: x {tuple(x.shape)}, y {(n, conv.out_channels, hout, wout)}, {gflop:.1f} GFLOP, {mb:.0f} MB "
          f"(x read once, y written once); the whole kernel's max abs difference from PyTorch: "
          + ", ".join(f"ct2d_{k} {st}-byte staging {e:.2e}" for (st, k), e in errs.items()))
    print("| kernel | staging | SP_ABLATE | left out | ms | whole kernel - this |")
    print("|---|---|---|---|---|---|")
    for v, st, k in ways:
        whole = statistics.median(ms[(0, st, k)]) if (0, st, k) in ms else float("nan")
        t = statistics.median(ms[(v, st, k)])
        print(f"| ct2d_{k} | {st} | {v} | {left_out(v)} | {t:.3f} | {whole - t:+.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
