"""2: ConvTranspose2d, + bias, clamp(0, 1), x s, clamp(0, 1), / s, in one kernel: the strided
convolution as one implicit GEMM per output phase on TF32 mma.sync (../_shared/sphase.cu,
ct2d_fused.StridedConv), the extra bias folded into its bias vector and the clamps and scalings
applied in its store (fast/epilogue.cuh, clamp_scale); the output written once. TF32 class."""
import sys
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from ct2d_fused import StridedConv  # noqa: E402
from ct2d_sphase import extension  # noqa: E402

PRECISIONS = ("fp32",)
DEVICES = ("cuda",)

extension()   # sphase.cu, built at import: the harness's build step compiles it with the others


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, bias_shape,
                 scaling_factor):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, output_padding=output_padding)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scaling_factor = scaling_factor
        self.fast = StridedConv(self.conv_transpose, "clamp_scale", (scaling_factor, 0.0))

    def forward(self, x):
        return self.fast(x, extra_bias=self.bias)
