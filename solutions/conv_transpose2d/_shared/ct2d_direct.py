"""Shared Python side of the direct ConvTranspose2d solutions: loads direct.cu once through
load_inline and provides a module whose parameters are created exactly as nn.ConvTranspose2d
creates them (so matched-seed construction gives the reference's weights)."""
from pathlib import Path

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_HERE = Path(__file__).resolve().parent

CPP_DECL = """
torch::Tensor conv_transpose2d_direct(torch::Tensor x, torch::Tensor w, c10::optional<torch::Tensor> bias,
                                      int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                                      int64_t outpad_h, int64_t outpad_w, int64_t dil_h, int64_t dil_w,
                                      int64_t groups);
"""

_ext = load_inline(
    name="conv_transpose2d_direct",
    cpp_sources=CPP_DECL,
    cuda_sources=(_HERE / "direct.cu").read_text(),
    functions=["conv_transpose2d_direct"],
    extra_cuda_cflags=["-O3"],
)


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


class DirectConvTranspose2d(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0,
                 dilation=1, groups=1, bias=False):
        super().__init__()
        self.conv_transpose2d = nn.ConvTranspose2d(
            in_channels, out_channels, _pair(kernel_size), stride=stride, padding=padding,
            output_padding=output_padding, groups=groups, bias=bias, dilation=dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv_transpose2d
        (sh, sw), (ph, pw), (oph, opw), (dh, dw) = c.stride, c.padding, c.output_padding, c.dilation
        return _ext.conv_transpose2d_direct(x, c.weight, c.bias, sh, sw, ph, pw, oph, opw, dh, dw, c.groups)
