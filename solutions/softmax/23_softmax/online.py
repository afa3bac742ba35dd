"""Row softmax in two passes over x: one block per row; pass 1 keeps a running maximum and a sum
of exponentials rescaled to it (online softmax), so x is read twice and y written once, where
PyTorch's kernel for rows this long reads x three times (max, sum, write)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

PRECISIONS = ("fp32",)  # float32 kernels: paired in fp32 runs only (a bf16 run leaves them out)

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

constexpr int kThreads = 1024;

// (m, s): the maximum seen and the sum of exp(x - m); merging two rescales the smaller one's sum.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    if (m2 > m) { s = s * expf(m - m2) + s2; m = m2; }
    else if (m2 != -INFINITY) { s += s2 * expf(m2 - m); }
}

__device__ __forceinline__ void add(float& m, float& s, float v) {
    if (v > m) { s = s * expf(m - v) + 1.f; m = v; }
    else { s += expf(v - m); }
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads) softmax_rows(const float* __restrict__ x, float* __restrict__ y,
                                                         int64_t cols) {
    const float* row = x + blockIdx.x * cols;
    float* out = y + blockIdx.x * cols;
    float m = -INFINITY, s = 0.f;
    if (kVec) {
        const float4* r4 = reinterpret_cast<const float4*>(row);
        for (int64_t i = threadIdx.x; i < cols / 4; i += kThreads) {
            float4 v = __ldg(r4 + i);
            add(m, s, v.x); add(m, s, v.y); add(m, s, v.z); add(m, s, v.w);
        }
    } else {
        for (int64_t i = threadIdx.x; i < cols; i += kThreads) add(m, s, __ldg(row + i));
    }
    // warp, then block reduction of (m, s)
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        merge(m, s, m2, s2);
    }
    __shared__ float wm[kThreads / 32], ws[kThreads / 32];
    __shared__ float row_m, row_inv;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) { wm[warp] = m; ws[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        m = wm[lane]; s = ws[lane];
        for (int off = 16; off > 0; off >>= 1) {
            float m2 = __shfl_xor_sync(0xffffffffu, m, off);
            float s2 = __shfl_xor_sync(0xffffffffu, s, off);
            merge(m, s, m2, s2);
        }
        if (lane == 0) { row_m = m; row_inv = 1.f / s; }
    }
    __syncthreads();
    m = row_m;
    const float inv = row_inv;
    if (kVec) {
        const float4* r4 = reinterpret_cast<const float4*>(row);
        float4* o4 = reinterpret_cast<float4*>(out);
        for (int64_t i = threadIdx.x; i < cols / 4; i += kThreads) {
            float4 v = __ldg(r4 + i);
            o4[i] = make_float4(expf(v.x - m) * inv, expf(v.y - m) * inv, expf(v.z - m) * inv, expf(v.w - m) * inv);
        }
    } else {
        for (int64_t i = threadIdx.x; i < cols; i += kThreads) out[i] = expf(__ldg(row + i) - m) * inv;
    }
}

torch::Tensor softmax_dim1(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.scalar_type() == torch::kFloat, "a 2-D float32 CUDA tensor");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t rows = xc.size(0), cols = xc.size(1);
    if (rows == 0 || cols == 0) return y;
    TORCH_CHECK(rows < (1LL << 31), "too many rows for one grid");
    const bool vec = cols % 4 == 0 && reinterpret_cast<uintptr_t>(xc.data_ptr<float>()) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0;
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (vec) softmax_rows<true><<<rows, kThreads, 0, stream>>>(xc.data_ptr<float>(), y.data_ptr<float>(), cols);
    else softmax_rows<false><<<rows, kThreads, 0, stream>>>(xc.data_ptr<float>(), y.data_ptr<float>(), cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

softmax_ext = load_inline(
    name="softmax_online",
    cpp_sources="torch::Tensor softmax_dim1(torch::Tensor x);",
    cuda_sources=cuda_source,
    functions=["softmax_dim1"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax_ext.softmax_dim1(x)
