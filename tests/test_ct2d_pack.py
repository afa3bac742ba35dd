"""The fast kernels' weight layouts (solutions/conv_transpose2d/_shared/ct2d_pack.py), element by
element against the index formulas the kernels read them with, on the CPU."""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "solutions" / "conv_transpose2d" / "_shared"))
import ct2d_pack as pk  # noqa: E402


def weights(cin, cout_g, kh, kw, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(cin, cout_g, kh, kw, generator=g)


def test_round_tf32_rounds_to_nearest_with_ties_away_from_zero():
    ulp = 2.0 ** -10  # TF32's unit in the last place at 1.0
    x = torch.tensor([1.0, 1 + ulp / 2, 1 + ulp / 4, 1 + 3 * ulp / 4, -(1 + ulp / 2), 3.0, 0.0])
    want = torch.tensor([1.0, 1 + ulp, 1.0, 1 + ulp, -(1 + ulp), 3.0, 0.0])
    assert torch.equal(pk.round_tf32(x), want)
    r = pk.round_tf32(torch.randn(1000))
    assert int((r.view(torch.int32) & 0x1FFF).abs().sum()) == 0  # 13 low bits clear


def test_phase_weights_index_tap_then_output_channel():
    w = weights(5, 3, 2, 4)
    p = pk.phase_weights(w)
    assert p.shape == (5, 8, 3)
    for ci, kh, kw, co in [(0, 0, 0, 0), (4, 1, 3, 2), (2, 1, 0, 1)]:
        assert p[ci, kh * 4 + kw, co] == w[ci, co, kh, kw]


@pytest.mark.parametrize("groups", [1, 2])
def test_phase_fragments_hold_each_lanes_mma_a_fragment(groups):
    cin_g, cout_g, kh, kw = 11, 19, 2, 3  # padded to 16 input and 32 output channels per group
    w = weights(cin_g * groups, cout_g, kh, kw)
    f = pk.phase_fragments(w, groups)
    assert f.shape == (groups, 2, kh, kw, 2, 2, 32, 4)
    for grp, cb, h, k, ks, lane, r in [(groups - 1, 1, 1, 2, 1, 31, 3), (0, 0, 0, 0, 0, 0, 0), (0, 1, 1, 0, 0, 13, 2)]:
        g, t = lane // 4, lane % 4
        co, ci = 16 * cb + g + 8 * (r % 2), 8 * ks + t + 4 * (r // 2)
        v = w[grp * cin_g + ci, co, h, k] if ci < cin_g and co < cout_g else torch.tensor(0.0)
        hi, lo = f[grp, cb, h, k, ks, 0, lane, r], f[grp, cb, h, k, ks, 1, lane, r]
        assert hi == pk.round_tf32(v.reshape(1))[0]
        assert lo == pk.round_tf32((v - hi).reshape(1))[0]
    hi_lo = f[:, :, :, :, :, 0] + f[:, :, :, :, :, 1]
    assert float(hi_lo.abs().sum()) == pytest.approx(float(w.abs().sum()), rel=1e-6)


@pytest.mark.parametrize("cin_g", [11, 16, 24])
def test_phase_bf16_gather_makes_each_lanes_m16n8k16_a_fragment(cin_g):
    """fast/phase.cuh, TC = 2 (a bf16 x): the kernel gathers lane (g, t)'s four m16n8k16 words from
    the TF32 hi units, word j = (A[g + 8 (j % 2)][k], A[..][k + 1]), k = 2t + 8 (j / 2), the lower k
    in the low half, A[m][k] = w[ci = 16 ks + k, co = 16 cb + m]. The kernel's index arithmetic,
    transcribed, against that definition (an input-channel half past the packed units reads 0)."""
    groups, cout_g, kh, kw = 2, 19, 2, 3
    w = weights(cin_g * groups, cout_g, kh, kw).bfloat16().float()   # a bf16 run's weights
    f = pk.phase_fragments(w, groups)
    wp = f.reshape(-1)                  # the kernel's wp: units of 256, hi then lo
    cbg, k8_n, ks_n = (cout_g + 15) // 16, (cin_g + 7) // 8, (cin_g + 15) // 16
    a = torch.zeros(groups, cbg * 16, kh, kw, ks_n * 16)
    a[:, :cout_g, :, :, :cin_g] = w.reshape(groups, cin_g, cout_g, kh, kw).permute(0, 2, 3, 4, 1)
    for grp in range(groups):
        for cb in range(cbg):
            for y in range(kh):
                for x in range(kw):
                    for ks in range(ks_n):
                        for lane in range(32):
                            g, t = lane >> 2, lane & 3
                            for j in range(4):
                                k8 = 2 * ks + (j >> 1)
                                v = [0.0, 0.0]
                                if k8 < k8_n:
                                    base = ((((grp * cbg + cb) * kh + y) * kw * k8_n + x * k8_n + k8) * 256
                                            + (j & 1) + 2 * (t >= 2))
                                    v = [float(wp[base + (4 * g + ((2 * t + d) & 3)) * 4]) for d in (0, 1)]
                                m, k = g + 8 * (j & 1), 16 * ks + 2 * t + 8 * (j >> 1)
                                assert v == [float(a[grp, 16 * cb + m, y, x, k + d]) for d in (0, 1)]


@pytest.mark.parametrize("cin_g", [1, 8, 16, 40, 64])
def test_phase_bf16_staging_row_stride_keeps_b_fragment_reads_conflict_free(cin_g):
    """TC = 2 stages x as bf16 channel pairs, s.cips words a column (launch_phase: 4 mod 8): lane
    (g, t) reads words (pixel g) cips + t and + 4; each read of the warp's 32 lanes hits 32 banks."""
    cip = (cin_g + 15) // 16 * 16
    cips = cip // 2 + (12 - (cip // 2) % 8) % 8
    assert cips % 8 == 4 and cips >= cip // 2
    for extra in (0, 4):
        assert len({(g * cips + t + extra) % 32 for g in range(8) for t in range(4)}) == 32


def test_mma_weights_put_eight_input_channels_innermost():
    w = weights(13, 40, 3, 5)
    padded = pk.gemm_padded(w)
    assert padded.shape == (16, 15, 40)
    exact = pk.mma_weights(padded, 40, tf32=False)
    assert exact.shape == (2, 15, 40, 8)
    assert exact[1, 7, 39, 4] == w[12, 39, 1, 2]
    assert exact[1, 7, 39, 5] == 0  # input channel 13: padding
    rounded = pk.mma_weights(padded, 40, tf32=True)
    assert torch.equal(rounded, pk.round_tf32(exact))


def test_wgmma_weights_are_core_matrices_of_eight_channels_by_four_inputs():
    w = weights(16, 24, 1, 3)
    out = pk.wgmma_weights(pk.gemm_padded(w))
    assert out.shape == (2, 3, 3, 2, 8, 4)  # [chunk][tap][co / 8][ci half][co % 8][ci % 4]
    chunk, tap, co, ci = 1, 2, 21, 14
    assert out[chunk, tap, co // 8, (ci % 8) // 4, co % 8, ci % 4] == pk.round_tf32(w[8 * chunk + ci % 8, co, 0, tap].reshape(1))[0]


def test_fp16_scale_puts_the_largest_weight_just_under_fp16s_maximum():
    w = weights(4, 8, 3, 3) * 1e-3
    scaled, e = pk.fp16_scaled(pk.gemm_padded(w), 4, 8)
    assert 2 ** 14 <= float(scaled.abs().max()) < 2 ** 15
    assert torch.allclose(scaled * 2.0 ** -e, w.permute(0, 2, 3, 1).reshape(4, 9, 8).double())
    assert pk.fp16_scaled(pk.gemm_padded(torch.zeros(4, 8, 1, 1)), 4, 8)[1] == 0
    bad = w.clone()
    bad[0, 0, 0, 0] = float("inf")
    assert pk.fp16_scaled(pk.gemm_padded(bad), 4, 8) is None
    assert pk.mma_fp16(pk.gemm_padded(bad), 4, 8)[0].numel() == 0


def test_mma_fp16_is_sixteen_input_channels_innermost_and_scaled():
    w = weights(20, 32, 3, 3)
    wh, e = pk.mma_fp16(pk.gemm_padded(w), 20, 32)
    assert wh.dtype == torch.float16 and wh.shape == (2, 9, 32, 16)
    ci, tap, co = 17, 4, 30
    assert float(wh[ci // 16, tap, co, ci % 16]) * 2.0 ** -e == pytest.approx(float(w[ci, co, 1, 1]), rel=2 ** -10)
    assert float(wh[1, 0, 0, 4:].abs().sum()) == 0  # input channels 20..31: padding


@pytest.mark.parametrize("parts", [1, 2])
def test_fp16_parts_layout_and_hi_lo_sum(parts):
    w = weights(24, 70, 3, 3)
    t, e = pk.fp16_parts(pk.gemm_padded(w), 24, 70, parts)
    taps = 9
    assert t.shape == (2, 2, parts, taps, 8, 2, 8, 8)
    ci, co, tap = 21, 66, 5  # [co / 64][ci / 16][part][tap][co % 64 / 8][ci % 16 / 8][co % 8][ci % 8]
    idx = (co // 64, ci // 16, slice(None), tap, (co % 64) // 8, (ci % 16) // 8, co % 8, ci % 8)
    v = t[idx].double().sum() * 2.0 ** -e
    exact = float(w[ci, co, tap // 3, tap % 3])
    assert float(v) == pytest.approx(exact, rel=2 ** -20 if parts == 2 else 2 ** -10)


@pytest.mark.parametrize("groups, stride, split, wgmma, cout, present", [
    (1, (1, 1), 1, True, 64, {"mma", "mmh", "wgmma", "wh"}),
    (1, (1, 1), 1, False, 64, {"mma", "mmh"}),
    (1, (1, 1), 3, True, 64, {"mma", "wh"}),
    (1, (1, 1), 1, True, 32, {"mma", "mmh", "wgmma"}),
    (2, (1, 1), 1, True, 64, set()),
    (1, (2, 1), 1, True, 64, set()),
])
def test_pack_builds_only_the_layouts_the_kernels_can_use(groups, stride, split, wgmma, cout, present):
    w = weights(16 * groups, cout // groups, 3, 3)
    p = pk.pack(w, groups, stride, split, wgmma)
    assert {n for n in ("mma", "mmh", "wgmma", "wh") if getattr(p, n).numel()} == present
    assert p.phase.numel() == w.numel() and p.phase_frag.numel() > 0
    assert p.mmh.dtype == p.wh.dtype == torch.float16
    assert p.wb.numel() == 0                     # bf16 parts: for bf16 weights only
    b = pk.pack(w.bfloat16(), groups, stride, split, wgmma)
    assert bool(b.wb.numel()) == ("wh" in present and split == 1) and b.wb.dtype == torch.bfloat16


def test_bf16_parts_are_fp16_parts_layout_unscaled_and_exact():
    """ct2d_wgf's bf16 products (config 9): the weights of a bf16 run as they are, in fp16_parts' layout."""
    w = weights(24, 70, 3, 3).bfloat16()
    padded = pk.gemm_padded(w.float())
    t, e = pk.fp16_parts(padded, 24, 70, 1)
    b = pk.bf16_parts(padded, 24, 70)
    assert b.dtype == torch.bfloat16 and b.shape == t.shape == (2, 2, 1, 9, 8, 2, 8, 8)
    assert torch.equal(b.double(), t.double() * 2.0 ** -e)   # both exact for bf16 values
    ci, co, tap = 21, 66, 5
    assert float(b[co // 64, ci // 16, 0, tap, (co % 64) // 8, (ci % 16) // 8, co % 8, ci % 8]) == \
        float(w[ci, co, tap // 3, tap % 3])


def test_pack_widens_half_weights_exactly():
    w = weights(8, 16, 3, 3).bfloat16()
    assert torch.equal(pk.pack(w, 1, (1, 1), 1, False).phase, pk.phase_weights(w.float()))
