"""42: ConvTranspose2d, global average pool, + bias, logsumexp over channels, sum, x 10: the
pool is the channels' means, and the mean of a transposed convolution over all its positions is
exact algebra on sums of x and of the weight (../_shared/ct2d_means.py; here stride 1 and no
padding, so every tap of every input lands inside and it is one sum of x per channel), in two
kernels (means.cu: x's window sums in one pass over x, 1 GiB at the benchmark shape, then the
contraction of 16 x 576 x 128 with the bias), no convolution; the logsumexp over 16 x 128 values
in PyTorch. fp32 class (fp32 sums of fp32 data)."""
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
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        means = channel_means_fused(x, self.conv_transpose) + self.bias.reshape(1, -1)   # [n, co]
        return torch.logsumexp(means, dim=1, keepdim=True) * 10.0                  # [n, 1]
