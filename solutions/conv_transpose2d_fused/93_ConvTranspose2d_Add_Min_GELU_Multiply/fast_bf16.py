"""93 in bf16: ConvTranspose2d, + a, min(., 0), GELU, x m. The fp32 solution's path (fast.py:
ct2d_fused.SubpixelConv, one stride-1 convolution of the four phases with z in fp32, then split.cu's
pass with the bias and add_min_gelu_scale, GELU's exact erf form) on x widened to fp32 (exact) and
the model's bf16 weight widened (exact), so the products are the fp32 solution's; the pass stores y
in bf16, each fp32 result rounded once (the epilogue cancels near a sum of -0.5: on sums rounded to
bf16 first it failed the class, rel L2 0.05). bf16 class."""
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
    def __init__(self, in_channels, out_channels, kernel_size, stride, add_value, multiply_value):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride)
        self.add_value = add_value
        self.multiply_value = multiply_value
        self.fast = SubpixelConv(self.conv_transpose, "add_min_gelu_scale", (add_value, multiply_value),
                                 out_dtype=torch.bfloat16)

    def forward(self, x):
        return self.fast(x.float())
