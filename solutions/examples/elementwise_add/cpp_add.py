"""Elementwise add as a C++ (CPU) extension: runs the whole pipeline without a GPU."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

PRECISIONS = ("fp32",)  # float32 kernels: paired in fp32 runs only (a bf16 run leaves them out)

cpp_source = r"""
torch::Tensor add(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.device().is_cpu() && b.device().is_cpu(), "this C++ solution runs on the CPU only");
    TORCH_CHECK(a.sizes() == b.sizes(), "a and b must have the same shape");
    TORCH_CHECK(a.scalar_type() == torch::kFloat && b.scalar_type() == torch::kFloat, "float32 only");
    auto ac = a.contiguous();
    auto bc = b.contiguous();
    auto out = torch::empty_like(ac);
    const float* pa = ac.data_ptr<float>();
    const float* pb = bc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const int64_t n = ac.numel();
    for (int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
    return out;
}
"""

elementwise_add = load_inline(
    name="elementwise_add_cpp",
    cpp_sources=cpp_source,
    functions=["add"],
    extra_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return elementwise_add.add(a, b)
