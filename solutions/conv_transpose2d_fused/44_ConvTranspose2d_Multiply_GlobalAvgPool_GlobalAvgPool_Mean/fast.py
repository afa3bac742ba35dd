"""44: ConvTranspose2d, x multiplier, two global average pools: the output is the channels'
means times the multiplier, and the mean of a transposed convolution over all its positions is
exact algebra on sums of x and of the weight (../_shared/ct2d_means.py), in two kernels (means.cu:
x's sums over each tap's window of rows and columns in one pass over x, then the contraction of
16 x 576 x 128 with the bias and the multiplier), no convolution. fp32 class (fp32 sums of fp32
data)."""
import sys
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from ct2d_means import channel_means_fused, extension  # noqa: E402

PRECISIONS = ("fp32",)
DEVICES = ("cuda",)

extension()   # means.cu, built at import: the harness's build step compiles it


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, multiplier):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, output_padding=output_padding)
        self.multiplier = multiplier

    def forward(self, x):
        means = channel_means_fused(x, self.conv_transpose, self.multiplier)   # [n, co], times the multiplier
        return means[:, :, None, None]                                          # the second mean is of one value
