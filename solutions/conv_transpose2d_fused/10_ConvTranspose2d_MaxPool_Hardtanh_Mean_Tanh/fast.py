"""10: ConvTranspose2d, MaxPool2d, Hardtanh, mean over (H, W), tanh: the convolution by the fast
library (stride 1: its implicit GEMM), then one pass over its output (ct2d_tails.py,
pool_hardtanh_mean_tanh: a block per plane pools, clamps and sums it). TF32 class."""
import sys
from pathlib import Path

import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from ct2d_fused import FastConv  # noqa: E402
from ct2d_tails import tails  # noqa: E402

PRECISIONS = ("fp32",)
DEVICES = ("cuda",)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, maxpool_kernel_size, maxpool_stride,
                 hardtanh_min, hardtanh_max):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding)
        self.maxpool = nn.MaxPool2d(kernel_size=maxpool_kernel_size, stride=maxpool_stride)
        self.hardtanh = nn.Hardtanh(min_val=hardtanh_min, max_val=hardtanh_max)
        self.fast = FastConv(self.conv_transpose)

    def forward(self, x):
        pool = self.maxpool
        k, s = (v if isinstance(v, int) else v[0] for v in (pool.kernel_size, pool.stride))
        return tails.pool_hardtanh_mean_tanh(self.fast(x), k, s, self.hardtanh.min_val, self.hardtanh.max_val)
