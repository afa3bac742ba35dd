// The fused family's tails: what follows a ConvTranspose2d in KernelBench level 2 where it is not
// elementwise. Each takes the convolution's output y (fp32, contiguous, N x C x H x W, written by
// the fast library) and reads it once, except the normalizations: their statistics in one pass,
// the normalization in the next (19's: both in one kernel, each group normalized while it is
// still in L2). Sums of statistics: fp32 per thread, fp64 per block and across
// blocks (atomics on a zeroed buffer), so the order blocks finish in moves only the last bits.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float gelu(float v) { return 0.5f * v * (1.f + erff(v * 0.70710678118654752f)); }

// Sum of v over the block (every thread gets it), through shared memory, in double.
__device__ double block_sum(double v, double* red) {
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = (blockDim.x + 31) >> 5;
  __syncthreads();  // red may be in use by a previous call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  double t = 0;
  for (int w = 0; w < warps; ++w) t += red[w];
  return t;
}

void check_y(const torch::Tensor& y) {
  TORCH_CHECK(y.is_cuda() && y.scalar_type() == at::kFloat && y.dim() == 4 && y.is_contiguous(),
              "tails: y must be a contiguous fp32 CUDA tensor of four dimensions");
}

int blocks_for(int64_t n) { return (int)std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 20); }

// ---- 10: MaxPool2d(k, s) -> Hardtanh(lo, hi) -> mean over (H, W) -> tanh; a block per (n, c) plane.
__global__ void pool_mean_kernel(const float* __restrict__ y, float* __restrict__ out, int H, int W, int k, int s,
                                 int Hp, int Wp, float lo, float hi) {
  __shared__ double red[32];
  const float* plane = y + (int64_t)blockIdx.x * H * W;
  float acc = 0.f;
  for (int i = threadIdx.x; i < Hp * Wp; i += blockDim.x) {
    const int r = i / Wp * s, c = i % Wp * s;
    float m = -INFINITY;
    for (int a = 0; a < k; ++a)
      for (int b = 0; b < k; ++b) m = fmaxf(m, __ldg(plane + (int64_t)(r + a) * W + c + b));
    acc += fminf(fmaxf(m, lo), hi);
  }
  const double t = block_sum(acc, red);
  if (threadIdx.x == 0) out[blockIdx.x] = tanhf((float)(t / ((double)Hp * Wp)));
}

// ---- 36: min over channels -> sum over H -> GELU -> + bias (one value); partial sums over row
// ranges (blockIdx.z) into sums[n][w], then the finish.
__global__ void min_sum_kernel(const float* __restrict__ y, float* __restrict__ sums, int C, int H, int W,
                               int rows_per) {
  __shared__ float part[8][33];
  const int w = blockIdx.x * 32 + threadIdx.x, n = blockIdx.y;
  const int h0 = blockIdx.z * rows_per, h1 = min(H, h0 + rows_per);
  const int64_t plane = (int64_t)H * W;
  float acc = 0.f;
  if (w < W) {
    for (int h = h0 + threadIdx.y; h < h1; h += 8) {
      const float* p = y + (int64_t)n * C * plane + (int64_t)h * W + w;
      float m0 = INFINITY, m1 = INFINITY, m2 = INFINITY, m3 = INFINITY;
      int c = 0;
      for (; c + 4 <= C; c += 4) {
        m0 = fminf(m0, __ldg(p + c * plane));
        m1 = fminf(m1, __ldg(p + (c + 1) * plane));
        m2 = fminf(m2, __ldg(p + (c + 2) * plane));
        m3 = fminf(m3, __ldg(p + (c + 3) * plane));
      }
      for (; c < C; ++c) m0 = fminf(m0, __ldg(p + c * plane));
      acc += fminf(fminf(m0, m1), fminf(m2, m3));
    }
  }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && w < W) {
    float t = 0.f;
    for (int r = 0; r < 8; ++r) t += part[r][threadIdx.x];
    atomicAdd(sums + (int64_t)n * W + w, t);
  }
}

__global__ void gelu_add_kernel(const float* __restrict__ sums, const float* __restrict__ bias,
                                float* __restrict__ out, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = gelu(sums[i]) + __ldg(bias);
}

