"""The fused family's fast path (KernelBench level 2): the conv family's kernel library
(../../conv_transpose2d/_shared/fast/, by its rule, plan() included) called on the solution's own
nn.ConvTranspose2d, with an elementwise epilogue and an extra per-channel bias folded into the
call (fast/epilogue.cuh: the phase kernel applies it in its store; any other route as a pass of
its own). The reductions, pools and normalizations that follow a convolution are ct2d_tails.py's."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn as nn

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))
sys.path.insert(0, str(_HERE.parents[1] / "conv_transpose2d" / "_shared"))
from ct2d_fast import EPILOGUES, FastConvTranspose2d, Plan  # noqa: E402
from ct2d_phases import output_size, phases, subpixel_taps, subpixel_weight  # noqa: E402

_HALF_TYPES = (torch.bfloat16, torch.float16)


def widened(t: torch.Tensor) -> torch.Tensor:
    """t in fp32 where it is a 16-bit float type (exact), else t itself: a bf16 model's weight for
    the fp32 kernels that a bf16 run takes on x widened."""
    return t.float() if t.dtype in _HALF_TYPES else t


__all__ = ["EPILOGUES", "FastConv", "FastConvBF16", "SplitConv", "StridedConv", "SubpixelConv", "channel_block_min",
           "widened"]


def channel_block_min(y: torch.Tensor, block: int = 64) -> torch.Tensor:
    """y's minimum over each block of `block` channels: [N, ceil(C / block), H, W] (what
    StridedConv(channel_min=True) stores, for the paths that write the convolution first)."""
    n, c, h, w = y.shape
    pad = y.new_full((n, -(-c // block) * block - c, h, w), float("inf"))
    return torch.cat([y, pad], dim=1).reshape(n, -1, block, h, w).amin(dim=2)


class FastConv:
    """The fast library's call on an nn.ConvTranspose2d that the solution owns (its parameters stay
    the module's, created as the reference creates them, so matched seeds give the same weights).
    Not a module: it registers nothing, and it looks the parameters up on every call (a move to
    another device may replace them). The packing, the arguments, the bound call and plan are
    FastConvTranspose2d's own (TF32 class, config 0).

    extra_bias (a call's argument): a parameter broadcast over the output's channels ((C, 1, 1)),
    added (sign 1) or subtracted (sign -1) before the epilogue, folded into the kernels' bias
    vector, which is rebuilt only when either parameter changes."""

    split = FastConvTranspose2d.split
    config = FastConvTranspose2d.config
    out_fp16 = FastConvTranspose2d.out_fp16
    _layer = FastConvTranspose2d._layer
    _packed_weights = FastConvTranspose2d._packed_weights
    _static_args = FastConvTranspose2d._static_args
    _args = FastConvTranspose2d._args
    _bound = FastConvTranspose2d._bound  # the library's Bound, made again when an argument's source changes
    __getstate__ = FastConvTranspose2d.__getstate__

    def _bias_sources(self, bias) -> tuple:
        """The layer's bias and a call's extra bias: the bias vector is made from both."""
        return (bias, self._extra)

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
        """The kernels' bias vector: the layer's bias, with the extra one folded in (in fp32), or a
        16-bit bias (a bf16 model's, called on x widened) widened to fp32, once per version."""
        conv_bias, extra = self.conv_transpose2d.bias, self._extra
        if extra is None and (conv_bias is None or conv_bias.dtype not in _HALF_TYPES):
            return conv_bias
        key = tuple((t.data_ptr(), t._version) for t in (conv_bias, extra) if t is not None)
        if self._bias_key != key:
            if extra is None:
                b = conv_bias.detach().float()
            else:
                dt = torch.promote_types(extra.dtype, torch.float32)  # bf16 runs: the sum in fp32, not rounded to bf16
                b = self.sign * extra.detach().reshape(-1).to(dt)
                if conv_bias is not None:
                    b = conv_bias.detach().to(dt) + b
            self._bias_value, self._bias_key = b.float().contiguous(), key
        return self._bias_value


class FastConvBF16(FastConv):
    """The fused family's bf16 runs (--precision bf16): FastConv on a bf16 x, as fast_bf16 calls the
    library (ct2d_fast.FastConvTranspose2dBF16: its bf16 rows, x and y in bf16, the weights and the
    bias widened to fp32, exactly; config 0, the rule). The epilogue and the extra bias are the
    library's as for fp32: the extra bias is folded into the fp32 bias vector, and the epilogue runs
    in fp32 on the sums before their one rounding: a bf16 call with an epilogue takes the fp32 rule
    on x widened (row 6's store or a pass over the fp32 output), rounded once to bf16 (fast/dispatch.cu;
    a pass over a bf16 output lost 93's cancellation: rel L2 0.05 against the class's 0.02)."""

    def __call__(self, x: torch.Tensor, extra_bias: torch.Tensor | None = None) -> torch.Tensor:
        if x.dtype != torch.bfloat16:
            raise TypeError(f"FastConvBF16 is for bf16 runs (--precision bf16); x is {x.dtype}")
        return super().__call__(x, extra_bias)


class SplitConv(FastConv):
    """A strided convolution as its phases' stride-1 convolutions on the library (ct2d_phases.py),
    interleaved by one pass that adds the bias (the extra one folded in) and applies the epilogue
    (split.cu: phase_interleave). Where it does not apply (stride 1, groups, dilation, more
    than 16 phases, not fp32 CUDA) the call is FastConv's. Correct on the H200
    (tests/test_gpu_fused.py) but slower than the phase kernel on 2, 16 and 36 and than
    StridedConv everywhere measured (docs/perf-notes.md, "The fused family"): no solution's path,
    kept as tools/bench_strided.py's third way."""

    def __init__(self, conv: nn.ConvTranspose2d, epilogue: str = "none", epilogue_args=(0.0, 0.0), sign: float = 1.0):
        super().__init__(conv, epilogue, epilogue_args, sign)
        self._phases = self._subs = self._sub_key = None

    def applies(self, x: torch.Tensor) -> bool:
        c = self.conv_transpose2d
        sh, sw = c.stride
        return (x.is_cuda and x.dtype == torch.float32 and c.groups == 1 and tuple(c.dilation) == (1, 1)
                and (sh, sw) != (1, 1) and sh * sw <= 16)

    def _sub_convs(self):
        """The phases and, per phase with taps, a FastConv on its sub-kernel w[:, :, kh0::sh, kw0::sw]
        (stride 1, no padding, no bias). The sub-kernels are refreshed in place when the weight
        changes (copy_ moves their version, so their packing is rebuilt), made anew on another
        device or shape."""
        c = self.conv_transpose2d
        w, (sh, sw) = c.weight.detach(), c.stride
        key = (w.data_ptr(), w._version, tuple(w.shape), w.device)
        if self._sub_key == key:
            return self._phases, self._subs
        fresh = self._sub_key is None or self._sub_key[2:] != key[2:]
        plist = phases(c.kernel_size, c.stride, c.padding)
        if fresh:
            self._subs = [None if not (p.taps_h and p.taps_w) else FastConv(SimpleNamespace(
                weight=w[:, :, p.kh0::sh, p.kw0::sw].contiguous(), bias=None, kernel_size=(p.taps_h, p.taps_w),
                stride=(1, 1), padding=(0, 0), output_padding=(0, 0), dilation=(1, 1), groups=1,
                out_channels=c.out_channels)) for p in plist]
        else:
            for p, sub in zip(plist, self._subs):
                if sub is not None:
                    sub.conv_transpose2d.weight.copy_(w[:, :, p.kh0::sh, p.kw0::sw])
        self._phases, self._sub_key = plist, key
        return plist, self._subs

    def __call__(self, x: torch.Tensor, extra_bias: torch.Tensor | None = None) -> torch.Tensor:
        if not self.applies(x):
            return super().__call__(x, extra_bias)
        from ct2d_split import extension
        self._extra = extra_bias
        c = self.conv_transpose2d
        plist, subs = self._sub_convs()
        empty = x.new_empty(0)
        ys = [sub(x) if sub is not None else empty for sub in subs]
        n, _, h, w = x.shape
        (kh, kw), (sh, sw), (ph, pw), (oph, opw) = c.kernel_size, c.stride, c.padding, c.output_padding
        offsets = [v for p in plist for v in (p.ch, p.cw)]
        a, b = self.epilogue_args
        return extension().phase_interleave(ys, offsets, sh, sw, n, c.out_channels, output_size(h, kh, sh, ph, oph),
                                      output_size(w, kw, sw, pw, opw), self._bias(), EPILOGUES.index(self.epilogue),
                                      a, b)

    def plan(self, x: torch.Tensor, extra_bias: torch.Tensor | None = None) -> Plan:
        if not self.applies(x):
            return super().plan(x, extra_bias)
        plist, subs = self._sub_convs()
        plans = [(p, sub.plan(x)) for p, sub in zip(plist, subs) if sub is not None]
        kernels = sorted({q.kernel for _, q in plans})
        shapes = ", ".join(f"{p.taps_h}x{p.taps_w}" for p, _ in plans)
        return Plan(kernels[0], plans[0][1].file,
                    f"{len(plans)} stride-1 phase convolutions (sub-kernels {shapes}) on {', '.join(kernels)}; "
                    f"then phase_interleave (split.cu) with the bias and epilogue {self.epilogue}",
                    plans[0][1].io)


class StridedConv(FastConv):
    """A strided convolution as one implicit GEMM per output phase on TF32 mma.sync (sphase.cu:
    ct2d_sp), the bias (the extra one folded in) and the epilogue in its store: for KernelBench
    level 2's strided problems (64 input channels, large images), where the library's phase kernel
    computes too slowly (docs/perf-notes.md, "The fused family"). Where it does not apply (stride
    1, groups, dilation, more than 16 phases or 4 taps per phase, not fp32 CUDA) the call is
    FastConv's. The weights are packed once per weight version (ct2d_sphase.pack_weights).

    staging: x's copies into shared memory, 16 bytes per copy where x's width is a multiple of 4
    (else 4), or 4 always. persistent: ct2d_spp, persistent blocks whose chunks go through a
    two-stage ring (staging overlaps the MMAs) instead of ct2d_sp's block per item. Measured on the
    H200 (tools/bench_strided.py, docs/perf-notes.md): 16-byte staging 10-12% faster than 4-byte;
    the persistent kernel 1.8-2x slower (one block per SM at 150 registers hides less than two
    blocks per item), so off."""

    staging = 16
    persistent = False

    def __init__(self, conv: nn.ConvTranspose2d, epilogue: str = "none", epilogue_args=(0.0, 0.0), sign: float = 1.0):
        super().__init__(conv, epilogue, epilogue_args, sign)
        self._sp = self._sp_key = None

    def applies(self, x: torch.Tensor) -> bool:
        from ct2d_sphase import MAX_TAPS
        c = self.conv_transpose2d
        (sh, sw), (kh, kw) = c.stride, c.kernel_size
        return (x.is_cuda and x.dtype == torch.float32 and x.dim() == 4 and c.groups == 1
                and tuple(c.dilation) == (1, 1) and (sh, sw) != (1, 1) and sh * sw <= 16
                and -(-kh // sh) * -(-kw // sw) <= MAX_TAPS)

    def _packed_sp(self):
        from ct2d_sphase import pack_weights
        c = self.conv_transpose2d
        w = c.weight.detach()
        key = (w.data_ptr(), w._version, tuple(w.shape), w.device)
        if self._sp_key != key:
            plist = phases(c.kernel_size, c.stride, c.padding)
            packed, offsets = pack_weights(widened(w), plist, c.stride)
            self._sp, self._sp_key = (plist, packed, offsets), key
        return self._sp

    def _table(self, x: torch.Tensor):
        c = self.conv_transpose2d
        (kh, kw), (sh, sw), (ph, pw), (oph, opw) = c.kernel_size, c.stride, c.padding, c.output_padding
        hout = output_size(x.shape[2], kh, sh, ph, oph)
        wout = output_size(x.shape[3], kw, sw, pw, opw)
        from ct2d_sphase import phase_table
        plist, packed, offsets = self._packed_sp()
        return packed, phase_table(plist, offsets, hout, wout, c.stride), hout, wout

    def __call__(self, x: torch.Tensor, extra_bias: torch.Tensor | None = None, channel_min: bool = False) -> torch.Tensor:
        """The convolution with the extra bias and the epilogue; channel_min: instead of it, the minimum
        over each block of 64 output channels, [N, ceil(Cout / 64), Hout, Wout] (the caller takes the
        minimum over that dimension: 36's min over channels without writing the convolution)."""
        if not self.applies(x):
            y = super().__call__(x, extra_bias)
            return channel_block_min(y) if channel_min else y
        from ct2d_sphase import extension
        self._extra = extra_bias
        c = self.conv_transpose2d
        packed, table, hout, wout = self._table(x)
        a, b = self.epilogue_args
        return extension().sp_conv(x.contiguous(), packed, self._bias(), table, c.out_channels, hout, wout,
                                   c.stride[0], c.stride[1], EPILOGUES.index(self.epilogue), a, b, self.staging,
                                   self.persistent, channel_min)

    def plan(self, x: torch.Tensor, extra_bias: torch.Tensor | None = None, channel_min: bool = False) -> Plan:
        if not self.applies(x):
            return super().plan(x, extra_bias)
        from ct2d_sphase import staging_bytes
        c = self.conv_transpose2d
        plist = phases(c.kernel_size, c.stride, c.padding)
        taps = ", ".join(f"{p.taps_h}x{p.taps_w}" for p in plist)
        vec = staging_bytes(x.contiguous(), self.staging)
        blocks = ("persistent blocks (one per SM), a two-stage ring of 32-channel chunks" if self.persistent
                  else "a block per item")
        store = (f"epilogue {self.epilogue}, then the minimum over each block of 64 output channels, in the store"
                 if channel_min else f"epilogue {self.epilogue} in the store")
        return Plan(f"{'ct2d_spp' if self.persistent else 'ct2d_sp'}<{vec // 4}, {int(channel_min)}>",  # <XV, RED>: the profiler's name
                    "../../conv_transpose2d_fused/_shared/sphase.cu",
                    f"{len(plist)} phase GEMMs (taps {taps}) on TF32 mma.sync, items of 64 channels x 4x64 pixels, "
                    f"{blocks}, x staged by {vec}-byte copies and rounded to nearest TF32; {store}", "fp32")


class SubpixelConv(FastConv):
    """A strided convolution as ONE stride-1 convolution whose output channels hold every phase's
    side by side (ct2d_phases.subpixel_weight: [Cin, phases x Cout, th, tw], the phases' sub-kernels
    zero-padded to the most taps), run on the library's stride-1 kernels (the wgmma kernels on the
    H200: all phases in one launch, each staged input chunk used by phases x Cout channels), then
    one pass (split.cu: subpixel_interleave) that puts each phase's values in place with the bias
    (the extra one folded in) and the epilogue. Where it does not apply (stride 1, groups,
    dilation, more than 16 phases, not fp32 or bf16 CUDA, 2^31 outputs or more, a phase offset of 256
    or more) the call is FastConv's.
    The stride-1 weight is built once per weight version (refreshed in place, so the library's
    packing follows). channel_min as StridedConv's (here by a pass over the output).
    z's width is rounded up to a multiple of z_align by output padding (its extra columns read
    only zeros: exact zeros, which the pass would assume there anyway), so that the wgmma
    kernel's epilogue stores 16-byte vectors (fast/wgmma.cuh, plan_wg). Measured on the H200
    (the convolution of 93's z): 2.28 ms as it was (65 columns: one float at a time), 1.17 ms at
    66 (8-byte stores), 0.49 ms at 68 (16-byte).

    z_fp16: z written in fp16 by the wgmma kernel's epilogue (the library's out_fp16) and read so by
    the pass: half of z's bytes, twice over. fp16 keeps TF32's 11-bit significand (each value
    rounded once to nearest, as the class allows) but not fp32's range: past 65504 a value becomes
    +-inf, which only an epilogue that saturates there maps to what the fp32 value would give
    (SATURATING: tanh, clamp_scale); any other is refused. Its width is rounded up to a multiple
    of 8 at least (the pass reads z's rows as 16-byte pieces).

    out_dtype: y's type, fp32 or bf16. bf16: the pass rounds each fp32 result once to bf16 as it
    stores it, half the bytes of an fp32 y and no conversion pass after it.

    A bf16 run's solution calls it either on x widened to fp32 (exact; a bf16 model's weight is
    widened here), which is the fp32 path above, or on its bf16 x as it is: then the stride-1
    convolution runs on the library's bf16 rows (bf16 products on the weight's bf16 parts, x read
    as it is, fp32 sums) and writes z in bf16 (each sum rounded once; z_fp16 does not apply), and
    the pass reads that z (16-byte pieces, as for fp16). z's rounding comes before the bias and the
    epilogue: fine for an epilogue that does not cancel, not for 93's add_min_gelu_scale, whose
    solution widens x."""

    z_align = 4
    SATURATING = ("tanh", "clamp_scale")

    def __init__(self, conv: nn.ConvTranspose2d, epilogue: str = "none", epilogue_args=(0.0, 0.0), sign: float = 1.0,
                 z_fp16: bool = False, out_dtype: torch.dtype = torch.float32):
        super().__init__(conv, epilogue, epilogue_args, sign)
        if z_fp16 and epilogue not in self.SATURATING:
            raise ValueError(f"z_fp16 needs a saturating epilogue ({', '.join(self.SATURATING)}), not {epilogue!r}")
        if out_dtype not in (torch.float32, torch.bfloat16):
            raise ValueError(f"out_dtype: torch.float32 or torch.bfloat16, not {out_dtype}")
        self.z_fp16, self.out_dtype = bool(z_fp16), out_dtype
        self._plist = self._sub = self._sub_key = None

    def applies(self, x: torch.Tensor) -> bool:
        c = self.conv_transpose2d
        (sh, sw), (kh, kw), (ph, pw), (oph, opw) = c.stride, c.kernel_size, c.padding, c.output_padding
        return (x.is_cuda and x.dtype in (torch.float32, torch.bfloat16) and x.dim() == 4 and c.groups == 1
                and tuple(c.dilation) == (1, 1) and (sh, sw) != (1, 1) and sh * sw <= 16
                and x.shape[0] * c.out_channels * output_size(x.shape[2], kh, sh, ph, oph)
                * output_size(x.shape[3], kw, sw, pw, opw) < 2 ** 31
                and all(q.ch < 256 and q.cw < 256 for q in phases(c.kernel_size, c.stride, c.padding)))

    def _sub_conv(self, x: torch.Tensor):
        """The phases and the FastConv of the stride-1 convolution (no padding, no bias) on
        subpixel_weight, its weight refreshed in place when the module's changes (copy_ moves its
        version, so the library repacks), made anew on another device or shape; its output
        padding set for x: z's width (x's plus the sub-kernel's, less one) up to a multiple of
        z_align (8 at least for a 16-bit z); z's type (z_fp16 for an fp32 x; bf16 for a bf16 x, whose
        sub-convolution keeps a bf16 weight for the library's bf16 rows, where an fp32 x's widens it)."""
        c = self.conv_transpose2d
        w = c.weight.detach()
        bf16_x = x.dtype == torch.bfloat16
        key = (w.data_ptr(), w._version, tuple(w.shape), w.device, bf16_x)
        if self._sub_key != key:
            plist = phases(c.kernel_size, c.stride, c.padding)
            wsub = subpixel_weight(w if bf16_x else widened(w), plist, c.stride)
            if self._sub_key is None or self._sub_key[2:] != key[2:]:
                self._sub = FastConv(SimpleNamespace(
                    weight=wsub, bias=None, kernel_size=subpixel_taps(plist), stride=(1, 1), padding=(0, 0),
                    output_padding=(0, 0), dilation=(1, 1), groups=1, out_channels=wsub.shape[1]))
            else:
                self._sub.conv_transpose2d.weight.copy_(wsub)
            self._plist, self._sub_key = plist, key
        sc = self._sub.conv_transpose2d
        z16 = self.z_fp16 and not bf16_x
        align = max(self.z_align, 8) if z16 or bf16_x else self.z_align  # 16-bit z: the pass stages 16-byte pieces
        sc.output_padding = (0, -(x.shape[3] + sc.kernel_size[1] - 1) % align)
        self._sub.out_fp16 = z16
        return self._plist, self._sub

    def __call__(self, x: torch.Tensor, extra_bias: torch.Tensor | None = None, channel_min: bool = False) -> torch.Tensor:
        if not self.applies(x):
            y = super().__call__(x, extra_bias)
            y = y.to(torch.bfloat16) if self.out_dtype == torch.bfloat16 else y
            return channel_block_min(y) if channel_min else y
        from ct2d_split import extension
        self._extra = extra_bias
        c = self.conv_transpose2d
        plist, sub = self._sub_conv(x)
        z = sub(x)
        (kh, kw), (sh, sw), (ph, pw), (oph, opw) = c.kernel_size, c.stride, c.padding, c.output_padding
        a, b = self.epilogue_args
        y = extension().subpixel_interleave(z, [v for p in plist for v in (p.ch, p.cw)], sh, sw, c.out_channels,
                                            output_size(x.shape[2], kh, sh, ph, oph),
                                            output_size(x.shape[3], kw, sw, pw, opw), self._bias(),
                                            EPILOGUES.index(self.epilogue), a, b, self.out_dtype == torch.bfloat16)
        return channel_block_min(y) if channel_min else y

    def plan(self, x: torch.Tensor, extra_bias: torch.Tensor | None = None, channel_min: bool = False) -> Plan:
        if not self.applies(x):
            return super().plan(x, extra_bias)
        plist, sub = self._sub_conv(x)
        q = sub.plan(x)
        th, tw = subpixel_taps(plist)
        more = ", then the minimum over each block of 64 output channels" if channel_min else ""
        z = (f"z in bf16 ({q.io})" if x.dtype == torch.bfloat16 else f"z in fp16 ({q.io})" if self.z_fp16
             else "z in fp32")
        bf16 = self.out_dtype == torch.bfloat16
        return Plan(q.kernel, q.file,
                    f"one stride-1 convolution of {len(plist)} phases x {self.conv_transpose2d.out_channels} "
                    f"channels (sub-kernel {th}x{tw}): {q.config}; {z}; then subpixel_interleave (split.cu) with the "
                    f"bias and epilogue {self.epilogue}{', y stored in bf16' if bf16 else ''}{more}",
                    ("bf16" if x.dtype == torch.bfloat16 else "bf16 via fp32") if bf16 else "fp32")
