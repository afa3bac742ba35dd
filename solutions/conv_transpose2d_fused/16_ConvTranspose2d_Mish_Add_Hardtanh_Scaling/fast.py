"""16: ConvTranspose2d, Mish, + a, Hardtanh(-1, 1), x s: the stride-2 convolution as ONE stride-1
convolution whose 256 output channels are the four output phases' 64 side by side (2x2
sub-kernels, the 3x3 kernel's smaller phases zero-padded), on the library's wgmma kernel with one
fp16 product, then one pass that puts each phase's values in place with the bias and the tail
(ct2d_fused.SubpixelConv, ../_shared/split.cu; fast/epilogue.cuh, mish_add_hardtanh_scale; softplus
with PyTorch's threshold of 20). Problem 2's convolution, whose kernels take 3.26 ms on the H200
against 5.10 for the phase-GEMM kernel (docs/perf-notes.md). TF32 class."""
import sys
from pathlib import Path

import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from ct2d_fused import SubpixelConv  # noqa: E402
from ct2d_split import extension  # noqa: E402

PRECISIONS = ("fp32",)
DEVICES = ("cuda",)

extension()   # split.cu, built at import (the library with it, through ct2d_fused): the harness's build step compiles them


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, add_value, scale):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride, padding,
                                                 output_padding)
        self.add_value = add_value
        self.scale = scale
        self.fast = SubpixelConv(self.conv_transpose, "mish_add_hardtanh_scale", (add_value, scale))

    def forward(self, x):
        return self.fast(x)