// ---- 91: softmax over channels -> + bias[c] -> * scale -> sigmoid, in place. A block holds 64
// pixels of one image, all channels, in shared memory (row stride 65: the four threads of a pixel
// read four channels in four banks); one read and one write of y.
constexpr int kSoftPix = 64;
__global__ void softmax_kernel(float* __restrict__ y, const float* __restrict__ bias, int C, int64_t HW,
                               float scale) {
  extern __shared__ float tile[];  // [C][65]
  const int64_t p0 = (int64_t)blockIdx.x * kSoftPix, n = blockIdx.y;
  float* base = y + n * C * HW + p0;
  const int np = (int)(HW - p0 < kSoftPix ? HW - p0 : kSoftPix);
  for (int e = threadIdx.x; e < C * kSoftPix; e += blockDim.x) {
    const int c = e / kSoftPix, p = e % kSoftPix;
    tile[c * (kSoftPix + 1) + p] = p < np ? base[c * HW + p] : 0.f;
  }
  __syncthreads();
  const int p = threadIdx.x >> 2, q = threadIdx.x & 3;  // 4 threads a pixel, 64 pixels
  float m = -INFINITY;
  for (int c = q; c < C; c += 4) m = fmaxf(m, tile[c * (kSoftPix + 1) + p]);
  m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
  m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
  float sum = 0.f;
  for (int c = q; c < C; c += 4) {
    float* t = tile + c * (kSoftPix + 1) + p;
    *t = expf(*t - m);
    sum += *t;
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  for (int c = q; c < C; c += 4) {
    float* t = tile + c * (kSoftPix + 1) + p;
    const float v = (*t / sum + __ldg(bias + c)) * scale;
    *t = 1.f / (1.f + expf(-v));
  }
  __syncthreads();
  for (int e = threadIdx.x; e < C * kSoftPix; e += blockDim.x) {
    const int c = e / kSoftPix, p = e % kSoftPix;
    if (p < np) base[c * HW + p] = tile[c * (kSoftPix + 1) + p];
  }
}

// ---- group statistics: sum and sum of squares of f(v) over each (n, group), a group being
// contiguous (channels g*Cg .. g*Cg+Cg-1 of one image); grid (chunks, N * G).
template <bool GELU>
__global__ void group_stats_kernel(const float* __restrict__ y, double* __restrict__ stats, int64_t L, int chunk) {
  __shared__ double red[32];
  const float* g = y + (int64_t)blockIdx.y * L;
  const int64_t e0 = (int64_t)blockIdx.x * chunk, e1 = e0 + chunk < L ? e0 + chunk : L;
  float s = 0.f, ss = 0.f;
#pragma unroll 4
  for (int64_t e = e0 + threadIdx.x; e < e1; e += blockDim.x) {
    float v = __ldg(g + e);
    if (GELU) v = gelu(v);
    s += v;
    ss += v * v;
  }
  const double ts = block_sum(s, red), tss = block_sum(ss, red);
  if (threadIdx.x == 0) {
    atomicAdd(stats + 2 * blockIdx.y, ts);
    atomicAdd(stats + 2 * blockIdx.y + 1, tss);
  }
}

// mean and 1 / sqrt(biased variance + eps) from a (sum, sum of squares) pair over count values
__device__ __forceinline__ float2 mean_rstd(const double* st, double count, double eps) {
  const double mean = st[0] / count, var = fmax(st[1] / count - mean * mean, 0.0);
  return make_float2((float)mean, (float)(1.0 / sqrt(var + eps)));
}

// ---- 19: GELU -> GroupNorm, the normalization pass (same grid as the statistics); out may be y.
__global__ void gelu_group_norm_kernel(const float* __restrict__ y, float* __restrict__ out,
                                       const double* __restrict__ stats, const float* __restrict__ w,
                                       const float* __restrict__ b, int64_t L, int64_t HW, int C, int G, int chunk,
                                       float eps) {
  const int ng = blockIdx.y, grp = ng % G, cg = C / G;
  const float2 mr = mean_rstd(stats + 2 * ng, (double)L, eps);
  const int64_t off = (int64_t)ng * L, e0 = (int64_t)blockIdx.x * chunk, e1 = e0 + chunk < L ? e0 + chunk : L;
#pragma unroll 4
  for (int64_t e = e0 + threadIdx.x; e < e1; e += blockDim.x) {
    const int c = grp * cg + (int)(e / HW);
    out[off + e] = (gelu(__ldg(y + off + e)) - mr.x) * mr.y * __ldg(w + c) + __ldg(b + c);
  }
}

// ---- 19 in one kernel: GELU -> GroupNorm with y read from DRAM once. Work items, taken in order
// by persistent blocks from a counter: a piece (kGnChunk values) of one group's statistics, or of
// its normalization; group g's statistics come in slot g, its normalization in slot g + lag, so
// the normalization reads the group while it is still in L2 (lag groups behind: about lag x 2 MB
// at 19's shape), in the same launch (no pass over all of y between the two). A normalization
// piece waits until its group's statistic pieces are all in (done[g] == pieces); those were taken
// earlier by blocks that wait on nothing, so every wait ends. lag is larger than the items in
// flight (gridDim.x), so the waits are rare.
constexpr int kGnChunk = 16384;

struct GnItem {
  int64_t g;   // (n, group)
  int64_t piece;
  bool norm;
};

__device__ __forceinline__ GnItem gn_item(int64_t i, int64_t groups, int64_t P, int64_t lag) {
  // slots 0 .. lag-1: statistics only; lag .. groups-1: statistics of the slot, then the
  // normalization of slot - lag; groups .. groups+lag-1: normalization only
  if (i < lag * P) return {i / P, i % P, false};
  i -= lag * P;
  if (i < (groups - lag) * 2 * P) {
    const int64_t slot = lag + i / (2 * P), w = i % (2 * P);
    return w < P ? GnItem{slot, w, false} : GnItem{slot - lag, w - P, true};
  }
  i -= (groups - lag) * 2 * P;
  return {groups + i / P - lag, i % P, true};
}

__global__ void __launch_bounds__(kThreads) gelu_group_norm_one_pass_kernel(
    float* __restrict__ y, double* __restrict__ stats, int* __restrict__ done, int* __restrict__ next,
    const float* __restrict__ w, const float* __restrict__ b, int64_t L, int64_t HW, int C, int G, int64_t groups,
    int64_t P, int64_t lag, float eps) {
  __shared__ double red[32];
  __shared__ int64_t item_s;
  __shared__ float2 mr_s;
  const int64_t items = 2 * groups * P;
  const bool v4 = L % 4 == 0 && HW >= 4 && L < (1ll << 31);  // 16-byte accesses, 32-bit offsets in a group
  for (;;) {
    __syncthreads();  // item_s and mr_s are free
    if (threadIdx.x == 0) item_s = atomicAdd(next, 1);
    __syncthreads();
    const int64_t i = item_s;
    if (i >= items) return;
    const GnItem it = gn_item(i, groups, P, lag);
    float* gy = y + it.g * L;
    const int64_t e0 = it.piece * kGnChunk, e1 = min(e0 + kGnChunk, L);
    if (!it.norm) {
      float s = 0.f, ss = 0.f;
      if (v4) {
        for (int e = (int)e0 + 4 * threadIdx.x; e < (int)e1; e += 4 * kThreads) {
          const float4 q = __ldcg(reinterpret_cast<const float4*>(gy + e));
          const float v0 = gelu(q.x), v1 = gelu(q.y), v2 = gelu(q.z), v3 = gelu(q.w);
          s += (v0 + v1) + (v2 + v3);
          ss += (v0 * v0 + v1 * v1) + (v2 * v2 + v3 * v3);
        }
      } else {
        for (int64_t e = e0 + threadIdx.x; e < e1; e += kThreads) {
          const float v = gelu(__ldcg(gy + e));
          s += v;
          ss += v * v;
        }
      }
      const double ts = block_sum(s, red), tss = block_sum(ss, red);
      if (threadIdx.x == 0) {
        atomicAdd(stats + 2 * it.g, ts);
        atomicAdd(stats + 2 * it.g + 1, tss);
        __threadfence();  // the sums are visible before the count says so
        atomicAdd(done + it.g, 1);
      }
    } else {
      if (threadIdx.x == 0) {
        while (atomicAdd(done + it.g, 0) < P) __nanosleep(200);
        __threadfence();
        const double st[2] = {atomicAdd(stats + 2 * it.g, 0.0), atomicAdd(stats + 2 * it.g + 1, 0.0)};
        mr_s = mean_rstd(st, (double)L, eps);
      }
      __syncthreads();
      const float2 mr = mr_s;
      const int grp = (int)(it.g % G), cg = C / G;
      if (v4) {
        for (int e = (int)e0 + 4 * threadIdx.x; e < (int)e1; e += 4 * kThreads) {
          const int ce = e / (int)HW, rem = e - ce * (int)HW;  // a group of four spans one channel or two (HW >= 4)
          float4 q = __ldcg(reinterpret_cast<const float4*>(gy + e));
          float* qv = reinterpret_cast<float*>(&q);
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const int ck = grp * cg + ce + (rem + k >= (int)HW ? 1 : 0);
            qv[k] = (gelu(qv[k]) - mr.x) * mr.y * __ldg(w + ck) + __ldg(b + ck);
          }
          __stcs(reinterpret_cast<float4*>(gy + e), q);
        }
      } else {
        for (int64_t e = e0 + threadIdx.x; e < e1; e += kThreads) {
          const int c = grp * cg + (int)(e / HW);
          gy[e] = (gelu(gy[e]) - mr.x) * mr.y * __ldg(w + c) + __ldg(b + c);
        }
      }
    }
  }
}

