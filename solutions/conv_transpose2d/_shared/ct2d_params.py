"""The parameter-holding base of the shared ConvTranspose2d solutions: an nn.ConvTranspose2d
built exactly as the reference builds it, so matched-seed construction gives the reference's
weights. Subclasses add the forward that calls their own kernels."""
import torch.nn as nn


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


class ConvTranspose2dParams(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0,
                 dilation=1, groups=1, bias=False):
        super().__init__()
        self.conv_transpose2d = nn.ConvTranspose2d(
            in_channels, out_channels, _pair(kernel_size), stride=stride, padding=padding,
            output_padding=output_padding, groups=groups, bias=bias, dilation=dilation)
