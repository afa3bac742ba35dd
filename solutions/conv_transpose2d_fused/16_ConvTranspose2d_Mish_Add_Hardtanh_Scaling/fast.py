"""16: ConvTranspose2d, Mish, + a, Hardtanh(-1, 1), x s, in one kernel: the strided convolution as
one implicit GEMM per output phase on TF32 mma.sync (../_shared/sphase.cu, ct2d_fused.StridedConv)
with the tail in its store (fast/epilogue.cuh, mish_add_hardtanh_scale; softplus with PyTorch's
threshold of 20); the output written once. TF32 class."""
import sys
from pathlib import Path

import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from ct2d_fused import StridedConv  # noqa: E402
from ct2d_sphase import extension  # noqa: E402

PRECISIONS = ("fp32",)
DEVICES = ("cuda",)

extension()   # sphase.cu, built at import: the harness's build step compiles it with the others


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, add_value, scale):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride, padding,
                                                 output_padding)
        self.add_value = add_value
        self.scale = scale
        self.fast = StridedConv(self.conv_transpose, "mish_add_hardtanh_scale", (add_value, scale))

    def forward(self, x):
        return self.fast(x)
