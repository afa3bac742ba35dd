// The exact algebra of ct2d_means.py in two kernels, for problems whose convolution is only ever
// averaged over all positions (42, 44): window_sums reads x once and writes, per image, input
// channel and tap pair, the sum of x over the rows and columns whose tap lands inside the output
// (an interval per tap: ct2d_means.tap_windows); contract_means multiplies those by the weight
// and adds the bias, per image and output channel. Built by ct2d_means.py (extension()).
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>
#include <cuda_bf16.h>

#include <type_traits>
#include <vector>

namespace {

constexpr int kMaxTaps = 8;  // per dimension
constexpr int kThreads = 256;

struct Windows {
  int h_lo[kMaxTaps], h_hi[kMaxTaps], w_lo[kMaxTaps], w_hi[kMaxTaps];
};

// One block per (image, channel) plane of x; S[plane][kh][kw] = sum of the plane over rows
// [h_lo[kh], h_hi[kh]) and columns [w_lo[kw], w_hi[kw]). Each thread keeps the K x K sums of the
// elements it reads (K: the larger tap count, 8 for 5 to 8; taps past kh, kw never match), then
// the block adds them up. V4 (W % 4 == 0, x 16-byte aligned): four groups of four columns of one
// row per thread in flight (16-byte streaming loads, issued before any is used), each group's
// column-window sums formed first, then added to the rows' windows it lies in; else one element
// at a time.
template <int K>
__device__ __forceinline__ void add_group(float (&acc)[K][K], const float4 v, int ih, int iw, int kh, int kw,
                                          const Windows& win) {
  float cs[K];
#pragma unroll
  for (int b = 0; b < K; ++b) {
    const int lo = win.w_lo[b], hi = win.w_hi[b];
    cs[b] = (b < kw) ? ((iw >= lo && iw < hi ? v.x : 0.f) + (iw + 1 >= lo && iw + 1 < hi ? v.y : 0.f) +
                        (iw + 2 >= lo && iw + 2 < hi ? v.z : 0.f) + (iw + 3 >= lo && iw + 3 < hi ? v.w : 0.f))
                     : 0.f;
  }
#pragma unroll
  for (int a = 0; a < K; ++a) {
    if (a < kh && ih >= win.h_lo[a] && ih < win.h_hi[a]) {
#pragma unroll
      for (int b = 0; b < K; ++b) acc[a][b] += cs[b];
    }
  }
}

// x's elements as fp32 (T: float, or __nv_bfloat16 in bf16 runs, widened exactly): four at a time
// (group f of the plane: 16 or 8 bytes, streaming), or one
__device__ __forceinline__ float4 load4(const float* p, int f) { return __ldcs(reinterpret_cast<const float4*>(p) + f); }
__device__ __forceinline__ float4 load4(const __nv_bfloat16* p, int f) {
  const uint2 u = __ldcs(reinterpret_cast<const uint2*>(p) + f);
  return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                     __uint_as_float(u.y & 0xffff0000u));
}
__device__ __forceinline__ float load1(const float* p, int e) { return __ldcs(p + e); }
__device__ __forceinline__ float load1(const __nv_bfloat16* p, int e) {
  return __uint_as_float((uint32_t)__ldcs(reinterpret_cast<const unsigned short*>(p) + e) << 16);
}
template <int K, bool V4, class T>
__global__ void __launch_bounds__(kThreads) window_sums_kernel(const T* __restrict__ x, float* __restrict__ S,
                                                               int H, int W, int kh, int kw, const Windows win) {
  const T* plane = x + (int64_t)blockIdx.x * H * W;
  float acc[K][K];
#pragma unroll
  for (int a = 0; a < K; ++a)
#pragma unroll
    for (int b = 0; b < K; ++b) acc[a][b] = 0.f;
  const int HW = H * W;
  if constexpr (V4) {
    constexpr int kU = 4;  // float4 loads in flight per thread
    const int n4 = HW / 4;
    for (int f0 = threadIdx.x; f0 < n4; f0 += kU * kThreads) {
      float4 v[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int f = f0 + u * kThreads;
        v[u] = f < n4 ? load4(plane, f) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int e = 4 * (f0 + u * kThreads), ih = e / W, iw = e - ih * W;
        add_group<K>(acc, v[u], ih, iw, kh, kw, win);  // past the plane: zeros, whatever window
      }
    }
  } else {
    int ih = threadIdx.x / W, iw = threadIdx.x - ih * W;
    for (int e = threadIdx.x; e < HW; e += kThreads) {
      const float v = load1(plane, e);
#pragma unroll
      for (int a = 0; a < K; ++a) {
        const bool row = a < kh && ih >= win.h_lo[a] && ih < win.h_hi[a];
#pragma unroll
        for (int b = 0; b < K; ++b)
          if (row && b < kw && iw >= win.w_lo[b] && iw < win.w_hi[b]) acc[a][b] += v;
      }
      iw += kThreads;
      while (iw >= W) {
        iw -= W;
        ++ih;
      }
    }
  }
  __shared__ float part[kThreads / 32][K * K];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int a = 0; a < K; ++a)
#pragma unroll
    for (int b = 0; b < K; ++b) {
      float v = acc[a][b];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane == 0) part[warp][a * K + b] = v;
    }
  __syncthreads();
  for (int i = threadIdx.x; i < kh * kw; i += kThreads) {
    const int a = i / kw, b = i - a * kw;
    float v = 0.f;
    for (int w8 = 0; w8 < kThreads / 32; ++w8) v += part[w8][a * K + b];
    S[(int64_t)blockIdx.x * kh * kw + i] = v;
  }
}

