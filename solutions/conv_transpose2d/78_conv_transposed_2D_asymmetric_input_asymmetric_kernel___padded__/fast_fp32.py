"""fp32-class variant of fast.py: every kernel's products as 3xTF32 (hi/lo split operands, three
TF32 MMAs per product) for fp32 accuracy. CUDA code in ../_shared/fast/."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from ct2d_fast import FastConvTranspose2dFP32  # noqa: E402


PRECISIONS = ("fp32",)  # fp32 runs; fast_bf16.py is the bf16 one


class ModelNew(FastConvTranspose2dFP32):
    def __init__(self, in_channels, out_channels, kernel_size, stride=(1, 1), padding=(0, 0), bias=False):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=bias)
