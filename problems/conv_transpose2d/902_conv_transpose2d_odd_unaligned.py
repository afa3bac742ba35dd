import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Not in KernelBench: odd, unaligned sizes (3 input channels, a 7x13 input, odd batch and kernel).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: tuple, stride: tuple = (1, 1), padding: tuple = (0, 0), output_padding: tuple = (0, 0), dilation: tuple = (1, 1), groups: int = 1, bias: bool = False):
        super(Model, self).__init__()
        self.conv_transpose2d = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding, output_padding=output_padding, dilation=dilation, groups=groups, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv_transpose2d(x)


# Test code
batch_size = 5
in_channels = 3
out_channels = 7
kernel_size = (5, 3)
height_in = 7
width_in = 13
stride = (3, 2)
padding = (2, 1)
output_padding = (1, 0)
dilation = (1, 2)
groups = 1
bias = True


def get_inputs():
    x = torch.rand(batch_size, in_channels, height_in, width_in)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, output_padding, dilation, groups, bias]
