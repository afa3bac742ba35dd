"""Shared Python side of the fast ConvTranspose2d solutions (fast.cu): parameters created exactly
as nn.ConvTranspose2d creates them (matched-seed construction gives the reference's weights),
weights repacked into each kernel's layout once per weight version, not on every call."""
import math
import os
from pathlib import Path

import torch
from ct2d_params import ConvTranspose2dParams
from torch.utils.cpp_extension import load_inline

_HERE = Path(__file__).resolve().parent

CPP_DECL = """
torch::Tensor conv_transpose2d_fast(torch::Tensor x, torch::Tensor wp, torch::Tensor wt, torch::Tensor wm,
                                    torch::Tensor wmh, int64_t wmh_exp, torch::Tensor wg, torch::Tensor wh, int64_t wh_exp, c10::optional<torch::Tensor> bias,
                                    int64_t Cout, int64_t KH, int64_t KW, int64_t stride_h, int64_t stride_w,
                                    int64_t pad_h, int64_t pad_w, int64_t outpad_h, int64_t outpad_w,
                                    int64_t dil_h, int64_t dil_w, int64_t groups, int64_t split, int64_t config);
"""


def _hopper_target() -> bool:
    """Build for sm_90a (and so include the wgmma kernel) when the target is compute capability
    9.0: the harness names it in TORCH_CUDA_ARCH_LIST; without that, the visible GPU decides."""
    arch = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if not arch and torch.cuda.is_available():
        arch = "%d.%d" % torch.cuda.get_device_capability()
    return arch in ("9.0", "9.0a", "9.0+PTX", "9.0a+PTX")


# sm_90a code runs on compute capability 9.0 only (H100, H200); an explicit -gencode replaces the
# arch flags torch would add
WGMMA = _hopper_target()
_ext = load_inline(
    name="conv_transpose2d_fast",
    cpp_sources=CPP_DECL,
    cuda_sources=(_HERE / "fast.cu").read_text(),
    functions=["conv_transpose2d_fast"],
    extra_cuda_cflags=["-O3", "-std=c++17"]
    + (["-gencode=arch=compute_90a,code=sm_90a", "-DCT2D_WGMMA"] if WGMMA else []),
)


def _round_tf32(t: torch.Tensor) -> torch.Tensor:
    """Round to nearest TF32 (10 mantissa bits), ties away, as cvt.rna.tf32.f32 does."""
    return torch.bitwise_and(t.view(torch.int32) + 0x1000, -0x2000).view(torch.float32)


def _phase_fragments(w: torch.Tensor, groups: int) -> torch.Tensor:
    """Weights (Cin, Cout/groups, KH, KW) as the phase kernel's tensor cores read them:
    [group][co / 16][kh][kw][ci / 8][hi, lo][lane][r], zero-padded. Lane (g, t) = (lane / 4, lane % 4)
    holds the m16n8k8 A fragment a_r = A[g + 8 (r % 2)][t + 4 (r / 2)] with A[m][k] = w[ci = 8 ks + k,
    co = 16 cb + m]; hi = a rounded to TF32, lo = the remainder rounded to TF32."""
    cin, cout_g, kh, kw = w.shape
    cin_g = cin // groups
    cb, ks = (cout_g + 15) // 16, (cin_g + 7) // 8
    a = w.new_zeros(groups, cb * 16, kh, kw, ks * 8)  # [group][co][kh][kw][ci]
    a[:, :cout_g, :, :, :cin_g] = w.reshape(groups, cin_g, cout_g, kh, kw).permute(0, 2, 3, 4, 1)
    # co = 16 cb + 8 mh + g, ci = 8 ks + 4 kh2 + t  ->  [group][cb][kh][kw][ks][g][t][kh2][mh]
    a = a.view(groups, cb, 2, 8, kh, kw, ks, 2, 4).permute(0, 1, 4, 5, 6, 3, 8, 7, 2)
    a = a.reshape(groups, cb, kh, kw, ks, 32, 4)
    hi = _round_tf32(a.contiguous())
    return torch.stack([hi, _round_tf32(a - hi)], dim=5).contiguous()


def _fp16_scaled(padded: torch.Tensor, cin: int, cout: int) -> tuple[torch.Tensor, int] | None:
    """The weights of padded (Cin padded to 8, KH*KW, Cout padded to 8) in float64, (Cin, KH*KW,
    Cout), times 2^e, with e such that the largest magnitude lies in [2^14, 2^15), within [-113, 100]
    (as fast.cu's wgh_exp does for x); None where a weight is not finite (the fp16 kernels then do
    not run)."""
    w = padded[:cin, :, :cout].double()
    if not bool(torch.isfinite(w).all()):
        return None
    amax = float(w.abs().max())
    e = 0 if amax == 0 else min(max(15 - math.frexp(amax)[1], -113), 100)
    return w * 2.0 ** e, e


