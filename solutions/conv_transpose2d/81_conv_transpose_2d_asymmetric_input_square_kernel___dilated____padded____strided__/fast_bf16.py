"""bf16 runs only (--precision bf16): the fast kernels (../_shared/fast/, TF32 class) on x and
the weights widened to fp32, whose products are exact for bf16 values; the output rounded once to
bf16. Loaded by ../_shared/ct2d_fast.py."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from ct2d_fast import FastConvTranspose2dBF16  # noqa: E402

PRECISIONS = ("bf16",)


class ModelNew(FastConvTranspose2dBF16):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, bias=False):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding, dilation=dilation, bias=bias)