// out[n, co] = alpha * (sum_r S[n, r] wt[r, co] * inv_area + bias[co]), r = (ci, kh, kw): one block
// per image and 32 output channels (blockIdx.y), S[n] in shared memory; lanes along the channels
// (wt's rows read coalesced), the warps splitting r, their partial sums added in shared memory.
constexpr int kContractWarps = 8;
__global__ void __launch_bounds__(kContractWarps * 32) contract_means_kernel(
    const float* __restrict__ S, const float* __restrict__ wt, const float* __restrict__ bias, float* __restrict__ out,
    int R, int Cout, float inv_area, float alpha) {
  extern __shared__ float s[];
  __shared__ float part[kContractWarps][32];
  const float* Sn = S + (int64_t)blockIdx.x * R;
  for (int r = threadIdx.x; r < R; r += blockDim.x) s[r] = Sn[r];
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, co = blockIdx.y * 32 + lane;
  float v = 0.f;
  if (co < Cout) {
#pragma unroll 8
    for (int r = warp; r < R; r += kContractWarps) v = fmaf(s[r], __ldg(wt + (int64_t)r * Cout + co), v);
  }
  part[warp][lane] = v;
  __syncthreads();
  if (warp == 0 && co < Cout) {
    float sum = 0.f;
#pragma unroll
    for (int w8 = 0; w8 < kContractWarps; ++w8) sum += part[w8][lane];
    out[(int64_t)blockIdx.x * Cout + co] = alpha * (sum * inv_area + (bias ? __ldg(bias + co) : 0.f));
  }
}

}  // namespace

// x: [N, C, H, W] fp32 contiguous; wt: the weight as [C * kh * kw, Cout] (ci, kh, kw major);
// windows: per row tap lo, hi, then per column tap lo, hi; area: the output's H * W.
torch::Tensor channel_means_k(torch::Tensor x, torch::Tensor wt, c10::optional<torch::Tensor> bias,
                              std::vector<int64_t> windows, int64_t kh, int64_t kw, int64_t area, double alpha) {
  const bool bf16 = x.scalar_type() == at::kBFloat16;  // a bf16 run: x read as it is, the sums in fp32
  TORCH_CHECK(x.is_cuda() && (x.scalar_type() == at::kFloat || bf16) && x.dim() == 4 && x.is_contiguous(),
              "channel_means_k: x must be a contiguous 4-D fp32 or bf16 CUDA tensor");
  TORCH_CHECK(kh >= 1 && kw >= 1 && kh <= kMaxTaps && kw <= kMaxTaps && (int64_t)windows.size() == 2 * (kh + kw),
              "channel_means_k: 1 to ", kMaxTaps, " taps per dimension, two bounds per tap");
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), R = C * kh * kw;
  TORCH_CHECK(wt.is_cuda() && wt.scalar_type() == at::kFloat && wt.dim() == 2 && wt.size(0) == R && wt.is_contiguous(),
              "channel_means_k: wt must be [C * kh * kw, Cout] contiguous fp32");
  TORCH_CHECK(H * W < (1ll << 31) && R * 4 <= 48 * 1024, "channel_means_k: a plane or the contraction is too large");
  const int64_t Cout = wt.size(1);
  const c10::cuda::CUDAGuard guard(x.device());
  Windows win{};
  for (int64_t t = 0; t < kh; ++t) win.h_lo[t] = (int)windows[2 * t], win.h_hi[t] = (int)windows[2 * t + 1];
  for (int64_t t = 0; t < kw; ++t)
    win.w_lo[t] = (int)windows[2 * (kh + t)], win.w_hi[t] = (int)windows[2 * (kh + t) + 1];
  auto S = torch::empty({N, R}, x.options().dtype(at::kFloat));
  auto out = torch::empty({N, Cout}, x.options().dtype(at::kFloat));
  if (N == 0 || Cout == 0) return out;
  const float* bp = nullptr;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->is_cuda() && bias->scalar_type() == at::kFloat && bias->numel() == Cout && bias->is_contiguous(),
                "channel_means_k: bias must be Cout contiguous fp32 values");
    bp = bias->data_ptr<float>();
  }
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const int k = (int)std::max(kh, kw);
  const unsigned planes = (unsigned)(N * C);
  if (planes > 0) {
    const bool v4 = W % 4 == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % (bf16 ? 8 : 16) == 0;
    auto launch = [&](auto kk, const auto* xp) {
      constexpr int K = decltype(kk)::value;
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(xp)>>;
      if (v4)
        window_sums_kernel<K, true, T><<<planes, kThreads, 0, stream>>>(xp, S.data_ptr<float>(), (int)H, (int)W,
                                                                        (int)kh, (int)kw, win);
      else
        window_sums_kernel<K, false, T><<<planes, kThreads, 0, stream>>>(xp, S.data_ptr<float>(), (int)H, (int)W,
                                                                         (int)kh, (int)kw, win);
    };
    auto run = [&](auto kk) {
      if (bf16) launch(kk, reinterpret_cast<const __nv_bfloat16*>(x.data_ptr()));
      else launch(kk, x.data_ptr<float>());
    };
    if (k == 1)
      run(std::integral_constant<int, 1>{});
    else if (k == 2)
      run(std::integral_constant<int, 2>{});
    else if (k == 3)
      run(std::integral_constant<int, 3>{});
    else if (k == 4)
      run(std::integral_constant<int, 4>{});
    else
      run(std::integral_constant<int, 8>{});
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  } else {
    S.zero_();
  }
  contract_means_kernel<<<dim3((unsigned)N, (unsigned)((Cout + 31) / 32)), kContractWarps * 32,
                          (size_t)R * sizeof(float), stream>>>(
      S.data_ptr<float>(), wt.data_ptr<float>(), bp, out.data_ptr<float>(), (int)R, (int)Cout, (float)(1.0 / area),
      (float)alpha);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
