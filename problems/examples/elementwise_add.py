import torch
import torch.nn as nn


class Model(nn.Module):
    """Adds two tensors elementwise: the classic load_inline example."""

    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


size = 1 << 20


def get_inputs():
    a = torch.randn(4, size // 4)
    b = torch.randn(4, size // 4)
    return [a, b]


def get_init_inputs():
    return []