def _mma_fp16(padded: torch.Tensor, cin: int, cout: int) -> tuple[torch.Tensor, int]:
    """Weights for ct2d_mmh (one fp16 product on mma.sync, TF32 class): padded is (Cin padded to 8,
    KH*KW, Cout padded to 8); scaled by 2^e (_fp16_scaled), as (ceil(Cin/16), KH*KW, Cout, 16)
    fp16, input channels innermost and zero-padded. Returns (weights, e); empty where a weight is
    not finite."""
    scaled = _fp16_scaled(padded, cin, cout)
    if scaled is None:
        return padded.new_empty(0, dtype=torch.float16), 0
    w, e = scaled
    c16, taps = (cin + 15) // 16, padded.shape[1]
    a = torch.zeros(c16 * 16, taps, cout, dtype=torch.float64, device=padded.device)
    a[:cin] = w
    return a.view(c16, 16, taps, cout).permute(0, 2, 3, 1).to(torch.float16).contiguous(), e


def _fp16_parts(padded: torch.Tensor, cin: int, cout: int, parts: int) -> tuple[torch.Tensor, int]:
    """Weights for the fp16 wgmma kernels, ct2d_wgh (3xFP16, fp32 class: parts=2) and ct2d_wgf (one
    fp16 product, TF32 class: parts=1): padded is (Cin padded to 8, KH*KW, Cout padded to 8).
    Scaled by 2^e (_fp16_scaled), split as hi = fp16(v), lo = fp16(v - hi) (parts=2), laid out as
    [co / 64][ci / 16][hi, lo][tap][co % 64 / 8][ci % 16 / 8][co % 8][ci % 8], zero-padded.
    Returns (parts, e); empty parts where a weight is not finite."""
    scaled = _fp16_scaled(padded, cin, cout)
    if scaled is None:
        return padded.new_empty(0, dtype=torch.float16), 0
    w, e = scaled
    taps = padded.shape[1]
    chunks, cob = (cin + 15) // 16, (cout + 63) // 64
    a = torch.zeros(chunks * 16, taps, cob * 64, dtype=torch.float64, device=padded.device)
    a[:cin, :, :cout] = w
    hi = a.to(torch.float16)
    t = torch.stack([hi] if parts == 1 else [hi, (a - hi.double()).to(torch.float16)])  # [hl][ci][tap][co]
    t = t.view(parts, chunks, 2, 8, taps, cob, 8, 8)  # hl, chunk, ci half, ci % 8, tap, cob, co8, co % 8
    return t.permute(5, 1, 0, 4, 6, 2, 7, 3).contiguous(), e