// ---- 11: BatchNorm2d (training: the batch's statistics) -> tanh -> MaxPool2d(2, 2) -> GroupNorm.
// 1. per-channel sums over (N, H, W): grid (C, splits of N), each block's images as one flat run of
// V-float vectors (V = 4 where HW is a multiple of 4). Measured on the H200 (11's 303 MB): a loop
// per image of scalar loads ran at 1.3 TB/s (0.236 ms).
template <int V>
__global__ void __launch_bounds__(kThreads) channel_stats_kernel(const float* __restrict__ y, double* __restrict__ stats,
                                                                 int N, int C, int64_t HW, int n_per) {
  __shared__ double red[32];
  const int c = blockIdx.x, n0 = blockIdx.y * n_per, n1 = min(N, n0 + n_per);
  const int64_t hv = HW / V, total = (int64_t)(n1 - n0) * hv;
  float s = 0.f, ss = 0.f;
  for (int64_t i = threadIdx.x; i < total; i += blockDim.x) {
    const int64_t k = i / hv;
    const float* p = y + ((n0 + k) * C + c) * HW + (i - k * hv) * V;
    if constexpr (V == 4) {
      const float4 v = __ldg(reinterpret_cast<const float4*>(p));
      s += (v.x + v.y) + (v.z + v.w);
      ss += (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w);
    } else {
      const float v = __ldg(p);
      s += v;
      ss += v * v;
    }
  }
  const double ts = block_sum(s, red), tss = block_sum(ss, red);
  if (threadIdx.x == 0) {
    atomicAdd(stats + 2 * c, ts);
    atomicAdd(stats + 2 * c + 1, tss);
  }
}

