"""Python side of the fast ConvTranspose2d solutions: the module (parameters created exactly as
nn.ConvTranspose2d creates them, so matched-seed construction gives the reference's weights), its
weights packed once per weight version (ct2d_pack.py), the extension built from fast/ (dispatch.cu
and the headers it includes), and plan(x): which kernel a call runs, with which tiles, from which
file, by the same rule the call itself follows."""
import hashlib
import os
from pathlib import Path
from typing import NamedTuple

import torch
from ct2d_pack import pack
from ct2d_params import ConvTranspose2dParams
from torch.utils.cpp_extension import load_inline

_HERE = Path(__file__).resolve().parent
FAST_DIR = _HERE / "fast"

_ARGS = """torch::Tensor x, torch::Tensor wp, torch::Tensor wt, torch::Tensor wm, torch::Tensor wmh, int64_t wmh_exp,
    torch::Tensor wg, torch::Tensor wh, int64_t wh_exp, torch::Tensor wb, c10::optional<torch::Tensor> bias,
    int64_t Cout, int64_t KH, int64_t KW, int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w, int64_t outpad_h, int64_t outpad_w,
    int64_t dil_h, int64_t dil_w, int64_t groups, int64_t split, int64_t config, int64_t epilogue, double epi_a,
    double epi_b, int64_t out_fp16"""
FAST_DECL = f"torch::Tensor conv_transpose2d_fast({_ARGS});\n"
CPP_DECL = FAST_DECL + f"std::vector<std::string> conv_transpose2d_plan({_ARGS});\n"


def _hopper_target() -> bool:
    """Build for sm_90a (and so include the wgmma kernel) when the target is compute capability
    9.0: the harness names it in TORCH_CUDA_ARCH_LIST; without that, the visible GPU decides."""
    arch = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if not arch and torch.cuda.is_available():
        arch = "%d.%d" % torch.cuda.get_device_capability()
    return arch in ("9.0", "9.0a", "9.0+PTX", "9.0a+PTX")


def cuda_source(folder: Path = FAST_DIR) -> str:
    """folder's dispatch.cu, which includes the folder's other files (on the include path), headed
    by a digest of every file there: torch's build cache keys on the source text, so a change in
    any header rebuilds. (tools/ab_variants.py builds copies of fast/ the same way.)"""
    digest = hashlib.sha256()
    for f in sorted(Path(folder).iterdir()):
        if f.is_file():
            digest.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return f"// fast/ sha256 {digest.hexdigest()}\n" + (Path(folder) / "dispatch.cu").read_text()


# sm_90a code runs on compute capability 9.0 only (H100, H200); an explicit -gencode replaces the
# arch flags torch would add
WGMMA = _hopper_target()
_ext = load_inline(
    name="conv_transpose2d_fast",
    cpp_sources=CPP_DECL,
    cuda_sources=cuda_source(),
    functions=["conv_transpose2d_fast", "conv_transpose2d_plan"],
    extra_include_paths=[str(FAST_DIR)],
    extra_cuda_cflags=["-O3", "-std=c++17"]
    + (["-gencode=arch=compute_90a,code=sm_90a", "-DCT2D_WGMMA"] if WGMMA else []),
)


# fast/epilogue.cuh's kinds, in its order: what a fused solution (KernelBench level 2) applies to each
# output element after the bias, with its two scalars (a, b)
EPILOGUES = ("none", "clamp_scale", "tanh", "mish_add_hardtanh_scale", "add_min_gelu_scale", "gelu")


class Plan(NamedTuple):
    """What one call runs (FastConvTranspose2d.plan)."""
    kernel: str  # the kernel's template instance, as the profiler names it (namespace left out)
    file: str    # where it lives, under solutions/conv_transpose2d/_shared/fast/
    config: str  # its tiles, pipeline and epilogue, in words
    io: str      # "fp32"; "bf16": the kernel reads and writes bf16; "bf16 via fp32": x widened, the output rounded


