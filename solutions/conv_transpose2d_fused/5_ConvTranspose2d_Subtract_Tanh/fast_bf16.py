"""5 in bf16: ConvTranspose2d, - bias, tanh. The fp32 solution's path (fast.py:
ct2d_fused.SubpixelConv, one stride-1 convolution of the four phases with z in fp16, then split.cu's
pass with the bias and tanh) on x widened to fp32 (exact) and the model's bf16 weight widened
(exact), so the products are the fp32 solution's; the pass stores y in bf16, each fp32 result
rounded once. bf16 class."""
import sys
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from ct2d_fused import SubpixelConv  # noqa: E402
from ct2d_split import extension  # noqa: E402

PRECISIONS = ("bf16",)
DEVICES = ("cuda",)

extension()   # split.cu, built at import (the library with it, through ct2d_fused): the harness's build step compiles them


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape, stride=2, padding=1, output_padding=1):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, output_padding=output_padding)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.fast = SubpixelConv(self.conv_transpose, "tanh", sign=-1.0, z_fp16=True, out_dtype=torch.bfloat16)

    def forward(self, x):
        return self.fast(x.float(), extra_bias=self.bias)
