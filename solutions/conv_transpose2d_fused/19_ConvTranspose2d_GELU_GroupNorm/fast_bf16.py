"""19 in bf16: ConvTranspose2d, GELU, GroupNorm. The fp32 solution's path (fast.py:
ct2d_fused.FastConv, the library's stride-1 implicit GEMM, then ct2d_tails.py's gelu_group_norm) on
x widened to fp32 (exact) and the model's bf16 weight widened (exact), so the products are the fp32
solution's; the result rounded once to bf16 (a pass of its own: the tail writes fp32). bf16 class."""
import sys
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from ct2d_fused import FastConv  # noqa: E402
from ct2d_tails import tails  # noqa: E402

PRECISIONS = ("bf16",)
DEVICES = ("cuda",)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, groups, num_groups):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride)
        self.group_norm = nn.GroupNorm(num_groups=num_groups, num_channels=out_channels)
        self.fast = FastConv(self.conv_transpose)

    def forward(self, x):
        gn = self.group_norm
        y = tails.gelu_group_norm(self.fast(x.float()), gn.num_groups, gn.weight.detach().float(),
                                  gn.bias.detach().float(), gn.eps)
        return y.to(x.dtype)
