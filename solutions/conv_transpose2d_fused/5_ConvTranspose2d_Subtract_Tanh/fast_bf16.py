"""5 in bf16: ConvTranspose2d, - bias, tanh. The convolution on the fast library in bf16
(ct2d_fused.FastConvBF16: fast_bf16's kernels), the extra bias (subtracted) and tanh folded into its
call (fast/epilogue.cuh, tanh: in fp32 on the sums, before the one rounding to bf16, or as a pass
over the bf16 output). bf16 class."""
import sys
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from ct2d_fused import FastConvBF16  # noqa: E402

PRECISIONS = ("bf16",)
DEVICES = ("cuda",)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape, stride=2, padding=1, output_padding=1):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, output_padding=output_padding)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.fast = FastConvBF16(self.conv_transpose, "tanh", sign=-1.0)

    def forward(self, x):
        return self.fast(x, extra_bias=self.bias)
