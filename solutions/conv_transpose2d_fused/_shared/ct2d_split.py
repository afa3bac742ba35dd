"""The build of split.cu: the interleaving passes of a strided convolution computed as stride-1
ones (ct2d_phases.py), with the bias and the library's epilogue (its header, fast/epilogue.cuh, on
the include path): phase_interleave (ct2d_fused.SplitConv: one output per phase; correct on the
H200, slower, no solution takes it) and subpixel_interleave (ct2d_fused.SubpixelConv: one output
with every phase's channels). Built on first use (the CPU tests import the Python around it)."""
import functools
import sys
from pathlib import Path

from torch.utils.cpp_extension import load_inline

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ct2d_sphase import FAST_DIR, library_source  # noqa: E402

_DECL = """
torch::Tensor phase_interleave(std::vector<torch::Tensor> subs, std::vector<int64_t> offsets, int64_t stride_h,
    int64_t stride_w, int64_t N, int64_t C, int64_t H, int64_t W, c10::optional<torch::Tensor> bias, int64_t epilogue,
    double epi_a, double epi_b);
torch::Tensor subpixel_interleave(torch::Tensor z, std::vector<int64_t> offsets, int64_t stride_h, int64_t stride_w,
    int64_t C, int64_t H, int64_t W, c10::optional<torch::Tensor> bias, int64_t epilogue, double epi_a, double epi_b,
    bool out_bf16);
"""


@functools.lru_cache(maxsize=None)
def extension():
    return load_inline(
        name="ct2d_fused_split",
        cpp_sources=_DECL,
        cuda_sources=library_source("split.cu"),
        functions=["phase_interleave", "subpixel_interleave"],
        extra_include_paths=[str(FAST_DIR)],
        extra_cuda_cflags=["-O3", "-std=c++17"],
    )
