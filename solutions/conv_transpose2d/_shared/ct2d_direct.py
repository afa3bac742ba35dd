"""Shared Python side of the direct ConvTranspose2d solutions: loads direct.cu once through
load_inline and provides a module whose parameters are created exactly as nn.ConvTranspose2d
creates them (so matched-seed construction gives the reference's weights)."""
from pathlib import Path

import torch
from ct2d_params import ConvTranspose2dParams
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


class DirectConvTranspose2d(ConvTranspose2dParams):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv_transpose2d
        (sh, sw), (ph, pw), (oph, opw), (dh, dw) = c.stride, c.padding, c.output_padding, c.dilation
        return _ext.conv_transpose2d_direct(x, c.weight, c.bias, sh, sw, ph, pw, oph, opw, dh, dw, c.groups)
