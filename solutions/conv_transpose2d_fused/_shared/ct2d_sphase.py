"""The build of sphase.cu: ct2d_sp, the strided convolution of ct2d_fused.StridedConv (one implicit
GEMM per output phase on TF32 mma.sync, the bias and the library's epilogue in its store), and the
host-side packing of its weights. The library's headers (fast/common.cuh, fast/epilogue.cuh) are on
the include path."""
import functools
import hashlib
from pathlib import Path

import torch
from torch.utils.cpp_extension import load_inline

_HERE = Path(__file__).resolve().parent
FAST_DIR = _HERE.parents[1] / "conv_transpose2d" / "_shared" / "fast"

CO_BLOCK = 64  # sphase.cu: kCoB, kKC, kSpMaxTaps
CHUNK = 32
MAX_TAPS = 4

_DECL = """
torch::Tensor sp_conv(torch::Tensor x, torch::Tensor wp, c10::optional<torch::Tensor> bias, std::vector<int64_t> phases,
    int64_t Cout, int64_t Hout, int64_t Wout, int64_t sh, int64_t sw, int64_t epilogue, double epi_a, double epi_b,
    int64_t staging, bool persistent, bool channel_min);
"""


def library_source(name: str) -> str:
    """A .cu file of this folder that includes the library's headers (split.cu, sphase.cu), headed
    by a digest of those headers: torch's build cache keys on the source text, so a change in
    epilogue.cuh or common.cuh rebuilds."""
    digest = hashlib.sha256(b"".join((FAST_DIR / f).read_bytes() for f in ("epilogue.cuh", "common.cuh")))
    return f"// fast/ headers sha256 {digest.hexdigest()}\n" + (_HERE / name).read_text()


def round_tf32(t: torch.Tensor) -> torch.Tensor:
    """t rounded to nearest TF32, ties away from zero (fast/common.cuh's to_tf32), as fp32."""
    bits = t.float().contiguous().view(torch.int32)
    return ((bits + 0x1000) & -8192).view(torch.float32)


def pack_weights(w: torch.Tensor, plist, stride) -> tuple[torch.Tensor, list[int]]:
    """ConvTranspose2d weights [Cin, Cout, KH, KW] as ct2d_sp reads them: per phase (ct2d_phases.Phase,
    in order), per block of 64 output channels, per chunk of 32 input channels (padded to 8), the
    phase's taps in mma.sync's A-fragment order, rounded to TF32: [tap][k-step][m-tile][lane][4] with
    lane = 4 g + t holding (co, ci) = (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4) of the m-tile's
    16 channels and the k-step's 8. Returns the packed floats and each phase's offset into them."""
    (sh, sw), (cin, cout) = stride, w.shape[:2]
    cin8, cop = -(-cin // 8) * 8, -(-cout // CO_BLOCK) * CO_BLOCK
    parts, offsets, off = [], [], 0
    for p in plist:
        offsets.append(off)
        taps = p.taps_h * p.taps_w
        if taps == 0:
            continue
        sub = w[:, :, p.kh0::sh, p.kw0::sw].permute(2, 3, 1, 0).reshape(taps, cout, cin)
        a = sub.new_zeros(taps, cop, cin8)
        a[:, :cout, :cin] = sub
        for cb in range(cop // CO_BLOCK):
            for k0 in range(0, cin8, CHUNK):
                blk = a[:, cb * CO_BLOCK:(cb + 1) * CO_BLOCK, k0:k0 + CHUNK]
                ks = blk.shape[2] // 8
                parts.append(blk.reshape(taps, 4, 2, 8, ks, 2, 4).permute(0, 4, 1, 3, 6, 5, 2).reshape(-1))
        off += taps * cop * cin8
    packed = torch.cat(parts) if parts else w.new_zeros(1)
    return round_tf32(packed), offsets


def staging_bytes(x: torch.Tensor, staging: int) -> int:
    """The x staging that sp_conv runs for a requested one: 16-byte copies need Win % 4 == 0 and
    x 16-byte aligned, else 4."""
    return 16 if staging == 16 and x.shape[3] % 4 == 0 and x.data_ptr() % 16 == 0 else 4


def phase_table(plist, offsets, hout: int, wout: int, stride) -> list[int]:
    """sp_conv's per-phase arguments: rh, rw, th, tw, ch, cw, the phase's output rows and columns,
    and its offset into the packed weights."""
    sh, sw = stride
    return [v for p, off in zip(plist, offsets)
            for v in (p.rh, p.rw, p.taps_h, p.taps_w, p.ch, p.cw, len(range(p.rh, hout, sh)),
                      len(range(p.rw, wout, sw)), off)]


@functools.lru_cache(maxsize=None)
def extension(ablate: int = 0):
    """The built extension (built on first use: the CPU tests import the packing alone). ablate:
    sphase.cu's SP_ABLATE bits, for tools/ablate_sp.py; 0 (every stage) in the solutions."""
    return load_inline(
        name="ct2d_fused_sphase" + (f"_ablate{ablate}" if ablate else ""),
        cpp_sources=_DECL,
        cuda_sources=library_source("sphase.cu"),
        functions=["sp_conv"],
        extra_include_paths=[str(FAST_DIR)],
        extra_cuda_cflags=["-O3", "-std=c++17"] + ([f"-DSP_ABLATE={ablate}"] if ablate else []),
    )
