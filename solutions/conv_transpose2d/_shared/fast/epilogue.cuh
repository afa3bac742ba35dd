// Elementwise epilogues: what a fused solution applies to each output element after the bias
// (KernelBench level 2: a ConvTranspose2d followed by clamps, activations and scalings). Written
// once here; the phase kernel applies one in its store (ct2d_phase_epi, phase.cuh), and any other
// route runs epilogue_pass over its output (dispatch.cu: the rule says which, plan() reports it).
// A per-channel term (an added or subtracted bias) goes into the kernels' bias vector instead.
// Needs common.cuh.
#pragma once

#include "common.cuh"

namespace {

// The kinds, in the order ct2d_fast.py's EPILOGUES names them (0 is no epilogue). a, b: the two
// scalars the kind takes (below), from the problem's constructor.
enum EpilogueKind : int {
  kEpiNone = 0,
  kEpiClampScale = 1,           // clamp(v, 0, 1) * a, clamp(., 0, 1), / a        (2)
  kEpiTanh = 2,                 // tanh(v)                                         (5)
  kEpiMishAddHardtanhScale = 3, // clamp(mish(v) + a, -1, 1) * b                  (16)
  kEpiAddMinGeluScale = 4,      // gelu(min(v + a, 0)) * b, GELU exact (erf)       (93)
  kEpiGelu = 5,                 // gelu(v), exact (erf)
  kEpiCount = 6,
};

__host__ inline const char* fused_epilogue_name(int kind) {
  static const char* names[kEpiCount] = {"none", "clamp_scale", "tanh", "mish_add_hardtanh_scale",
                                         "add_min_gelu_scale", "gelu"};
  return kind >= 0 && kind < kEpiCount ? names[kind] : "?";
}

// PyTorch's definitions: softplus with threshold 20 inside mish; GELU's erf form.
__device__ __forceinline__ float epi_gelu(float v) { return 0.5f * v * (1.f + erff(v * 0.70710678118654752f)); }
__device__ __forceinline__ float epi_mish(float v) { return v * tanhf(v > 20.f ? v : log1pf(expf(v))); }

// An epilogue as the kernels take it: the kind is uniform over a launch, so the switch is one
// uniform branch per element of a store loop that is bound by memory.
// kRoundX: the TF32 product rounds x to nearest (to_tf32) rather than passing its raw bits, which
// the MMA truncates. Truncation biases every product of a positive x the same way, and the bias adds
// up over the sum; an epilogue whose output is small where its slope is not (93: GELU of a value
// clamped to at most 0) turns that into a relative error past the TF32 class's bound (rel L2
// 0.0068 against 0.003 on the H200; the reference's own with its operands rounded to TF32: 0.0011).
struct Epilogue {
  static constexpr bool kRoundX = true;
  int kind;
  float a, b;
  __device__ __forceinline__ float operator()(float v) const {
    switch (kind) {
      case kEpiClampScale:
        return fminf(fmaxf(fminf(fmaxf(v, 0.f), 1.f) * a, 0.f), 1.f) / a;
      case kEpiTanh:
        return tanhf(v);
      case kEpiMishAddHardtanhScale:
        return fminf(fmaxf(epi_mish(v) + a, -1.f), 1.f) * b;
      case kEpiAddMinGeluScale:
        return epi_gelu(fminf(v + a, 0.f)) * b;
      case kEpiGelu:
        return epi_gelu(v);
      default:
        return v;
    }
  }
};

// No epilogue: the conv family's kernels, whose code this leaves as it was.
struct EpiNone {
  static constexpr bool kRoundX = false;
  __device__ __forceinline__ float operator()(float v) const { return v; }
};

// The epilogue as a pass of its own over y (fp32 or bf16, in place), for routes that do not fuse it.
template <class T>
__global__ void epilogue_pass(T* __restrict__ y, int64_t n, const Epilogue e) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    if constexpr (std::is_same<T, float>::value) {
      y[i] = e(y[i]);
    } else {
      y[i] = __float2bfloat16_rn(e(__bfloat162float(y[i])));
    }
  }
}

void run_epilogue_pass(torch::Tensor& y, const Epilogue& e, cudaStream_t stream) {
  const int64_t n = y.numel();
  const int blocks = (int)std::min<int64_t>((n + 255) / 256, (int64_t)sm_count() * 16);
  if (y.scalar_type() == at::kFloat)
    epilogue_pass<float><<<blocks, 256, 0, stream>>>(y.data_ptr<float>(), n, e);
  else
    epilogue_pass<__nv_bfloat16><<<blocks, 256, 0, stream>>>(reinterpret_cast<__nv_bfloat16*>(y.data_ptr()), n, e);
}

}  // namespace
