"""The fast kernels' weight layouts (fast/*.cuh), as pure functions of the ConvTranspose2d weight
w (Cin, Cout/groups, KH, KW): each returns a new tensor on w's device and touches no module state.
ct2d_fast.py calls pack() once per weight version; tests/test_ct2d_pack.py checks each layout
element by element on the CPU.

Why the kernels want these layouts: each is the order in which a kernel's shared-memory stage or
MMA fragment reads the weights, so a block copies contiguous bytes and never transposes.
Why the roundings: TF32 MMAs read only the top 19 bits of an operand, so weights are rounded to
nearest once here (the MMA itself would truncate); fp16 operands are scaled by a power of two so
that the largest weight sits just under fp16's maximum and small weights stay normal."""
from __future__ import annotations

import math
from typing import NamedTuple

import torch


def round_tf32(t: torch.Tensor) -> torch.Tensor:
    """fp32 rounded to nearest TF32 (10 mantissa bits), ties away from zero, as cvt.rna.tf32.f32
    does for finite values (fast/common.cuh: to_tf32)."""
    return torch.bitwise_and(t.view(torch.int32) + 0x1000, -0x2000).view(torch.float32)


def phase_weights(w: torch.Tensor) -> torch.Tensor:
    """(Cin, KH*KW, Cout/groups), exact: the phase kernel's CUDA-core variant reads one tap's
    output channels contiguously (fast/phase.cuh)."""
    cin, cout_g, kh, kw = w.shape
    return w.permute(0, 2, 3, 1).reshape(cin, kh * kw, cout_g).contiguous()


def phase_fragments(w: torch.Tensor, groups: int) -> torch.Tensor:
    """The phase kernel's tensor-core operands: [group][co / 16][kh][kw][ci / 8][hi, lo][lane][r],
    zero-padded. Lane (g, t) = (lane / 4, lane % 4) holds the m16n8k8 A fragment a_r =
    A[g + 8 (r % 2)][t + 4 (r / 2)] with A[m][k] = w[ci = 8 ks + k, co = 16 cb + m] (ci within the
    group); hi = a rounded to TF32, lo = the remainder rounded to TF32 (the TF32 variant reads hi
    only, 3xTF32 both)."""
    cin, cout_g, kh, kw = w.shape
    cin_g = cin // groups
    cb, ks = (cout_g + 15) // 16, (cin_g + 7) // 8
    a = w.new_zeros(groups, cb * 16, kh, kw, ks * 8)  # [group][co][kh][kw][ci]
    a[:, :cout_g, :, :, :cin_g] = w.reshape(groups, cin_g, cout_g, kh, kw).permute(0, 2, 3, 4, 1)
    # co = 16 cb + 8 mh + g, ci = 8 ks + 4 kh2 + t  ->  [group][cb][kh][kw][ks][g][t][kh2][mh]
    a = a.view(groups, cb, 2, 8, kh, kw, ks, 2, 4).permute(0, 1, 4, 5, 6, 3, 8, 7, 2)
    a = a.reshape(groups, cb, kh, kw, ks, 32, 4)
    hi = round_tf32(a.contiguous())
    return torch.stack([hi, round_tf32(a - hi)], dim=5).contiguous()