// 2. the running statistics, as BatchNorm2d updates them in training (unbiased variance), and the
// normalization as one affine map per channel: affine[2c] = rstd * w, affine[2c + 1] = b - mean * that
__global__ void running_stats_kernel(const double* __restrict__ stats, float* __restrict__ rmean,
                                     float* __restrict__ rvar, float* __restrict__ affine, const float* __restrict__ w,
                                     const float* __restrict__ b, int C, double count, float momentum, float eps) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const double mean = stats[2 * c] / count, var = fmax(stats[2 * c + 1] / count - mean * mean, 0.0);
  rmean[c] = (1.f - momentum) * rmean[c] + momentum * (float)mean;
  rvar[c] = (1.f - momentum) * rvar[c] + momentum * (float)(count > 1 ? var * count / (count - 1) : var);
  const float2 mr = mean_rstd(stats + 2 * c, count, eps);
  const float scale = mr.y * w[c];
  affine[2 * c] = scale;
  affine[2 * c + 1] = b[c] - mr.x * scale;
}

// 3. normalize, tanh, 2x2 max pool, GroupNorm: a block per (n, group), which owns the group's
// statistics. tanh is increasing, so the pool's maximum is tanh of the window's largest
// normalized value (its smallest y where the channel's scale is negative): one tanhf per output.
// The pooled values go to p with their sums, then the block normalizes what it wrote (its own
// writes, read back by the threads that made them). W2: W even (8-byte pairs).
// Measured on the H200 (11: 303 MB read, 76 MB written): the previous kernels, a block per (n, c)
// for the pool and another pass for the group norm, took 0.289 + 0.108 ms (1.3 TB/s).
template <bool W2>
__global__ void __launch_bounds__(kThreads) bn_tanh_pool_group_norm_kernel(
    const float* __restrict__ y, float* __restrict__ p, const float* __restrict__ affine, const float* __restrict__ gw,
    const float* __restrict__ gb, int C, int H, int W, int Hp, int Wp, int G, float eps) {
  __shared__ double red[32];
  const int ng = blockIdx.x, n = ng / G, g = ng - n * G, cg = C / G;
  const int HWp = Hp * Wp, L = cg * HWp;
  const int64_t c0 = (int64_t)n * C + (int64_t)g * cg;  // the group's first (n, c) plane
  const float* src = y + c0 * H * W;
  float* dst = p + c0 * HWp;
  float s = 0.f, ss = 0.f;
  for (int e = threadIdx.x; e < L; e += blockDim.x) {
    const int ci = e / HWp, i = e - ci * HWp, r = i / Wp, q = i - r * Wp;
    const float* a = src + ((int64_t)ci * H + 2 * r) * W + 2 * q;
    float hi, lo;
    if constexpr (W2) {
      const float2 u = __ldg(reinterpret_cast<const float2*>(a)), v = __ldg(reinterpret_cast<const float2*>(a + W));
      hi = fmaxf(fmaxf(u.x, u.y), fmaxf(v.x, v.y));
      lo = fminf(fminf(u.x, u.y), fminf(v.x, v.y));
    } else {
      const float u0 = __ldg(a), u1 = __ldg(a + 1), v0 = __ldg(a + W), v1 = __ldg(a + W + 1);
      hi = fmaxf(fmaxf(u0, u1), fmaxf(v0, v1));
      lo = fminf(fminf(u0, u1), fminf(v0, v1));
    }
    const int c = g * cg + ci;
    const float scale = __ldg(affine + 2 * c), shift = __ldg(affine + 2 * c + 1);
    const float m = tanhf(fmaf(scale >= 0.f ? hi : lo, scale, shift));
    dst[e] = m;
    s += m;
    ss += m * m;
  }
  const double ts = block_sum(s, red), tss = block_sum(ss, red);
  const double mean = ts / L, var = fmax(tss / L - mean * mean, 0.0);
  const float fm = (float)mean, rstd = (float)(1.0 / sqrt(var + (double)eps));
  for (int e = threadIdx.x; e < L; e += blockDim.x) {
    const int c = g * cg + e / HWp;
    const float sc = rstd * __ldg(gw + c);
    dst[e] = (dst[e] - fm) * sc + __ldg(gb + c);
  }
}

