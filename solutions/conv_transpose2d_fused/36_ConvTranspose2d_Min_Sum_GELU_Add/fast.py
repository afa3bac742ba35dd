"""36: ConvTranspose2d, min over channels, sum over H, GELU, + bias: the convolution by the fast
library (stride 2: the phase kernel), then one pass over its output (ct2d_tails.py,
min_sum_gelu_add: per column, the channels' minimum summed over row ranges, then GELU and the
bias on the N x W sums). TF32 class."""
import sys
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from ct2d_fused import FastConv  # noqa: E402
from ct2d_tails import tails  # noqa: E402

PRECISIONS = ("fp32",)
DEVICES = ("cuda",)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, bias_shape):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride, padding,
                                                 output_padding)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.fast = FastConv(self.conv_transpose)

    def forward(self, x):
        return tails.min_sum_gelu_add(self.fast(x), self.bias.detach().reshape(1).contiguous())
