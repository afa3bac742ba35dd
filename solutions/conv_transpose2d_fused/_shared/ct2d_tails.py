"""The fused family's tails (KernelBench level 2): what follows the convolution where it is not
elementwise (pools, reductions over channels or positions, normalizations), as CUDA kernels
(tails.cu) that read the convolution's output once where they can; the statistics of a
normalization in one pass and the normalization in another."""
import hashlib
from pathlib import Path

from torch.utils.cpp_extension import load_inline

_HERE = Path(__file__).resolve().parent
FAST_DIR = _HERE.parents[1] / "conv_transpose2d" / "_shared" / "fast"  # epilogue.cuh and what it includes

_TAILS_DECL = """
torch::Tensor pool_hardtanh_mean_tanh(torch::Tensor y, int64_t k, int64_t s, double lo, double hi);
torch::Tensor min_sum_gelu_add(torch::Tensor y, torch::Tensor bias);
torch::Tensor softmax_bias_scale_sigmoid(torch::Tensor y, torch::Tensor bias, double scale);
torch::Tensor gelu_group_norm(torch::Tensor y, int64_t groups, torch::Tensor weight, torch::Tensor bias, double eps);
torch::Tensor batch_norm_tanh_pool_group_norm(torch::Tensor y, torch::Tensor bn_weight, torch::Tensor bn_bias,
    torch::Tensor running_mean, torch::Tensor running_var, double momentum, double bn_eps, int64_t groups,
    torch::Tensor gn_weight, torch::Tensor gn_bias, double gn_eps);
torch::Tensor phase_interleave(std::vector<torch::Tensor> subs, std::vector<int64_t> offsets, int64_t stride_h,
    int64_t stride_w, int64_t N, int64_t C, int64_t H, int64_t W, c10::optional<torch::Tensor> bias, int64_t epilogue,
    double epi_a, double epi_b);
"""


def _source() -> str:
    """tails.cu headed by a digest of the library headers it includes: torch's build cache keys on
    the source text, so a change in epilogue.cuh or common.cuh rebuilds."""
    digest = hashlib.sha256(b"".join((FAST_DIR / f).read_bytes() for f in ("epilogue.cuh", "common.cuh")))
    return f"// fast/ headers sha256 {digest.hexdigest()}\n" + (_HERE / "tails.cu").read_text()


tails = load_inline(
    name="ct2d_fused_tails",
    cpp_sources=_TAILS_DECL,
    cuda_sources=_source(),
    functions=["pool_hardtanh_mean_tanh", "min_sum_gelu_add", "softmax_bias_scale_sigmoid", "gelu_group_norm",
               "batch_norm_tanh_pool_group_norm", "phase_interleave"],
    extra_include_paths=[str(FAST_DIR)],
    extra_cuda_cflags=["-O3", "-std=c++17"],
)
