"""Fast kernels (../_shared/fast/), TF32 class: the tensor-core implicit GEMM for stride 1 and the
phase kernel's TF32 tensor-core variant for strided, grouped or small shapes (fp32 FMAs where that
does not fit). Loaded by ../_shared/ct2d_fast.py."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from ct2d_fast import FastConvTranspose2d  # noqa: E402


PRECISIONS = ("fp32",)  # fp32 runs; fast_bf16.py is the bf16 one


class ModelNew(FastConvTranspose2d):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1, bias=False):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding, output_padding=output_padding, groups=groups, bias=bias)
