"""11: ConvTranspose2d, BatchNorm2d (training: the batch's statistics, and the running statistics
updated as PyTorch updates them), tanh, MaxPool2d(2, 2), GroupNorm: the convolution by the fast
library (stride 1: its implicit GEMM), then ct2d_tails.py's batch_norm_tanh_pool_group_norm: the
channels' sums in one pass over the output, the normalization, tanh and pool in a second (which
writes the pooled quarter and its groups' sums), the group norm over the pooled quarter in place.
TF32 class."""
import sys
from pathlib import Path

import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from ct2d_fused import FastConv  # noqa: E402
from ct2d_tails import tails  # noqa: E402

PRECISIONS = ("fp32",)
DEVICES = ("cuda",)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, groups, num_groups):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding)
        self.batch_norm = nn.BatchNorm2d(out_channels)
        self.tanh = nn.Tanh()
        self.max_pool = nn.MaxPool2d(kernel_size=2, stride=2)
        self.group_norm = nn.GroupNorm(num_groups=num_groups, num_channels=out_channels)
        self.fast = FastConv(self.conv_transpose)

    def forward(self, x):
        bn, gn = self.batch_norm, self.group_norm
        if not (bn.training and bn.track_running_stats):
            raise NotImplementedError("fast: BatchNorm2d in training mode with running statistics, as the problem builds it")
        bn.num_batches_tracked.add_(1)
        momentum = bn.momentum if bn.momentum is not None else 1.0 / float(bn.num_batches_tracked)
        return tails.batch_norm_tanh_pool_group_norm(
            self.fast(x), bn.weight.detach(), bn.bias.detach(), bn.running_mean, bn.running_var, momentum, bn.eps,
            gn.num_groups, gn.weight.detach(), gn.bias.detach(), gn.eps)
