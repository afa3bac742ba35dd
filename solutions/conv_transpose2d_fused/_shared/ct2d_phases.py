"""A stride-(sh, sw) ConvTranspose2d as sh * sw stride-1 ones, one per output phase: the geometry
(pure Python; tests/test_fused_epilogues.py checks it on the CPU against PyTorch) and what the
interleaving pass computes, in PyTorch. ct2d_fused.SplitConv runs it on the GPU.

For output row oh = rh + sh i (rh < sh), the taps that reach it are kh = kh0 + sh a with
kh0 = (rh + ph) mod sh (dilation 1), and they read input row ih = i + c - a, c = (rh + ph - kh0) / sh.
That is the stride-1, unpadded transposed convolution of x with the sub-kernel w[:, :, kh0::sh],
t = i + c: its output row t is the phase's row i. Likewise for columns. So the stride-(sh, sw)
convolution is sh * sw stride-1 ones with about 1 / (sh sw) of the taps each, which the library runs
on its stride-1 kernels (wgmma on the H200), and a pass that interleaves their outputs into y, adds
the bias and applies the epilogue (split.cu: phase_interleave)."""
from __future__ import annotations

from typing import NamedTuple


class Phase(NamedTuple):
    rh: int       # output row residue mod stride_h
    rw: int       # output column residue mod stride_w
    kh0: int      # its first tap (every stride-th after it)
    kw0: int
    taps_h: int   # how many (0: the phase gets the bias only)
    taps_w: int
    ch: int       # its row i is row i + ch of the sub-convolution's output
    cw: int


def output_size(size: int, k: int, s: int, p: int, op: int) -> int:
    return (size - 1) * s - 2 * p + (k - 1) + op + 1


def phases(kernel, stride, padding) -> list[Phase]:
    """The output phases of a ConvTranspose2d with dilation 1, row-major in (rh, rw)."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    out = []
    for rh in range(sh):
        kh0 = (rh + ph) % sh
        for rw in range(sw):
            kw0 = (rw + pw) % sw
            out.append(Phase(rh, rw, kh0, kw0, len(range(kh0, kh, sh)), len(range(kw0, kw, sw)),
                             (rh + ph - kh0) // sh, (rw + pw - kw0) // sw))
    return out


def interleave_reference(subs: list, plist: list[Phase], stride, out_shape, like, bias=None, epilogue=None):
    """What phase_interleave computes, in PyTorch (for tests): y[n, c, rh + sh i, rw + sw j] =
    epilogue(sub[n, c, i + ch, j + cw] + bias[c]), the sub term 0 outside the sub-output or where
    the phase has no taps. like: a tensor of y's dtype and device."""
    n, c, hout, wout = out_shape
    sh, sw = stride
    y = like.new_zeros(out_shape)
    for p, sub in zip(plist, subs):
        rows, cols = len(range(p.rh, hout, sh)), len(range(p.rw, wout, sw))
        if sub is None or rows == 0 or cols == 0:
            continue
        win = sub[:, :, p.ch:p.ch + rows, p.cw:p.cw + cols]
        y[:, :, p.rh::sh, p.rw::sw][:, :, :win.shape[2], :win.shape[3]] = win
    if bias is not None:
        y = y + bias.reshape(1, -1, 1, 1)
    return epilogue(y) if epilogue is not None else y


def subpixel_taps(plist: list[Phase]) -> tuple[int, int]:
    """The sub-kernel of the one stride-1 convolution that computes every phase (subpixel_weight):
    the most taps any phase has in each direction (at least 1)."""
    return max(1, max(p.taps_h for p in plist)), max(1, max(p.taps_w for p in plist))


def subpixel_weight(w, plist: list[Phase], stride):
    """The phases' sub-kernels side by side along the output channels, as one stride-1 unpadded
    ConvTranspose2d's weight: [Cin, P * Cout, th, tw] (subpixel_taps), channel p * Cout + c holding
    w[:, c, kh0_p::sh, kw0_p::sw] in its first taps_h x taps_w taps and zeros after them (a phase
    with fewer taps than the most, or none, reads the same input rows with zero weights). Its
    output z has rows t = i + a over x's rows i, so phase p's row i is z's row i + ch_p in the
    channels of p, as for SplitConv's sub-convolutions; ct2d_fused.SubpixelConv runs it on the
    library's stride-1 kernels and interleaves z with the bias and the epilogue."""
    (sh, sw) = stride
    cin, cout = w.shape[0], w.shape[1]
    th, tw = subpixel_taps(plist)
    out = w.new_zeros((cin, len(plist) * cout, th, tw))
    for i, p in enumerate(plist):
        if p.taps_h and p.taps_w:
            out[:, i * cout:(i + 1) * cout, :p.taps_h, :p.taps_w] = w[:, :, p.kh0::sh, p.kw0::sw]
    return out
