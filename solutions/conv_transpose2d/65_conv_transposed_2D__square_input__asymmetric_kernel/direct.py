"""Direct (gather) CUDA kernel: the simple, general, correct baseline.
The CUDA code lives once in ../_shared/direct.cu (loaded by ../_shared/ct2d_direct.py)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_shared"))
from ct2d_direct import DirectConvTranspose2d  # noqa: E402


PRECISIONS = ("fp32",)  # fp32 runs; fast_bf16.py is the bf16 one


class ModelNew(DirectConvTranspose2d):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1, bias=False):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding, output_padding=output_padding, groups=groups, bias=bias)
