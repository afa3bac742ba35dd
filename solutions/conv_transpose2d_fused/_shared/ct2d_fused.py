"""The fused family's fast path (KernelBench level 2): the conv family's kernel library
(../../conv_transpose2d/_shared/fast/, by its rule, plan() included) called on the solution's own
nn.ConvTranspose2d, with an elementwise epilogue and an extra per-channel bias folded into the
call (fast/epilogue.cuh: the phase kernel applies it in its store; any other route as a pass of
its own). The reductions, pools and normalizations that follow a convolution are ct2d_tails.py's."""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn as nn

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE.parents[1] / "conv_transpose2d" / "_shared"))
from ct2d_fast import EPILOGUES, FastConvTranspose2d  # noqa: E402

__all__ = ["EPILOGUES", "FastConv"]


class FastConv:
    """The fast library's call on an nn.ConvTranspose2d that the solution owns (its parameters stay
    the module's, created as the reference creates them, so matched seeds give the same weights).
    Not a module: it registers nothing, and it looks the parameters up on every call (a move to
    another device may replace them). The packing, the arguments and plan are
    FastConvTranspose2d's own (TF32 class, config 0).

    extra_bias (a call's argument): a parameter broadcast over the output's channels ((C, 1, 1)),
    added (sign 1) or subtracted (sign -1) before the epilogue, folded into the kernels' bias
    vector, which is rebuilt only when either parameter changes."""

    split = FastConvTranspose2d.split
    config = FastConvTranspose2d.config
    _packed_weights = FastConvTranspose2d._packed_weights
    _args = FastConvTranspose2d._args

    def __init__(self, conv: nn.ConvTranspose2d, epilogue: str = "none", epilogue_args=(0.0, 0.0), sign: float = 1.0):
        if epilogue not in EPILOGUES:
            raise ValueError(f"epilogue {epilogue!r}: one of {', '.join(EPILOGUES)}")
        self.conv_transpose2d = conv
        self.epilogue, self.epilogue_args = epilogue, tuple(float(a) for a in epilogue_args)
        self.sign = float(sign)
        self._extra = None
        self._packed = self._packed_key = None
        self._bias_key = self._bias_value = None

    def __call__(self, x: torch.Tensor, extra_bias: torch.Tensor | None = None) -> torch.Tensor:
        self._extra = extra_bias
        return FastConvTranspose2d.forward(self, x)

    def plan(self, x: torch.Tensor, extra_bias: torch.Tensor | None = None):
        self._extra = extra_bias
        return FastConvTranspose2d.plan(self, x)

    def _bias(self):
        conv_bias, extra = self.conv_transpose2d.bias, self._extra
        if extra is None:
            return conv_bias
        key = tuple((t.data_ptr(), t._version) for t in (conv_bias, extra) if t is not None)
        if self._bias_key != key:
            b = self.sign * extra.detach().reshape(-1)
            if conv_bias is not None:
                b = conv_bias.detach() + b
            self._bias_value, self._bias_key = b.float().contiguous(), key
        return self._bias_value