class FastConvTranspose2d(ConvTranspose2dParams):
    """split=1: TF32-class results on the tensor cores: the implicit GEMM where it applies (stride 1,
    groups 1) as one fp16 product of scaled operands, TF32's significand at twice its rate (on
    mma.sync for 32 channels per block; on sm_90a's wgmma for more than 32 output channels), else the phase kernel's tensor-core variant with TF32 MMAs. split=3: 3xTF32 in both,
    fp32-class results. Where the phase kernel's tensor-core variant does not fit in shared memory,
    it runs on fp32 FMAs (fp32 class) either way."""

    split = 1
    config = 0  # kernel: 0 = chosen from the shapes (1..9 force one, for tuning runs; see fast.cu)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._packed = None
        self._packed_key = None

    def _packed_weights(self) -> tuple:
        """Weights repacked for the kernels, rebuilt only when the parameter changes (another
        tensor, or an in-place update bumps its version):
        - (Cin, KH*KW, Cout/groups), exact, for the phase kernel;
        - (groups, ceil(Cout/groups/16), KH, KW, ceil(Cin/groups/8), 2, 32, 4) for its tensor-core
          variant: per 16 output x 8 input channels and tap, the m16n8k8 A fragments of the 32
          lanes, as TF32 hi and lo parts (3xTF32; the TF32 variant stages hi only);
        - (ceil(Cin/8), KH*KW, Cout, 8), input channels innermost and zero-padded, for the
          mma.sync tensor-core kernel (stride 1, groups 1 only): TF32-rounded for split 1, exact
          for split 3;
        - for split 1 (stride 1, groups 1): (ceil(Cin/16), KH*KW, Cout, 16) fp16 scaled by 2^e and
          e (_mma_fp16), for the one-product mma.sync kernel;
        - (ceil(Cin/8), KH*KW, ceil(Cout/8), 2, 8, 4), TF32-rounded, for the wgmma kernel (split 1,
          stride 1, groups 1, sm_90a builds): per 8 input channels and tap, 8x4 "core matrices"
          of (8 output channels) x (4 input channels), the shared-memory layout that kernel reads;
        - on sm_90a builds (stride 1, groups 1, more than 32 output channels): the scaled fp16
          parts and their scale exponent (_fp16_parts): hi for the one-product wgmma kernel
          (split 1), hi and lo for the 3xFP16 one (split 3)."""
        w = self.conv_transpose2d.weight
        key = (w.data_ptr(), w._version, tuple(w.shape), w.device)
        if self._packed_key != key:
            cin, cout_g, kh, kw = w.shape
            wd = w.detach().float()  # a half-precision run's weights, exactly (no copy for fp32)
            packed = wd.permute(0, 2, 3, 1).reshape(cin, kh * kw, cout_g).contiguous()
            frag = _phase_fragments(wd, self.conv_transpose2d.groups)
            mma = wgm = wd.new_empty(0)
            wh, wh_exp = wd.new_empty(0, dtype=torch.float16), 0
            mmh, mmh_exp = wh, 0
            c = self.conv_transpose2d
            if c.groups == 1 and c.stride == (1, 1):
                chunks, taps, co8 = (cin + 7) // 8, kh * kw, (cout_g + 7) // 8
                padded = torch.zeros(chunks * 8, taps, co8 * 8, dtype=wd.dtype, device=wd.device)
                padded[:cin, :, :cout_g] = packed
                mma = padded[:, :, :cout_g].reshape(chunks, 8, taps, cout_g).permute(0, 2, 3, 1).contiguous()
                if self.split == 1:
                    mma = _round_tf32(mma)
                    mmh, mmh_exp = _mma_fp16(padded, cin, cout_g)
                    if WGMMA:  # [chunk][tap][co / 8][ci half][co % 8][ci % 4]
                        wgm = padded.view(chunks, 2, 4, taps, co8, 8).permute(0, 3, 4, 1, 5, 2)
                        wgm = _round_tf32(wgm.contiguous())
                if WGMMA and cout_g > 32:
                    wh, wh_exp = _fp16_parts(padded, cin, cout_g, 1 if self.split == 1 else 2)
            self._packed = (packed, frag, mma, mmh, mmh_exp, wgm, wh, wh_exp)
            self._packed_key = key
        return self._packed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv_transpose2d
        (kh, kw), (sh, sw), (ph, pw) = c.kernel_size, c.stride, c.padding
        (oph, opw), (dh, dw) = c.output_padding, c.dilation
        packed, frag, mma, mmh, mmh_exp, wgm, wh, wh_exp = self._packed_weights()
        return _ext.conv_transpose2d_fast(x, packed, frag, mma, mmh, mmh_exp, wgm, wh, wh_exp, self._bias(), c.out_channels,
                                          kh, kw, sh, sw, ph, pw, oph, opw, dh, dw, c.groups, self.split, self.config)

    def _bias(self):
        return self.conv_transpose2d.bias


class FastConvTranspose2dBF16(FastConvTranspose2d):
    """bf16 runs (--precision bf16): the TF32-class kernels with the weights and the bias widened to
    fp32. bf16's 8-bit significand fits TF32's and (scaled) fp16's, so every product is exact and
    the sum is fp32's, rounded once to bf16: fp32 math rounded once, the bf16 class's best. x goes
    in as bf16 and the kernels write bf16 themselves: the stride-1 kernels with fp16 products
    (ct2d_wgf also reads x as bf16; ct2d_mmh stages it widened) and the phase kernel's TF32 variant
    (strided or grouped; widens x as it stages it). Elsewhere (stride 1, one group, fewer than 32
    output channels) fast.cu widens x and rounds the fp32 output (fast.cu: bf16_native)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.bfloat16:
            raise TypeError(f"fast_bf16 is for bf16 runs (--precision bf16); x is {x.dtype}")
        return super().forward(x)

    def _bias(self):
        """The bias widened to fp32, once per bias version (a conversion per call is one more
        launch, which shows on small problems)."""
        bias = self.conv_transpose2d.bias
        if bias is None:
            return None
        key = (bias.data_ptr(), bias._version)
        if getattr(self, "_bias_key", None) != key:
            self._bias32, self._bias_key = bias.detach().float(), key
        return self._bias32


class FastConvTranspose2dFP32(FastConvTranspose2d):
    split = 3
