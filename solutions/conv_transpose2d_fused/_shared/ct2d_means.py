"""Exact algebra for a ConvTranspose2d whose output is only ever averaged over all positions
(KernelBench level 2: 42, 44). No convolution is computed.

The transposed convolution adds x[n, ci, ih, iw] * w[ci, co, kh, kw] into the output position
(ih*s - p + kh*d, iw*s - p + kw*d) where that lies inside the output (the rest is cropped by
the padding and never written past output_padding). So the sum of output channel co over all
positions is

    Ho*Wo*b[co] + sum_{ci, kh, kw} w[ci, co, kh, kw] * S[n, ci, kh, kw],

where S[n, ci, kh, kw] is the sum of x[n, ci] over the rows ih whose tap kh lands inside
(ih*s - p + kh*d in [0, Ho)) and the columns iw whose tap kw does. Those rows are one interval
per kh, all of them but a few at each border; so S is the total minus the border rows' and
columns' sums plus their corners (inclusion-exclusion), from at most two reductions of x (its row sums
and its column sums) and a gather of the few corner elements. groups = 1."""
from __future__ import annotations

import functools
from pathlib import Path

import torch


def output_size(size: int, k: int, s: int, p: int, op: int, d: int) -> int:
    return (size - 1) * s - 2 * p + d * (k - 1) + op + 1


def _excluded(size: int, k: int, s: int, p: int, op: int, d: int) -> list[set[int]]:
    """Per tap: the input indices whose output position for that tap falls outside the output."""
    out = output_size(size, k, s, p, op, d)
    return [{i for i in range(size) if not 0 <= i * s - p + t * d < out} for t in range(k)]


_MASKS: dict[tuple, tuple] = {}


def _borders(size: int, k: int, s: int, p: int, op: int, d: int, like: torch.Tensor):
    """(border indices as a tensor, [taps, len(border)] mask: 1 where that index is excluded for that tap),
    made once per geometry, dtype and device (no host-to-device copy in a later call)."""
    key = (size, k, s, p, op, d, like.dtype, like.device)
    if key not in _MASKS:
        excluded = _excluded(size, k, s, p, op, d)
        border = sorted(set().union(*excluded))
        mask = torch.tensor([[1.0 if i in ex else 0.0 for i in border] for ex in excluded], dtype=like.dtype,
                            device=like.device)
        _MASKS[key] = (torch.tensor(border, dtype=torch.long, device=like.device), mask)
    return _MASKS[key]


def window_sums(x: torch.Tensor, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int],
                output_padding: tuple[int, int], dilation: tuple[int, int]) -> torch.Tensor:
    """S[n, ci, kh, kw] (above), in x's dtype."""
    n, c, h, w = x.shape
    border_h, mh = _borders(h, kernel[0], stride[0], padding[0], output_padding[0], dilation[0], x)   # mh: [kh, |Bh|]
    border_w, mw = _borders(w, kernel[1], stride[1], padding[1], output_padding[1], dilation[1], x)   # mw: [kw, |Bw|]
    # each reduction reads all of x: only those the borders need (none for stride 1, no padding)
    rows = x.sum(dim=3) if len(border_h) else None                           # [n, c, h]
    cols = x.sum(dim=2) if len(border_w) else None                           # [n, c, w]
    if rows is not None:                                                     # total: [n, c]
        total = rows.sum(dim=2)
    elif cols is not None:
        total = cols.sum(dim=2)
    else:
        total = x.sum(dim=(2, 3))
    s = total[:, :, None, None].expand(n, c, kernel[0], kernel[1]).clone()
    if len(border_h):
        s -= (rows[:, :, None, border_h] * mh).sum(dim=3)[:, :, :, None]
    if len(border_w):
        s -= (cols[:, :, None, border_w] * mw).sum(dim=3)[:, :, None, :]
    if len(border_h) and len(border_w):
        corner = x[:, :, border_h][:, :, :, border_w]                         # [n, c, |Bh|, |Bw|]
        by_h = (corner[:, :, None] * mh[:, :, None]).sum(dim=3)              # [n, c, kh, |Bw|]
        s += (by_h[:, :, :, None] * mw).sum(dim=4)                            # [n, c, kh, kw]
    return s


