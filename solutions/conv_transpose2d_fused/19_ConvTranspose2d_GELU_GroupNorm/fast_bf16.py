"""19 in bf16: ConvTranspose2d, GELU, GroupNorm. The convolution on the fast library in bf16
(ct2d_fused.FastConvBF16: fast_bf16's kernels) with GELU folded into its call (fast/epilogue.cuh,
gelu), then the group norm as the reference writes it, PyTorch's operator on bf16 (not yet fused in
bf16). bf16 class."""
import sys
from pathlib import Path

import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from ct2d_fused import FastConvBF16  # noqa: E402

PRECISIONS = ("bf16",)
DEVICES = ("cuda",)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, groups, num_groups):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride)
        self.group_norm = nn.GroupNorm(num_groups=num_groups, num_channels=out_channels)
        self.fast = FastConvBF16(self.conv_transpose, "gelu")

    def forward(self, x):
        return self.group_norm(self.fast(x))