void check_param(const torch::Tensor& t, int64_t n, const char* name) {
  TORCH_CHECK(t.is_cuda() && t.scalar_type() == at::kFloat && t.is_contiguous() && t.numel() == n, "tails: ", name,
              " must be a contiguous fp32 CUDA tensor of ", n, " elements");
}

}  // namespace

torch::Tensor pool_hardtanh_mean_tanh(torch::Tensor y, int64_t k, int64_t s, double lo, double hi) {
  check_y(y);
  const at::cuda::CUDAGuard guard(y.device());
  const int64_t N = y.size(0), C = y.size(1), H = y.size(2), W = y.size(3);
  const int64_t Hp = (H - k) / s + 1, Wp = (W - k) / s + 1;
  TORCH_CHECK(H >= k && W >= k && Hp > 0 && Wp > 0, "tails: the pool is larger than the image");
  auto out = torch::empty({N, C, 1, 1}, y.options());
  if (N * C == 0) return out;
  pool_mean_kernel<<<(unsigned)(N * C), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      y.data_ptr<float>(), out.data_ptr<float>(), H, W, k, s, Hp, Wp, (float)lo, (float)hi);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

torch::Tensor min_sum_gelu_add(torch::Tensor y, torch::Tensor bias) {
  check_y(y);
  check_param(bias, 1, "bias");
  const at::cuda::CUDAGuard guard(y.device());
  const int64_t N = y.size(0), C = y.size(1), H = y.size(2), W = y.size(3);
  auto sums = torch::zeros({N, 1, 1, W}, y.options());
  auto out = torch::empty_like(sums);
  const auto stream = at::cuda::getCurrentCUDAStream();
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  // row ranges: enough blocks for four per SM
  const int64_t col_blocks = (W + 31) / 32 * N;
  const int64_t splits = std::max<int64_t>(1, std::min<int64_t>(H, (4 * sms + col_blocks - 1) / col_blocks));
  const int rows_per = (int)((H + splits - 1) / splits);
  dim3 grid((unsigned)((W + 31) / 32), (unsigned)N, (unsigned)((H + rows_per - 1) / rows_per));
  min_sum_kernel<<<grid, dim3(32, 8), 0, stream>>>(y.data_ptr<float>(), sums.data_ptr<float>(), C, H, W, rows_per);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  gelu_add_kernel<<<blocks_for(N * W), kThreads, 0, stream>>>(sums.data_ptr<float>(), bias.data_ptr<float>(),
                                                              out.data_ptr<float>(), N * W);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

torch::Tensor softmax_bias_scale_sigmoid(torch::Tensor y, torch::Tensor bias, double scale) {
  check_y(y);
  const int64_t N = y.size(0), C = y.size(1), HW = y.size(2) * y.size(3);
  check_param(bias, C, "bias");
  const at::cuda::CUDAGuard guard(y.device());
  const size_t smem = (size_t)C * (kSoftPix + 1) * sizeof(float);
  TORCH_CHECK(smem <= 200 * 1024, "tails: softmax over more than 787 channels");
  if (smem > 48 * 1024) cudaFuncSetAttribute(softmax_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (N * C * HW == 0) return y;
  dim3 grid((unsigned)((HW + kSoftPix - 1) / kSoftPix), (unsigned)N);
  softmax_kernel<<<grid, kThreads, smem, at::cuda::getCurrentCUDAStream()>>>(y.data_ptr<float>(),
                                                                             bias.data_ptr<float>(), C, HW,
                                                                             (float)scale);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}

// 19's tail: in one kernel (y read from DRAM once; the solutions' path), or as two passes over y
// (statistics, then the normalization; tools/bench_tails.py's way to compare).
torch::Tensor gelu_group_norm_impl(torch::Tensor y, int64_t groups, torch::Tensor weight, torch::Tensor bias,
                                   double eps, bool one_pass) {
  check_y(y);
  const int64_t N = y.size(0), C = y.size(1), HW = y.size(2) * y.size(3);
  TORCH_CHECK(groups > 0 && C % groups == 0, "tails: channels must divide by the groups");
  check_param(weight, C, "weight");
  check_param(bias, C, "bias");
  const at::cuda::CUDAGuard guard(y.device());
  const int64_t L = C / groups * HW;
  const int64_t G = N * groups;
  if (N * L == 0) return y;
  const auto stream = at::cuda::getCurrentCUDAStream();
  if (one_pass) {
    const int64_t P = (L + kGnChunk - 1) / kGnChunk;
    const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    const int64_t grid = std::min<int64_t>(4 * sms, 2 * G * P);
    // the lag (in groups): more items than the blocks in flight, two slots to spare
    const int64_t lag = std::min<int64_t>(G, (grid + 2 * P - 1) / (2 * P) + 2);
    // one zeroed buffer: the sums (2 doubles per group), then done (an int per group) and the item counter
    auto buf = torch::zeros({2 * G + (G + 2) / 2 + 1}, y.options().dtype(at::kDouble));
    double* stats = buf.data_ptr<double>();
    int* done = reinterpret_cast<int*>(stats + 2 * G);
    int* next = done + G;
    TORCH_CHECK(2 * G * P < (1ll << 31), "tails: too many items for one launch");
    gelu_group_norm_one_pass_kernel<<<(unsigned)grid, kThreads, 0, stream>>>(
        y.data_ptr<float>(), stats, done, next, weight.data_ptr<float>(), bias.data_ptr<float>(), L, HW, (int)C,
        (int)groups, G, P, lag, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
  }
  auto stats = torch::zeros({G, 2}, y.options().dtype(at::kDouble));
  const int chunk = 16 * kThreads;
  dim3 grid((unsigned)((L + chunk - 1) / chunk), (unsigned)G);
  group_stats_kernel<true><<<grid, kThreads, 0, stream>>>(y.data_ptr<float>(), stats.data_ptr<double>(), L, chunk);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  gelu_group_norm_kernel<<<grid, kThreads, 0, stream>>>(y.data_ptr<float>(), y.data_ptr<float>(),
                                                        stats.data_ptr<double>(), weight.data_ptr<float>(),
                                                        bias.data_ptr<float>(), L, HW, C, groups, chunk, (float)eps);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}

torch::Tensor gelu_group_norm(torch::Tensor y, int64_t groups, torch::Tensor weight, torch::Tensor bias, double eps) {
  return gelu_group_norm_impl(y, groups, weight, bias, eps, true);
}

torch::Tensor gelu_group_norm_two_pass(torch::Tensor y, int64_t groups, torch::Tensor weight, torch::Tensor bias,
                                       double eps) {
  return gelu_group_norm_impl(y, groups, weight, bias, eps, false);
}

torch::Tensor batch_norm_tanh_pool_group_norm(torch::Tensor y, torch::Tensor bn_weight, torch::Tensor bn_bias,
                                              torch::Tensor running_mean, torch::Tensor running_var, double momentum,
                                              double bn_eps, int64_t groups, torch::Tensor gn_weight,
                                              torch::Tensor gn_bias, double gn_eps) {
  check_y(y);
  const int64_t N = y.size(0), C = y.size(1), H = y.size(2), W = y.size(3), HW = H * W;
  TORCH_CHECK(groups > 0 && C % groups == 0, "tails: channels must divide by the groups");
  TORCH_CHECK(H >= 2 && W >= 2, "tails: the 2x2 pool is larger than the image");
  for (auto* t : {&bn_weight, &bn_bias, &running_mean, &running_var, &gn_weight, &gn_bias})
    check_param(*t, C, "a normalization's parameter");
  const at::cuda::CUDAGuard guard(y.device());
  const int64_t Hp = (H - 2) / 2 + 1, Wp = (W - 2) / 2 + 1;
  TORCH_CHECK((C / groups) * Hp * Wp < (int64_t(1) << 31), "tails: a group of 2^31 pooled values or more");
  auto p = torch::empty({N, C, Hp, Wp}, y.options());
  auto stats = torch::zeros({C, 2}, y.options().dtype(at::kDouble));
  auto affine = torch::empty({C, 2}, y.options());
  double* cstats = stats.data_ptr<double>();
  if (N * C == 0) return p;
  const auto stream = at::cuda::getCurrentCUDAStream();
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t splits = std::max<int64_t>(1, std::min<int64_t>(N, (8 * sms + C - 1) / C));
  const int n_per = (int)((N + splits - 1) / splits);
  const dim3 sgrid((unsigned)C, (unsigned)((N + n_per - 1) / n_per));
  if (HW % 4 == 0 && reinterpret_cast<uintptr_t>(y.data_ptr()) % 16 == 0)
    channel_stats_kernel<4><<<sgrid, kThreads, 0, stream>>>(y.data_ptr<float>(), cstats, N, C, HW, n_per);
  else
    channel_stats_kernel<1><<<sgrid, kThreads, 0, stream>>>(y.data_ptr<float>(), cstats, N, C, HW, n_per);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const double count = (double)N * HW;
  running_stats_kernel<<<(unsigned)((C + 127) / 128), 128, 0, stream>>>(
      cstats, running_mean.data_ptr<float>(), running_var.data_ptr<float>(), affine.data_ptr<float>(),
      bn_weight.data_ptr<float>(), bn_bias.data_ptr<float>(), C, count, (float)momentum, (float)bn_eps);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  auto launch = [&](auto w2) {
    bn_tanh_pool_group_norm_kernel<decltype(w2)::value><<<(unsigned)(N * groups), kThreads, 0, stream>>>(
        y.data_ptr<float>(), p.data_ptr<float>(), affine.data_ptr<float>(), gn_weight.data_ptr<float>(),
        gn_bias.data_ptr<float>(), (int)C, (int)H, (int)W, (int)Hp, (int)Wp, (int)groups, (float)gn_eps);
  };
  if (W % 2 == 0 && reinterpret_cast<uintptr_t>(y.data_ptr()) % 8 == 0) launch(std::true_type{});
  else launch(std::false_type{});
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return p;
}
