"""Python side of the fast ConvTranspose2d solutions: the module (parameters created exactly as
nn.ConvTranspose2d creates them, so matched-seed construction gives the reference's weights), its
weights packed once per weight version (ct2d_pack.py), the extension built from fast/ (dispatch.cu
and the headers it includes) with its binding (binding_source: the entry points and `Bound`, every
argument but x bound once, so that a call converts one), and plan(x): which kernel a call runs,
with which tiles, from which file, by the same rule the call itself follows."""
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


def arg_list(args: str = _ARGS) -> list[tuple[str, str]]:
    """(C++ type, name) of each argument of an entry point's argument list."""
    return [(" ".join(t.split()), n) for t, _, n in (a.strip().rpartition(" ") for a in args.split(","))]


def binding_source(args: str = _ARGS, plan: bool = True) -> str:
    """main.cpp's source (load_inline with functions=None): the entry points declared and bound as
    they are, and `Bound`, a C++ object holding every argument but the first (x), made once by
    FastConvTranspose2d._bound: calling it with x converts one Python argument instead of all of them
    (29, about 4-5 us of a launch-bound call's host time). It is module-local and in an anonymous
    namespace, so that two builds (tools/ab_variants.py) live in one process. plan=False: a build
    without conv_transpose2d_plan (a revision's variant)."""
    params = arg_list(args)
    decl = ", ".join(f"{t} {n}" for t, n in params)
    bound = params[1:]
    names = ", ".join(n for _, n in bound)
    fns = [("torch::Tensor", "conv_transpose2d_fast", "__call__")]
    if plan:
        fns.append(("std::vector<std::string>", "conv_transpose2d_plan", "plan"))
    lines = [f"{ret} {fn}({decl});" for ret, fn, _ in fns]
    lines += ["", "namespace {", "// every argument but x, bound once (ct2d_fast.py: FastConvTranspose2d._bound)", "struct Bound {"]
    lines += [f"  {t} {n};" for t, n in bound]
    lines += [f"  {ret} {meth.strip('_')}(torch::Tensor x) const {{ return {fn}(x, {names}); }}" for ret, fn, meth in fns]
    lines += ["};", "}  // namespace", "", "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"]
    lines += [f'  m.def("{fn}", &{fn});' for _, fn, _ in fns]
    init = ", ".join(f"{t} {n}" for t, n in bound)
    lines += ['  pybind11::class_<Bound>(m, "Bound", pybind11::module_local())',
              f"      .def(pybind11::init([]({init}) {{ return Bound{{{names}}}; }}))"]
    lines += [f'      .def("{meth}", &Bound::{meth.strip("_")})' for _, _, meth in fns]
    lines[-1] += ";"
    lines += ["}", ""]
    return "\n".join(lines)


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
    cpp_sources=binding_source(),
    cuda_sources=cuda_source(),
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
        self._bound_key = self._bound_obj = self._bound_held = None

    def _layer(self):
        """The convolution whose parameters the call uses (a module's submodule, or the attribute of
        a fused FastConv), read without nn.Module.__getattr__ (about 0.5 us a name)."""
        d = self.__dict__
        return d["conv_transpose2d"] if "conv_transpose2d" in d else d["_modules"]["conv_transpose2d"]

    def _packed_weights(self) -> tuple:
        """ct2d_pack.pack's layouts, rebuilt only when the parameter changes (another tensor, or an
        in-place update bumps its version)."""
        c = self._layer()
        w = _weight_bias(c)[0]
        key = (w.data_ptr(), w._version, tuple(w.shape), w.device)
        if self._packed_key != key:
            self._packed = pack(w, c.groups, c.stride, self.split, WGMMA)
            self._packed_key = key
        return self._packed

    def _static_args(self) -> tuple:
        """Every argument of the entry points but x, in ct2d_fast._ARGS's order."""
        c = self._layer()
        (kh, kw), (sh, sw), (ph, pw) = c.kernel_size, c.stride, c.padding
        (oph, opw), (dh, dw) = c.output_padding, c.dilation
        p = self._packed_weights()
        return (p.phase, p.phase_frag, p.mma, p.mmh, p.mmh_exp, p.wgmma, p.wh, p.wh_exp, p.wb, self._bias(),
                c.out_channels, kh, kw, sh, sw, ph, pw, oph, opw, dh, dw, c.groups, self.split, self.config,
                EPILOGUES.index(self.epilogue), float(self.epilogue_args[0]), float(self.epilogue_args[1]),
                int(self.out_fp16))

    def _args(self, x: torch.Tensor) -> tuple:
        """The entry points' whole argument list for x (what _bound binds, with x first)."""
        return (x,) + self._static_args()

    def _bias_sources(self, bias) -> tuple:
        """The tensors the kernels' bias vector is made from (FastConv adds a call's extra bias)."""
        return (bias,)

    def _bound(self):
        """The extension's Bound for this layer, made again when anything it was made from changes:
        the weight (pointer, version, shape), the tensors the bias is made from (pointer, version),
        the layer's hyper-parameters, config, class, epilogue and output type, and the build (a
        tools/ab_variants.py run swaps _ext). Their storages are held while bound (detached views:
        a parameter whose .data is replaced still frees its old storage), so that no pointer of the
        key is reused by another tensor."""
        c = self._layer()
        w, bias = _weight_bias(c)
        sources = self._bias_sources(bias)
        key = (_ext, w.data_ptr(), w._version, w.shape,
               tuple(None if t is None else (t.data_ptr(), t._version) for t in sources),
               c.kernel_size, c.stride, c.padding, c.output_padding, c.dilation, c.groups, c.out_channels,
               type(self), self.split, self.config, self.epilogue, tuple(self.epilogue_args), self.out_fp16)
        d = self.__dict__
        if d.get("_bound_key") != key:
            obj = _ext.Bound(*self._static_args())
            d["_bound_key"], d["_bound_obj"] = key, obj
            d["_bound_held"] = tuple(t.detach() for t in (w, *sources) if t is not None)
        return d["_bound_obj"]

    def __getstate__(self):
        """Copies and pickles leave the Bound out (made again at the copy's first call)."""
        state = torch.nn.Module.__getstate__(self) if isinstance(self, torch.nn.Module) else self.__dict__.copy()
        state["_bound_key"] = state["_bound_obj"] = state["_bound_held"] = None
        return state

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._bound()(x)

    def plan(self, x: torch.Tensor) -> Plan:
        """Which kernel forward(x) runs and how (fast/dispatch.cu: the rule), launching nothing."""
        return Plan(*self._bound().plan(x))

    def _bias(self):
        return _weight_bias(self._layer())[1]


def _weight_bias(conv) -> tuple:
    """conv's weight and bias: through `_parameters` for a module (no nn.Module.__getattr__), as
    attributes for the fused family's sub-convolutions (plain namespaces)."""
    params = conv.__dict__.get("_parameters")
    if params is not None:
        return params["weight"], params.get("bias")
    return conv.weight, getattr(conv, "bias", None)


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
        bias = _weight_bias(self._layer())[1]
        if bias is None:
            return None
        key = (bias.data_ptr(), bias._version)
        if getattr(self, "_bias_key", None) != key:
            self._bias32, self._bias_key = bias.detach().float(), key
        return self._bias32


class FastConvTranspose2dFP32(FastConvTranspose2d):
    split = 3
