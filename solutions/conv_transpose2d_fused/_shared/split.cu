// The interleaving pass of ct2d_fused.SplitConv (a strided ConvTranspose2d as its phases' stride-1
// convolutions, ct2d_phases.py): the phases' outputs put in place, with the bias and the library's
// epilogue. Built by ct2d_split.py, apart from the tails (tails.cu), which the solutions use today.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include <vector>

#include "epilogue.cuh"  // the library's epilogues (solutions/conv_transpose2d/_shared/fast/, on the include path)

namespace {

constexpr int kThreads = 256;

// ---- A strided convolution's phases interleaved (ct2d_phases.py): y[n, c, rh + sh i, rw + sw j] =
// epi(sub_p[n, c, i + ch_p, j + cw_p] + bias[c]), the sub term 0 outside sub_p or where phase p has
// no taps (a null pointer). Each thread writes one element; consecutive threads read two phases'
// rows (stride 2) in turn, each coalesced.
constexpr int kMaxPhases = 16;
struct Phases {
  const float* y[kMaxPhases];
  int rows[kMaxPhases], cols[kMaxPhases], ch[kMaxPhases], cw[kMaxPhases];
};

__global__ void phase_interleave_kernel(float* __restrict__ out, const Phases ph, const float* __restrict__ bias,
                                        const Epilogue epi, int C, int H, int W, int sh, int sw, int64_t total) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int ow = (int)(e % W), oh = (int)(e / W % H);
    const int64_t nc = e / ((int64_t)H * W);
    const int p = (oh % sh) * sw + ow % sw;
    const int t = oh / sh + ph.ch[p], u = ow / sw + ph.cw[p];
    float v = 0.f;
    if (ph.y[p] && t < ph.rows[p] && u < ph.cols[p]) v = __ldg(ph.y[p] + (nc * ph.rows[p] + t) * ph.cols[p] + u);
    out[e] = epi(v + (bias ? __ldg(bias + nc % C) : 0.f));
  }
}

}  // namespace

// subs: the phases' stride-1 outputs (row-major in (rh, rw); an undefined tensor for a phase without
// taps), offsets: (ch, cw) per phase; bias: per channel or undefined; the epilogue as the library's.
torch::Tensor phase_interleave(std::vector<torch::Tensor> subs, std::vector<int64_t> offsets, int64_t stride_h,
                               int64_t stride_w, int64_t N, int64_t C, int64_t H, int64_t W,
                               c10::optional<torch::Tensor> bias, int64_t epilogue, double epi_a, double epi_b) {
  const int64_t np = stride_h * stride_w;
  TORCH_CHECK(np >= 1 && np <= kMaxPhases && (int64_t)subs.size() == np && (int64_t)offsets.size() == 2 * np,
              "phase_interleave: one output and two offsets per phase, at most ", kMaxPhases, " phases");
  TORCH_CHECK(epilogue >= 0 && epilogue < kEpiCount, "phase_interleave: unknown epilogue ", epilogue);
  Phases ph{};
  torch::Tensor like;
  for (int64_t p = 0; p < np; ++p) {
    const torch::Tensor& s = subs[p];
    if (s.defined() && s.numel() > 0) {
      TORCH_CHECK(s.is_cuda() && s.scalar_type() == at::kFloat && s.dim() == 4 && s.is_contiguous(),
                  "phase_interleave: a phase's output must be a contiguous fp32 CUDA tensor of four dimensions");
      TORCH_CHECK(s.size(0) == N && s.size(1) == C, "phase_interleave: a phase's output is not N x C");
      ph.y[p] = s.data_ptr<float>();
      ph.rows[p] = (int)s.size(2);
      ph.cols[p] = (int)s.size(3);
      like = s;
    }
    ph.ch[p] = (int)offsets[2 * p];
    ph.cw[p] = (int)offsets[2 * p + 1];
  }
  TORCH_CHECK(like.defined(), "phase_interleave: no phase has taps (nothing names the device)");
  const at::cuda::CUDAGuard guard(like.device());
  const float* b = nullptr;
  torch::Tensor bias_c;
  if (bias.has_value() && bias->defined()) {
    bias_c = bias->contiguous();
    TORCH_CHECK(bias_c.is_cuda() && bias_c.scalar_type() == at::kFloat && bias_c.numel() == C,
                "phase_interleave: the bias must be fp32 on the GPU, one value per channel");
    b = bias_c.data_ptr<float>();
  }
  auto out = torch::empty({N, C, H, W}, like.options());
  const int64_t total = out.numel();
  if (total == 0) return out;
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int blocks = (int)std::min<int64_t>((total + kThreads - 1) / kThreads, (int64_t)sms * 16);
  phase_interleave_kernel<<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      out.data_ptr<float>(), ph, b, Epilogue{(int)epilogue, (float)epi_a, (float)epi_b}, (int)C, (int)H, (int)W,
      (int)stride_h, (int)stride_w, total);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
