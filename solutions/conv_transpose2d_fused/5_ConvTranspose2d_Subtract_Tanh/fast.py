"""5: ConvTranspose2d, - bias, tanh: the stride-2 convolution as ONE stride-1 convolution whose 256
output channels are the four output phases' 64 side by side (2x2 sub-kernels of the 4x4 kernel),
on the library's wgmma kernel with one fp16 product, written in fp16 (z_fp16: tanh saturates, so
a value past fp16's range, +-inf there, gives what fp32's would), then one pass that puts each
phase's values in place with the bias (the extra one subtracted in it) and tanh, 16-byte stores
(ct2d_fused.SubpixelConv, ../_shared/split.cu; fast/epilogue.cuh). TF32 class; measured in
docs/perf-notes.md ("z in fp16")."""
import sys
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from ct2d_fused import SubpixelConv  # noqa: E402
from ct2d_split import extension  # noqa: E402

PRECISIONS = ("fp32",)
DEVICES = ("cuda",)

extension()   # split.cu, built at import (the library with it, through ct2d_fused): the harness's build step compiles them


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape, stride=2, padding=1, output_padding=1):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, output_padding=output_padding)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.fast = SubpixelConv(self.conv_transpose, "tanh", sign=-1.0, z_fp16=True)

    def forward(self, x):
        return self.fast(x, extra_bias=self.bias)
