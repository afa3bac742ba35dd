// The fp16 pre-passes of the wgmma fp16 kernels (wgmma.cuh; sm_90a builds only): wgh_amax (x's
// largest finite magnitude, for ct2d_wgh's scale) and fp16_convert (x, fp32 or bf16, to the fp16
// parts the kernels stage with 16-byte copies). Launched by run_wgh and run_wgf. Needs common.cuh.
#pragma once

#include "common.cuh"

namespace {
#if defined(CT2D_WGMMA)

// Largest finite |x| as float bits into *out (zeroed before).
__global__ void wgh_amax(const float* __restrict__ x, int64_t n, unsigned* __restrict__ out) {
  unsigned m = 0;
  const int64_t i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
  auto take = [&](float v) { m = finite_amax(m, v); };
  if ((reinterpret_cast<uintptr_t>(x) & 15) == 0) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    for (int64_t i = i0; i < n / 4; i += step) {
      const float4 v = __ldcs(x4 + i);
      take(v.x); take(v.y); take(v.z); take(v.w);
    }
    for (int64_t i = n / 4 * 4 + i0; i < n; i += step) take(x[i]);
  } else {
    for (int64_t i = i0; i < n; i += step) take(x[i]);
  }
  m = __reduce_max_sync(0xffffffffu, m);
  if ((threadIdx.x & 31) == 0 && m) atomicMax(out, m);
}

// x (N, Cin, H, W; fp32, or bf16 in a bf16 run) -> xs[part][n][c8][p][8]: P fp16 parts (hi =
// fp16(v); for P = 2 also lo = fp16(v - hi) at xs + half_elems), 16 bytes per pixel p and 8
// channels, channels past Cin zero.
// WGF_PX pixels 256 apart per thread, 8 channels each, loads coalesced along p (all 32 issued
// before any is used; 16-byte loads of 4 consecutive pixels, and __ldcs, measured slower). mode:
// kConvertUnscaled: v = x, and x's largest finite magnitude into *amax (zeroed before; one atomic
// per block, skipped where it would not raise it; ct2d_wgf); kConvertScaled: v = x * 2^wgh_exp(amax)
// (ct2d_wgh, after wgh_amax); kConvertRescale: the same, only where ct2d_wgf cannot take x unscaled
// (else it exits).
constexpr int WGF_PX = 4;
enum ConvertMode { kConvertUnscaled, kConvertScaled, kConvertRescale };
template <int P, class InT = float>
__global__ void __launch_bounds__(256) fp16_convert(const InT* __restrict__ x, unsigned* __restrict__ amax,
                                                    uint4* __restrict__ xs, int Cin, int C8, int HW,
                                                    int64_t half_elems, int mode) {
  float sc = 1.f;
  if (mode != kConvertUnscaled) {
    const unsigned a = *amax;
    if (mode == kConvertRescale && wgf_unscaled(a)) return;
    sc = ldexpf(1.f, wgh_exp(a));
  }
  const int c8 = blockIdx.y, n = blockIdx.z, nc = min(8, Cin - c8 * 8);
  const InT* xp = x + ((int64_t)n * Cin + c8 * 8) * HW;
  uint4* o = xs + ((int64_t)n * C8 + c8) * HW;
  unsigned m = 0;
  float v[WGF_PX][8];
  int p[WGF_PX];
#pragma unroll
  for (int j = 0; j < WGF_PX; ++j) p[j] = (blockIdx.x * WGF_PX + j) * 256 + threadIdx.x;
#pragma unroll
  for (int c = 0; c < 8; ++c)
#pragma unroll
    for (int j = 0; j < WGF_PX; ++j) v[j][c] = c < nc && p[j] < HW ? in_float(xp[(int64_t)c * HW + p[j]]) : 0.f;
#pragma unroll
  for (int j = 0; j < WGF_PX; ++j) {
    uint32_t h[4], l[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (mode == kConvertUnscaled) m = finite_amax(finite_amax(m, v[j][2 * k]), v[j][2 * k + 1]);
      const float v0 = v[j][2 * k] * sc, v1 = v[j][2 * k + 1] * sc;
      const __half2 hi = __floats2half2_rn(v0, v1);
      h[k] = *reinterpret_cast<const uint32_t*>(&hi);
      if (P == 2) {
        const float2 hf = __half22float2(hi);
        const __half2 lo = __floats2half2_rn(v0 - hf.x, v1 - hf.y);
        l[k] = *reinterpret_cast<const uint32_t*>(&lo);
      }
    }
    if (p[j] < HW) {
      o[p[j]] = make_uint4(h[0], h[1], h[2], h[3]);
      if (P == 2) o[p[j] + half_elems] = make_uint4(l[0], l[1], l[2], l[3]);
    }
  }
  if (mode != kConvertUnscaled) return;
  __shared__ unsigned wm[8];
  m = __reduce_max_sync(0xffffffffu, m);
  if ((threadIdx.x & 31) == 0) wm[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
#pragma unroll
    for (int i = 1; i < 8; ++i) m = max(m, wm[i]);
    if (m > *reinterpret_cast<volatile unsigned*>(amax)) atomicMax(amax, m);
  }
}
#endif  // CT2D_WGMMA
}  // namespace
