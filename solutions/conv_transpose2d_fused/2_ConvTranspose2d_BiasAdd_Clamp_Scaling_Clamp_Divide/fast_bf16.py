"""2 in bf16: ConvTranspose2d, + bias, clamp, x s, clamp, / s. The convolution on the fast library in
bf16 (ct2d_fused.FastConvBF16: fast_bf16's kernels), the extra bias and the tail folded into its
call (fast/epilogue.cuh, clamp_scale: in fp32 on the sums, before the one rounding to bf16: the
library runs a bf16 call with an epilogue on its fp32 rule). bf16 class."""
import sys
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from ct2d_fused import FastConvBF16  # noqa: E402

PRECISIONS = ("bf16",)
DEVICES = ("cuda",)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, bias_shape,
                 scaling_factor):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, output_padding=output_padding)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scaling_factor = scaling_factor
        self.fast = FastConvBF16(self.conv_transpose, "clamp_scale", (scaling_factor, 0.0))

    def forward(self, x):
        return self.fast(x, extra_bias=self.bias)
