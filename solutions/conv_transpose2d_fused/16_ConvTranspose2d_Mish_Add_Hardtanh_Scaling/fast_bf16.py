"""16 in bf16: ConvTranspose2d, Mish, + a, Hardtanh(-1, 1), x s. The convolution on the fast library in
bf16 (ct2d_fused.FastConvBF16: fast_bf16's kernels), the tail folded into its call
(fast/epilogue.cuh, mish_add_hardtanh_scale: in fp32 on the sums, before the one rounding to bf16:
the library runs a bf16 call with an epilogue on its fp32 rule). bf16 class."""
import sys
from pathlib import Path

import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from ct2d_fused import FastConvBF16  # noqa: E402

PRECISIONS = ("bf16",)
DEVICES = ("cuda",)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, add_value, scale):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride, padding,
                                                 output_padding)
        self.add_value = add_value
        self.scale = scale
        self.fast = FastConvBF16(self.conv_transpose, "mish_add_hardtanh_scale", (add_value, scale))

    def forward(self, x):
        return self.fast(x)
