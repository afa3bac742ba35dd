"""93 in bf16: ConvTranspose2d, + a, min(., 0), GELU, x m. The convolution on the fast library in bf16
(ct2d_fused.FastConvBF16: fast_bf16's kernels), the tail folded into its call (fast/epilogue.cuh,
add_min_gelu_scale, GELU's exact erf form: in fp32 on the sums, before the one rounding to bf16:
the library runs a bf16 call with an epilogue on its fp32 rule). bf16 class."""
import sys
from pathlib import Path

import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from ct2d_fused import FastConvBF16  # noqa: E402

PRECISIONS = ("bf16",)
DEVICES = ("cuda",)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, add_value, multiply_value):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride)
        self.add_value = add_value
        self.multiply_value = multiply_value
        self.fast = FastConvBF16(self.conv_transpose, "add_min_gelu_scale", (add_value, multiply_value))

    def forward(self, x):
        return self.fast(x)