def gemm_padded(w: torch.Tensor) -> torch.Tensor:
    """(ceil(Cin/8)*8, KH*KW, ceil(Cout/8)*8), zero-padded: the implicit GEMM's K (input channels)
    and M (output channels) rounded up to the MMA's 8. One group only."""
    cin, cout, kh, kw = w.shape
    out = w.new_zeros((cin + 7) // 8 * 8, kh * kw, (cout + 7) // 8 * 8)
    out[:cin, :, :cout] = phase_weights(w)
    return out


def mma_weights(padded: torch.Tensor, cout: int, tf32: bool) -> torch.Tensor:
    """ct2d_mma (fast/mma.cuh): (ceil(Cin/8), KH*KW, Cout, 8), input channels innermost, so one
    32-byte row per (tap, output channel) is a chunk's A row; TF32-rounded for the TF32 class,
    exact for 3xTF32 (the kernel splits it)."""
    chunks, taps = padded.shape[0] // 8, padded.shape[1]
    out = padded[:, :, :cout].reshape(chunks, 8, taps, cout).permute(0, 2, 3, 1).contiguous()
    return round_tf32(out) if tf32 else out


def wgmma_weights(padded: torch.Tensor) -> torch.Tensor:
    """ct2d_wg/ct2d_wgs (fast/wgmma.cuh), TF32-rounded: [chunk][tap][co / 8][ci half][co % 8][ci % 4],
    the wgmma's K-major 8 x 16-byte core matrices without swizzle."""
    chunks, taps, co8 = padded.shape[0] // 8, padded.shape[1], padded.shape[2] // 8
    out = padded.view(chunks, 2, 4, taps, co8, 8).permute(0, 3, 4, 1, 5, 2)
    return round_tf32(out.contiguous())


def fp16_scaled(padded: torch.Tensor, cin: int, cout: int) -> tuple[torch.Tensor, int] | None:
    """padded's (Cin, KH*KW, Cout) weights in float64 times 2^e, e putting the largest magnitude
    in [2^14, 2^15) and kept within [-113, 100] (as the kernels' wgh_exp does for x); None where a
    weight is not finite (the fp16 kernels then do not run)."""
    w = padded[:cin, :, :cout].double()
    if not bool(torch.isfinite(w).all()):
        return None
    amax = float(w.abs().max())
    e = 0 if amax == 0 else min(max(15 - math.frexp(amax)[1], -113), 100)
    return w * 2.0 ** e, e


def mma_fp16(padded: torch.Tensor, cin: int, cout: int) -> tuple[torch.Tensor, int]:
    """ct2d_mmh (fast/mma.cuh, one fp16 product on mma.sync): the weights scaled by 2^e
    (fp16_scaled) as (ceil(Cin/16), KH*KW, Cout, 16) fp16, input channels innermost and
    zero-padded. Returns (weights, e); empty weights where one is not finite."""
    scaled = fp16_scaled(padded, cin, cout)
    if scaled is None:
        return padded.new_empty(0, dtype=torch.float16), 0
    w, e = scaled
    c16, taps = (cin + 15) // 16, padded.shape[1]
    a = torch.zeros(c16 * 16, taps, cout, dtype=torch.float64, device=padded.device)
    a[:cin] = w
    return a.view(c16, 16, taps, cout).permute(0, 2, 3, 1).to(torch.float16).contiguous(), e


def fp16_parts(padded: torch.Tensor, cin: int, cout: int, parts: int) -> tuple[torch.Tensor, int]:
    """The fp16 wgmma kernels (fast/wgmma.cuh): ct2d_wgf (one fp16 product, TF32 class: parts=1)
    and ct2d_wgh (3xFP16, fp32 class: parts=2). Scaled by 2^e (fp16_scaled), split as
    hi = fp16(v), lo = fp16(v - hi), laid out as
    [co / 64][ci / 16][hi, lo][tap][co % 64 / 8][ci % 16 / 8][co % 8][ci % 8], zero-padded.
    Returns (parts, e); empty parts where a weight is not finite."""
    scaled = fp16_scaled(padded, cin, cout)
    if scaled is None:
        return padded.new_empty(0, dtype=torch.float16), 0
    w, e = scaled
    a = _wgmma_rows(w, padded.shape[1], cin, cout)
    hi = a.to(torch.float16)
    return _wgmma_layout(torch.stack([hi] if parts == 1 else [hi, (a - hi.double()).to(torch.float16)])), e


def bf16_parts(padded: torch.Tensor, cin: int, cout: int) -> torch.Tensor:
    """ct2d_wgf's bf16 products (config 9 on a bf16 x, issue 77): fp16_parts' layout with one part,
    bf16 and unscaled (exact for a bf16 run's weights; bf16 has fp32's range)."""
    a = _wgmma_rows(padded[:cin, :, :cout].double(), padded.shape[1], cin, cout)
    return _wgmma_layout(a.to(torch.bfloat16).unsqueeze(0))


def _wgmma_rows(w: torch.Tensor, taps: int, cin: int, cout: int) -> torch.Tensor:
    """w's (Cin, KH*KW, Cout) in float64, zero-padded to whole chunks of 16 and blocks of 64."""
    a = torch.zeros((cin + 15) // 16 * 16, taps, (cout + 63) // 64 * 64, dtype=torch.float64, device=w.device)
    a[:cin, :, :cout] = w
    return a


def _wgmma_layout(t: torch.Tensor) -> torch.Tensor:
    """[part][ci][tap][co] -> [co / 64][ci / 16][part][tap][co % 64 / 8][ci % 16 / 8][co % 8][ci % 8]."""
    parts, ci, taps, co = t.shape
    t = t.view(parts, ci // 16, 2, 8, taps, co // 64, 8, 8)  # part, chunk, ci half, ci % 8, tap, cob, co8, co % 8
    return t.permute(5, 1, 0, 4, 6, 2, 7, 3).contiguous()


class Packed(NamedTuple):
    """Every layout one call may need (empty where its kernel cannot run for this weight)."""
    phase: torch.Tensor       # phase_weights
    phase_frag: torch.Tensor  # phase_fragments
    mma: torch.Tensor         # mma_weights (stride 1, one group)
    mmh: torch.Tensor         # mma_fp16 (TF32 class, stride 1, one group)
    mmh_exp: int
    wgmma: torch.Tensor       # wgmma_weights (TF32 class, stride 1, one group, sm_90a builds)
    wh: torch.Tensor          # fp16_parts (stride 1, one group, more than 32 output channels, sm_90a builds)
    wh_exp: int
    wb: torch.Tensor          # bf16_parts (as wh, for a bf16 weight in the TF32 class: config 9's bf16 products)


def pack(w: torch.Tensor, groups: int, stride: tuple[int, int], split: int, wgmma: bool) -> Packed:
    """All layouts for weight w (any float dtype; widened to fp32 exactly). split: 1 for the TF32
    class (and bf16 runs), 3 for the fp32 class; wgmma: the build has the sm_90a kernels."""
    wd = w.detach().float()
    cin, cout_g = wd.shape[:2]
    empty, empty_h = wd.new_empty(0), wd.new_empty(0, dtype=torch.float16)
    mma = mmh = wgm = wh = wb = None
    mmh_exp = wh_exp = 0
    if groups == 1 and tuple(stride) == (1, 1):
        padded = gemm_padded(wd)
        mma = mma_weights(padded, cout_g, tf32=split == 1)
        if split == 1:
            mmh, mmh_exp = mma_fp16(padded, cin, cout_g)
            if wgmma:
                wgm = wgmma_weights(padded)
        if wgmma and cout_g > 32:
            wh, wh_exp = fp16_parts(padded, cin, cout_g, 1 if split == 1 else 2)
            if split == 1 and w.dtype == torch.bfloat16:
                wb = bf16_parts(padded, cin, cout_g)
    return Packed(phase_weights(wd), phase_fragments(wd, groups), empty if mma is None else mma,
                  empty_h if mmh is None else mmh, mmh_exp, empty if wgm is None else wgm,
                  empty_h if wh is None else wh, wh_exp, wd.new_empty(0, dtype=torch.bfloat16) if wb is None else wb)