def channel_means(x: torch.Tensor, conv: torch.nn.ConvTranspose2d) -> torch.Tensor:
    """mean over (H, W) of conv(x): [n, co], exact algebra (no convolution)."""
    assert conv.groups == 1 and conv.padding_mode == "zeros"
    kernel, stride, padding = conv.kernel_size, conv.stride, conv.padding
    output_padding, dilation = conv.output_padding, conv.dilation
    s = window_sums(x, kernel, stride, padding, output_padding, dilation)     # [n, ci, kh, kw]
    ho = output_size(x.shape[2], kernel[0], stride[0], padding[0], output_padding[0], dilation[0])
    wo = output_size(x.shape[3], kernel[1], stride[1], padding[1], output_padding[1], dilation[1])
    weight = conv.weight                                                      # [ci, co, kh, kw]
    # the contraction over (ci, kh, kw) as products and a sum (elementwise kernels, no GEMM call)
    sums = (s.reshape(s.shape[0], -1, 1) * weight.permute(0, 2, 3, 1).reshape(1, -1, weight.shape[1])).sum(dim=1)
    means = sums / (ho * wo)
    return means + conv.bias if conv.bias is not None else means


# ---- The same algebra in two kernels (means.cu): one pass over x, then the contraction (42's and
# 44's path; tests/test_gpu_fused.py holds it to float64). The torch version above is bound by
# launching its dozen operators (44: 0.64-0.74 ms for 67 MB of x).

@functools.lru_cache(maxsize=None)
def tap_windows(size: int, k: int, s: int, p: int, op: int, d: int) -> tuple[tuple[int, int], ...]:
    """Per tap t: the input indices i whose output position i*s - p + t*d lies inside the output,
    as one interval [lo, hi) (possibly empty): the complement of _excluded's set for t."""
    out = output_size(size, k, s, p, op, d)
    windows = []
    for t in range(k):
        lo = max(0, -((t * d - p) // s))                 # ceil((p - t*d) / s)
        hi = min(size, (out - 1 + p - t * d) // s + 1)   # floor((out - 1 + p - t*d) / s) + 1
        windows.append((lo, max(lo, hi)))
    return tuple(windows)   # cached per geometry: no Python loop per call


@functools.lru_cache(maxsize=None)
def extension():
    """means.cu, built on first use."""
    from torch.utils.cpp_extension import load_inline
    return load_inline(
        name="ct2d_fused_means",
        cpp_sources="""torch::Tensor channel_means_k(torch::Tensor x, torch::Tensor wt, c10::optional<torch::Tensor> bias,
            std::vector<int64_t> windows, int64_t kh, int64_t kw, int64_t area, double alpha);""",
        cuda_sources=(Path(__file__).resolve().parent / "means.cu").read_text(),
        functions=["channel_means_k"],
        extra_cuda_cflags=["-O3", "-std=c++17"],
    )


def channel_means_fused(x: torch.Tensor, conv: torch.nn.ConvTranspose2d, alpha: float = 1.0) -> torch.Tensor:
    """alpha * channel_means(x, conv) in two kernels (means.cu): [n, co], fp32, for an fp32 or bf16
    CUDA x (bf16: read as it is, the weight and bias widened, the sums in fp32); any other x:
    channel_means's PyTorch operators."""
    assert conv.groups == 1 and conv.padding_mode == "zeros"
    if not (x.is_cuda and x.dtype in (torch.float32, torch.bfloat16) and x.dim() == 4):
        return channel_means(x, conv) * alpha
    (kh, kw), (sh, sw), (ph, pw) = conv.kernel_size, conv.stride, conv.padding
    (oph, opw), (dh, dw) = conv.output_padding, conv.dilation
    h, w = x.shape[2], x.shape[3]
    windows = [v for lo_hi in tap_windows(h, kh, sh, ph, oph, dh) + tap_windows(w, kw, sw, pw, opw, dw) for v in lo_hi]
    area = output_size(h, kh, sh, ph, oph, dh) * output_size(w, kw, sw, pw, opw, dw)
    weight = conv.weight.detach()
    key = (weight.data_ptr(), weight._version, tuple(weight.shape), weight.device)
    cached = getattr(conv, "_kb_means_wt", None)   # the weight as [ci * kh * kw, co], per weight version
    if cached is None or cached[0] != key:
        cached = (key, weight.permute(0, 2, 3, 1).reshape(-1, weight.shape[1]).float().contiguous())
        conv._kb_means_wt = cached
    bias = conv.bias.detach().float() if conv.bias is not None else None   # (fp32: the same tensor)
    return extension().channel_means_k(x.contiguous(), cached[1], bias, windows, kh, kw, area, float(alpha))
