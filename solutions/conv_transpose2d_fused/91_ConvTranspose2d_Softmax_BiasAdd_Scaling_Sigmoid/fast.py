"""91: ConvTranspose2d, softmax over channels, + bias, x s, sigmoid: the strided convolution as one
implicit GEMM per output phase on TF32 mma.sync (../_shared/sphase.cu, ct2d_fused.StridedConv),
then one pass over its output in place (ct2d_tails.py, softmax_bias_scale_sigmoid: 64 pixels'
channels at a time in shared memory, read once and written once). TF32 class."""
import sys
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from ct2d_fused import StridedConv  # noqa: E402
from ct2d_sphase import extension  # noqa: E402
from ct2d_tails import tails  # noqa: E402

PRECISIONS = ("fp32",)
DEVICES = ("cuda",)

extension()   # sphase.cu, built at import: the harness's build step compiles it with the others


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, bias_shape,
                 scaling_factor):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, output_padding=output_padding)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scaling_factor = scaling_factor
        self.fast = StridedConv(self.conv_transpose)

    def forward(self, x):
        return tails.softmax_bias_scale_sigmoid(self.fast(x), self.bias.detach().reshape(-1).contiguous(),
                                                self.scaling_factor)
