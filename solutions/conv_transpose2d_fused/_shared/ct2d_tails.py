"""The fused family's tails (KernelBench level 2): what follows the convolution where it is not
elementwise (pools, reductions over channels or positions, normalizations), as CUDA kernels
(tails.cu) that read the convolution's output once where they can; the statistics of a
normalization in one pass and the normalization in another."""
from pathlib import Path

from torch.utils.cpp_extension import load_inline

_TAILS_DECL = """
torch::Tensor pool_hardtanh_mean_tanh(torch::Tensor y, int64_t k, int64_t s, double lo, double hi);
torch::Tensor min_sum_gelu_add(torch::Tensor y, torch::Tensor bias);
torch::Tensor softmax_bias_scale_sigmoid(torch::Tensor y, torch::Tensor bias, double scale);
torch::Tensor gelu_group_norm(torch::Tensor y, int64_t groups, torch::Tensor weight, torch::Tensor bias, double eps);
torch::Tensor gelu_group_norm_two_pass(torch::Tensor y, int64_t groups, torch::Tensor weight, torch::Tensor bias,
    double eps);
torch::Tensor batch_norm_tanh_pool_group_norm(torch::Tensor y, torch::Tensor bn_weight, torch::Tensor bn_bias,
    torch::Tensor running_mean, torch::Tensor running_var, double momentum, double bn_eps, int64_t groups,
    torch::Tensor gn_weight, torch::Tensor gn_bias, double gn_eps);
"""

tails = load_inline(
    name="ct2d_fused_tails",
    cpp_sources=_TAILS_DECL,
    cuda_sources=(Path(__file__).resolve().parent / "tails.cu").read_text(),
    functions=["pool_hardtanh_mean_tanh", "min_sum_gelu_add", "softmax_bias_scale_sigmoid", "gelu_group_norm",
               "gelu_group_norm_two_pass",
               "batch_norm_tanh_pool_group_norm"],
    extra_cuda_cflags=["-O3", "-std=c++17"],
)