class FastConvTranspose2d(ConvTranspose2dParams):
    """split=1: TF32-class results, split=3: fp32-class results. Which kernel runs for a call is
    fast/dispatch.cu's rule (kRoutes); plan(x) reports it."""

    split = 1
    config = 0  # kernel: 0 = chosen by the rule (1..9 force a variant, for tuning runs; fast/dispatch.cu)
    epilogue = "none"          # an EPILOGUES name: applied to every output element after the bias
    epilogue_args = (0.0, 0.0)  # its scalars a, b (fast/epilogue.cuh)
    out_fp16 = False   # the output in fp16 (fp32 x, no epilogue): ct2d_wgf writes it, else fp32's rounded once

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._packed = None
        self._packed_key = None

    def _packed_weights(self) -> tuple:
        """ct2d_pack.pack's layouts, rebuilt only when the parameter changes (another tensor, or an
        in-place update bumps its version)."""
        w = self.conv_transpose2d.weight
        key = (w.data_ptr(), w._version, tuple(w.shape), w.device)
        if self._packed_key != key:
            c = self.conv_transpose2d
            self._packed = pack(w, c.groups, c.stride, self.split, WGMMA)
            self._packed_key = key
        return self._packed

    def _args(self, x: torch.Tensor) -> tuple:
        c = self.conv_transpose2d
        (kh, kw), (sh, sw), (ph, pw) = c.kernel_size, c.stride, c.padding
        (oph, opw), (dh, dw) = c.output_padding, c.dilation
        p = self._packed_weights()
        return (x, p.phase, p.phase_frag, p.mma, p.mmh, p.mmh_exp, p.wgmma, p.wh, p.wh_exp, p.wb, self._bias(),
                c.out_channels, kh, kw, sh, sw, ph, pw, oph, opw, dh, dw, c.groups, self.split, self.config,
                EPILOGUES.index(self.epilogue), float(self.epilogue_args[0]), float(self.epilogue_args[1]),
                int(self.out_fp16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.conv_transpose2d_fast(*self._args(x))

    def plan(self, x: torch.Tensor) -> Plan:
        """Which kernel forward(x) runs and how (fast/dispatch.cu: the rule), launching nothing."""
        return Plan(*_ext.conv_transpose2d_plan(*self._args(x)))

    def _bias(self):
        return self.conv_transpose2d.bias


class FastConvTranspose2dBF16(FastConvTranspose2d):
    """bf16 runs (--precision bf16): the TF32-class kernels with the weights and the bias widened to
    fp32. bf16's 8-bit significand fits TF32's and (scaled) fp16's, so every product is exact and
    the sum is fp32's, rounded once to bf16: fp32 math rounded once, the bf16 class's best. x goes
    in as bf16 and the kernels write bf16 themselves: on stride 1, bf16 products on x as it is
    (ct2d_wgf on the weight's bf16 parts, ct2d_mmh), or where their staging does not apply the fp16
    products (ct2d_wgf) and x widened (ct2d_mmh); strided or grouped, the phase kernel's TF32 variant
    (widens x as it stages it; config 9: its bf16 mma.sync). Elsewhere the fp32 rule runs on x
    widened and the output is rounded once (fast/dispatch.cu; plan(x).io says which)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.bfloat16:
            raise TypeError(f"fast_bf16 is for bf16 runs (--precision bf16); x is {x.dtype}")
        return super().forward(x)

    def _bias(self):
        """The bias widened to fp32, once per bias version (a conversion per call is one more
        launch, which shows on small problems)."""
        bias = self.conv_transpose2d.bias
        if bias is None:
            return None
        key = (bias.data_ptr(), bias._version)
        if getattr(self, "_bias_key", None) != key:
            self._bias32, self._bias_key = bias.detach().float(), key
        return self._bias32


class FastConvTranspose2dFP32(FastConvTranspose2d):
    split = 3
