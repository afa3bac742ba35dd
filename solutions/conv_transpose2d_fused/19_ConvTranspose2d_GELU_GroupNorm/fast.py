"""19: ConvTranspose2d, GELU, GroupNorm: the convolution by the fast library (stride 1: its
implicit GEMM), then one kernel over its output (ct2d_tails.py, gelu_group_norm: each group's
sums of GELU(v) and of its square, then, a few groups later while the group is still in L2, the
normalization, GELU recomputed, in place; y read from DRAM once). TF32 class."""
import sys
from pathlib import Path

import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from ct2d_fused import FastConv  # noqa: E402
from ct2d_tails import tails  # noqa: E402

PRECISIONS = ("fp32",)
DEVICES = ("cuda",)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, groups, num_groups):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride)
        self.group_norm = nn.GroupNorm(num_groups=num_groups, num_channels=out_channels)
        self.fast = FastConv(self.conv_transpose)

    def forward(self, x):
        gn = self.group_norm
        return tails.gelu_group_norm(self.fast(x), gn.num_groups, gn.weight.detach(), gn.bias.detach(), gn.eps)
